// CIFAR-10 binary batches: record layout and plane order, normalisation, the standard
// augmentation (determinism per (seed, epoch, index)), malformed files, and the registry.
#include "datasets/cifar10.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>

#include "datasets/registry.h"
#include "tests/datasets/idx_file_util.h"
#include "tests/datasets/image_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_message;
using testing::TempDir;

// Record r of file f: label (f + r) % 10, pixel (c, y, x) = (c * 80 + y * 5 + x * 3 + f + r).
uint8_t pixel(int f, int r, int c, int y, int x) {
  return uint8_t((c * 80 + y * 5 + x * 3 + f + r) % 256);
}

std::vector<uint8_t> batch_bytes(int f, int records) {
  std::vector<uint8_t> out;
  for (int r = 0; r < records; ++r) {
    out.push_back(uint8_t((f + r) % 10));
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) out.push_back(pixel(f, r, c, y, x));
  }
  return out;
}

// data_batch_1..5.bin (f = 1..5) and test_batch.bin (f = 0), two records each.
void write_cifar(const std::string& dir) {
  fs::create_directories(dir);
  for (int f = 1; f <= 5; ++f)
    testing::write_bytes(dir + "/data_batch_" + std::to_string(f) + ".bin", batch_bytes(f, 2),
                         false);
  testing::write_bytes(dir + "/test_batch.bin", batch_bytes(0, 2), false);
}

std::vector<float> sample(const Dataset& ds, int64_t index, int epoch = 0,
                          int32_t* label = nullptr) {
  std::vector<float> image(size_t(ds.image_numel()));
  int32_t l = -1;
  ds.get_for_epoch(index, epoch, image.data(), &l);
  if (label) *label = l;
  return image;
}

TEST(Cifar10, ReadsRecordsAsNormalisedRgbPlanes) {
  TempDir dir;
  write_cifar(dir.str());
  auto train = load_cifar10_split(dir.str(), "train");
  auto test = load_cifar10_split(dir.str(), "test");
  ASSERT_EQ(train->size(), 10);
  ASSERT_EQ(test->size(), 2);
  EXPECT_EQ(train->image_shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_EQ(train->name(), "cifar10/train");
  EXPECT_EQ(cifar10_class_names()[3], "cat");
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, stdv[3] = {0.2470f, 0.2435f, 0.2616f};
  for (int64_t i = 0; i < 10; ++i) {
    const int f = int(i / 2) + 1, r = int(i % 2);
    int32_t label;
    std::vector<float> image = sample(*train, i, 0, &label);
    EXPECT_EQ(label, (f + r) % 10);
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 32; y += 7)
        for (int x = 0; x < 32; x += 5)
          ASSERT_NEAR(image[size_t((c * 32 + y) * 32 + x)],
                      (float(pixel(f, r, c, y, x)) / 255 - mean[c]) / stdv[c], 1e-5)
              << i << " " << c << " " << y << " " << x;
  }
  int32_t label;
  sample(*test, 1, 0, &label);
  EXPECT_EQ(label, 1);
  EXPECT_EQ(test->raw_pixels(1)[1024 + 32 + 1], pixel(0, 1, 1, 1, 1));  // the G plane
}

TEST(Cifar10, StandardAugmentationIsDeterministicPerSeedEpochAndIndex) {
  TempDir dir;
  write_cifar(dir.str());
  Cifar10Options o;
  const std::vector<float> ref = sample(*load_cifar10_split(dir.str(), "train", o), 3);
  o.augment = true;
  o.seed = 9;
  auto a = load_cifar10_split(dir.str(), "train", o);
  auto b = load_cifar10_split(dir.str(), "train", o);
  // Black (pixel 0) after normalisation.
  const std::vector<float> black = {-0.4914f / 0.2470f, -0.4822f / 0.2435f, -0.4465f / 0.2616f};
  std::set<std::tuple<int64_t, int64_t, bool>> placements;
  for (int epoch = 0; epoch < 20; ++epoch) {
    const std::vector<float> x = sample(*a, 3, epoch);
    EXPECT_EQ(x, sample(*b, 3, epoch));
    testing::FoundCrop found = testing::find_crop(ref, 3, 32, 32, x, 32, 4, black);
    ASSERT_TRUE(found.found) << epoch;
    placements.insert({found.top, found.left, found.flip});
  }
  EXPECT_GE(placements.size(), 15u);              // 162 placements; 20 draws rarely repeat
  EXPECT_NE(sample(*a, 3, 0), sample(*a, 2, 0));  // other index, other draw (and image)
}

TEST(Cifar10, ResizeAndPerChannelStatistics) {
  TempDir dir;
  write_cifar(dir.str());
  DatasetOptions o;
  o.data_dir = dir.str();
  o.image_size = 64;
  o.channel_mean = {0.0f, 0.0f, 0.0f};
  o.channel_stddev = {1.0f, 1.0f, 1.0f};
  auto ds = open_dataset("cifar10", "test", o);
  EXPECT_EQ(ds->image_shape(), (Shape{3, 64, 64}));
  // 2x bilinear upsampling: output (2y + 1, 2x + 1) = 3/4 p(y, x) + 1/4 p(y + 1, x + 1)
  // in each direction.
  std::vector<float> image = sample(*ds, 0);
  auto p = [](int c, int y, int x) { return float(pixel(0, 0, c, y, x)) / 255; };
  const int y = 10, x = 6, c = 2;
  const float expected = 0.5625f * p(c, y, x) + 0.1875f * p(c, y, x + 1) +
                         0.1875f * p(c, y + 1, x) + 0.0625f * p(c, y + 1, x + 1);
  EXPECT_NEAR(image[size_t((c * 64 + 2 * y + 1) * 64 + 2 * x + 1)], expected, 1e-5);
}

TEST(Cifar10, MalformedFilesAreClearErrors) {
  TempDir dir;
  write_cifar(dir.str());
  std::vector<uint8_t> bytes = batch_bytes(3, 2);
  bytes.pop_back();
  testing::write_bytes(dir.file("data_batch_3.bin"), bytes, false);
  std::string msg = error_message([&] { load_cifar10_split(dir.str(), "train"); });
  EXPECT_TRUE(contains(msg, dir.file("data_batch_3.bin") + ": truncated"));
  EXPECT_TRUE(contains(msg, "6145 bytes is not a whole number of 3073-byte records"));

  bytes = batch_bytes(0, 2);
  bytes[3073] = 10;  // the label of record 1
  testing::write_bytes(dir.file("test_batch.bin"), bytes, false);
  msg = error_message([&] { load_cifar10_split(dir.str(), "test"); });
  EXPECT_TRUE(contains(msg, dir.file("test_batch.bin") + ": record 1 has label 10"));

  fs::remove(dir.file("data_batch_3.bin"));
  msg = error_message([&] { load_cifar10_split(dir.str(), "train"); });
  EXPECT_TRUE(contains(msg, "cannot find " + dir.file("data_batch_3.bin")));
  EXPECT_TRUE(contains(msg, "cifar-10-binary.tar.gz"));

  TempDir python;
  testing::write_bytes(python.file("data_batch_1"), {0x80, 0x02}, false);
  msg = error_message([&] { load_cifar10_split(python.str(), "train"); });
  EXPECT_TRUE(contains(msg, "python (pickle) version of CIFAR-10"));
  EXPECT_TRUE(contains(msg, "not supported"));
  msg = error_message([&] { load_cifar10_split(python.file("none"), "test"); });
  EXPECT_TRUE(contains(msg, "no such directory"));
}

TEST(Cifar10, ParsesABatchFromBytes) {
  // What a fuzzer calls; the data set's constructor goes through it too.
  const Cifar10Batch batch = parse_cifar10_batch(batch_bytes(2, 3), "mem");
  ASSERT_EQ(batch.labels, (std::vector<int32_t>{2, 3, 4}));
  ASSERT_EQ(batch.pixels.size(), 3u * 3072);
  // Record 1, pixel (c, y, x) = (2, 3, 4) of the planar 3 x 32 x 32 layout.
  EXPECT_EQ(batch.pixels[3072 + 2 * 1024 + 3 * 32 + 4], pixel(2, 1, 2, 3, 4));
  EXPECT_TRUE(contains(error_message([] { parse_cifar10_batch({}); }),
                       "<memory>: truncated or not a CIFAR-10 binary batch: 0 bytes"));
  std::vector<uint8_t> bad = batch_bytes(0, 1);
  bad[0] = 200;
  EXPECT_TRUE(contains(error_message([&] { parse_cifar10_batch(bad, "mem"); }),
                       "mem: record 0 has label 200"));
}

TEST(Cifar10, AFifoOrAnOversizedFileIsRefusedWithoutReading) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("fifo.bin").c_str(), 0600), 0);
  std::string msg = error_message([&] { Cifar10Dataset({dir.file("fifo.bin")}, {}); });
  EXPECT_TRUE(contains(msg, "CIFAR-10 batch file " + dir.file("fifo.bin") + " is a FIFO"));
  // A sparse file of whole records just over the bound: refused from its size alone.
  const std::string big = dir.file("big.bin");
  testing::write_bytes(big, {}, false);
  const uintmax_t records = kMaxCifar10BatchBytes / uintmax_t(kCifar10RecordBytes) + 1;
  fs::resize_file(big, records * uintmax_t(kCifar10RecordBytes));
  msg = error_message([&] { Cifar10Dataset({big}, {}); });
  EXPECT_TRUE(contains(msg, big + ": " + std::to_string(records * uintmax_t(kCifar10RecordBytes)) +
                                " bytes, too large for a CIFAR-10 batch"));
}

TEST(Cifar10Registry, OpensTheArchiveLayoutWithAugmentationOnlyForTrain) {
  TempDir dir;
  write_cifar(dir.file("cifar-10-batches-bin"));  // as the archive unpacks
  DatasetOptions o;
  o.data_dir = dir.str();
  auto train = std::dynamic_pointer_cast<Cifar10Dataset>(open_dataset("cifar10", "train", o));
  auto test = std::dynamic_pointer_cast<Cifar10Dataset>(open_dataset("cifar10", "test", o));
  ASSERT_TRUE(train && test);
  EXPECT_EQ(train->size(), 10);
  EXPECT_TRUE(train->transform().random);
  EXPECT_EQ(train->transform().padding, 4);
  EXPECT_FALSE(test->transform().random);
  o.augment = false;
  auto plain = std::dynamic_pointer_cast<Cifar10Dataset>(open_dataset("cifar10", "train", o));
  EXPECT_FALSE(plain->transform().random);

  EXPECT_TRUE(contains(error_message([] { open_dataset("cifar10", "train"); }),
                       "cifar10: no data directory given"));
  o.channels = 1;
  EXPECT_TRUE(
      contains(error_message([&] { open_dataset("cifar10", "train", o); }), "channels must be 3"));
}

}  // namespace
}  // namespace campo
