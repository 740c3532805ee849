// IDX decoding: round trips of small files (plain and gzip), normalisation, resize and
// channel replication, and one clear error per kind of bad input.
#include "datasets/idx.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>

#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::TempDir;

// 5 images of 3x4 with distinct pixels, labels 0..4 mod 3.
struct Small {
  static constexpr uint32_t kCount = 5, kRows = 3, kCols = 4;
  std::vector<uint8_t> pixels, labels;
  Small() {
    for (uint32_t i = 0; i < kCount * kRows * kCols; ++i) pixels.push_back(uint8_t(i * 17 % 256));
    for (uint32_t i = 0; i < kCount; ++i) labels.push_back(uint8_t(i % 3));
  }
};

IdxOptions identity_options() {
  IdxOptions o;
  o.mean = 0.0f;
  o.stddev = 1.0f;
  return o;
}

class IdxRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(IdxRoundTrip, DecodesWhatWasWritten) {
  const bool gzip = GetParam();
  TempDir dir;
  Small s;
  testing::write_idx_split(dir, "train", s.kCount, s.kRows, s.kCols, s.pixels, s.labels, gzip);
  testing::write_idx_split(dir, "t10k", 1, s.kRows, s.kCols,
                           std::vector<uint8_t>(s.pixels.begin(), s.pixels.begin() + 12), {2},
                           gzip);

  const std::string ext = gzip ? ".gz" : "";
  IdxImages raw = read_idx_images(dir.file("train-images-idx3-ubyte" + ext));
  EXPECT_EQ(raw.count, 5);
  EXPECT_EQ(raw.rows, 3);
  EXPECT_EQ(raw.cols, 4);
  EXPECT_EQ(raw.pixels, s.pixels);
  EXPECT_EQ(read_idx_labels(dir.file("train-labels-idx1-ubyte" + ext)), s.labels);

  auto train = load_idx_split(dir.str(), "train", identity_options());
  ASSERT_EQ(train->size(), 5);
  EXPECT_EQ(train->image_shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(train->num_classes(), 10);
  EXPECT_EQ(train->name(), "fashion-mnist/train");
  std::vector<float> image(12);
  for (int64_t i = 0; i < 5; ++i) {
    int32_t label = -1;
    train->get(i, image.data(), &label);
    EXPECT_EQ(label, int32_t(s.labels[size_t(i)]));
    for (int64_t p = 0; p < 12; ++p)
      EXPECT_EQ(image[size_t(p)], float(s.pixels[size_t(i * 12 + p)]) / 255.0f) << i << " " << p;
  }
  auto test = load_idx_split(dir.str(), "test", identity_options());
  ASSERT_EQ(test->size(), 1);
  int32_t label = -1;
  test->get(0, image.data(), &label);
  EXPECT_EQ(label, 2);
  EXPECT_EQ(image[1], 17.0f / 255.0f);
}

INSTANTIATE_TEST_SUITE_P(Idx, IdxRoundTrip, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "gzip" : "plain"; });

TEST(Idx, NormalisesWithMeanAndStd) {
  TempDir dir;
  Small s;
  testing::write_idx_split(dir, "train", s.kCount, s.kRows, s.kCols, s.pixels, s.labels, true);
  IdxOptions o;  // Fashion-MNIST defaults
  auto ds = load_idx_split(dir.str(), "train", o);
  std::vector<float> image(12);
  int32_t label;
  ds->get(2, image.data(), &label);
  for (int64_t p = 0; p < 12; ++p) {
    float expected = (float(s.pixels[size_t(24 + p)]) / 255.0f - 0.2860f) / 0.3530f;
    EXPECT_NEAR(image[size_t(p)], expected, 1e-6);
  }
}

TEST(Idx, GetRejectsOutOfRangeIndex) {
  TempDir dir;
  Small s;
  testing::write_idx_split(dir, "train", s.kCount, s.kRows, s.kCols, s.pixels, s.labels, false);
  auto ds = load_idx_split(dir.str(), "train", identity_options());
  std::vector<float> image(12);
  int32_t label;
  EXPECT_TRUE(contains(error_message([&] { ds->get(5, image.data(), &label); }),
                       "sample index 5 is out of range [0, 5)"));
  EXPECT_TRUE(contains(error_message([&] { ds->get(-1, image.data(), &label); }), "-1"));
}

// Naive bilinear resize (align_corners=False, clamped), in double: the oracle.
std::vector<double> bilinear_reference(const std::vector<double>& in, int64_t h, int64_t w,
                                       int64_t oh, int64_t ow) {
  auto coord = [](int64_t o, int64_t n, int64_t out) {
    double s = (double(o) + 0.5) * double(n) / double(out) - 0.5;
    return std::clamp(s, 0.0, double(n - 1));
  };
  std::vector<double> out(size_t(oh * ow));
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x) {
      double sy = coord(y, h, oh), sx = coord(x, w, ow);
      int64_t y0 = int64_t(std::floor(sy)), x0 = int64_t(std::floor(sx));
      int64_t y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
      double fy = sy - double(y0), fx = sx - double(x0);
      out[size_t(y * ow + x)] =
          (1 - fy) * ((1 - fx) * in[size_t(y0 * w + x0)] + fx * in[size_t(y0 * w + x1)]) +
          fy * ((1 - fx) * in[size_t(y1 * w + x0)] + fx * in[size_t(y1 * w + x1)]);
    }
  return out;
}

TEST(Idx, ResizesBilinearlyAndReplicatesChannels) {
  TempDir dir;
  const uint32_t n = 2, side = 5;
  std::vector<uint8_t> pixels;
  for (uint32_t i = 0; i < n * side * side; ++i) pixels.push_back(uint8_t((i * 37 + 11) % 256));
  testing::write_idx_split(dir, "train", n, side, side, pixels, {1, 7}, false);
  for (int size : {3, 8, 13}) {
    IdxOptions o;
    o.image_size = size;
    o.channels = 3;
    auto ds = load_idx_split(dir.str(), "train", o);
    ASSERT_EQ(ds->image_shape(), (Shape{3, size, size}));
    std::vector<float> image(size_t(3 * size * size));
    for (int64_t i = 0; i < n; ++i) {
      int32_t label;
      ds->get(i, image.data(), &label);
      EXPECT_EQ(label, i == 0 ? 1 : 7);
      std::vector<double> in(side * side);
      for (size_t p = 0; p < in.size(); ++p)
        in[p] = (pixels[size_t(i) * side * side + p] / 255.0 - 0.2860) / 0.3530;
      std::vector<double> ref = bilinear_reference(in, side, side, size, size);
      for (int c = 0; c < 3; ++c)
        for (size_t p = 0; p < ref.size(); ++p)
          ASSERT_NEAR(image[c * ref.size() + p], ref[p], 1e-5)
              << "size " << size << " sample " << i << " channel " << c << " pixel " << p;
    }
  }
  // Resizing to the native size is the identity.
  IdxOptions o = identity_options();
  o.image_size = side;
  auto ds = load_idx_split(dir.str(), "train", o);
  std::vector<float> image(side * side);
  int32_t label;
  ds->get(1, image.data(), &label);
  for (size_t p = 0; p < image.size(); ++p) EXPECT_EQ(image[p], pixels[side * side + p] / 255.0f);
}

TEST(Idx, BadOptionsAreRejected) {
  TempDir dir;
  Small s;
  testing::write_idx_split(dir, "train", s.kCount, s.kRows, s.kCols, s.pixels, s.labels, false);
  IdxOptions o;
  o.channels = 2;
  EXPECT_TRUE(contains(error_message([&] { load_idx_split(dir.str(), "train", o); }),
                       "channels must be 1 or 3, got 2"));
  o = IdxOptions();
  o.stddev = 0;
  EXPECT_TRUE(
      contains(error_message([&] { load_idx_split(dir.str(), "train", o); }), "positive std"));
  EXPECT_TRUE(contains(error_message([&] { load_idx_split(dir.str(), "validation"); }),
                       "unknown split 'validation'"));
}

// ---- Bad input: one clear error naming the file ----

TEST(IdxErrors, MissingFileNamesPathsAndPackage) {
  TempDir dir;
  std::string msg = error_message([&] { load_idx_split(dir.str(), "train"); });
  EXPECT_TRUE(contains(msg, dir.file("train-images-idx3-ubyte")));
  EXPECT_TRUE(contains(msg, dir.file("train-images-idx3-ubyte.gz")));
  EXPECT_TRUE(contains(msg, "apt-get install dataset-fashion-mnist"));

  // Images present, labels missing: the labels are named.
  Small s;
  testing::write_bytes(dir.file("t10k-images-idx3-ubyte.gz"),
                       testing::idx_bytes(0x803, {5, 3, 4}, s.pixels), true);
  msg = error_message([&] { load_idx_split(dir.str(), "test"); });
  EXPECT_TRUE(contains(msg, "test labels"));
  EXPECT_TRUE(contains(msg, dir.file("t10k-labels-idx1-ubyte.gz")));

  msg = error_message([&] { load_idx_split(dir.file("nowhere"), "train"); });
  EXPECT_TRUE(contains(msg, "the directory does not exist"));

  msg = error_message([&] { read_idx_images(dir.file("absent")); });
  EXPECT_TRUE(contains(msg, dir.file("absent")));
  EXPECT_TRUE(contains(msg, "no such file"));
}

class IdxErrorsBoth : public ::testing::TestWithParam<bool> {};

TEST_P(IdxErrorsBoth, WrongMagicPrintsBothInHex) {
  TempDir dir;
  const std::string path = dir.file("images");
  testing::write_bytes(path, testing::idx_bytes(0x00000801, {5}, std::vector<uint8_t>(5)),
                       GetParam());
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, path));
  EXPECT_TRUE(contains(msg, "wrong magic number 0x00000801, expected 0x00000803"));
  EXPECT_TRUE(contains(msg, "label file"));

  testing::write_bytes(path, testing::idx_bytes(0x12345678, {5}, std::vector<uint8_t>(8)),
                       GetParam());
  msg = error_message([&] { read_idx_labels(path); });
  EXPECT_TRUE(contains(msg, "wrong magic number 0x12345678, expected 0x00000801"));
}

TEST_P(IdxErrorsBoth, TruncatedPixelData) {
  TempDir dir;
  const std::string path = dir.file("images");
  // Header announces 5 * 3 * 4 = 60 bytes; 50 follow.
  testing::write_bytes(path, testing::idx_bytes(0x803, {5, 3, 4}, std::vector<uint8_t>(50)),
                       GetParam());
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, path));
  // A plain file's size is checked against the header before anything is read.
  EXPECT_TRUE(contains(msg, GetParam() ? "truncated file: expected 60 bytes of pixel data, got 50"
                                       : "truncated file: the header announces 60 bytes of "
                                         "pixel data, but only 50 follow it"));
}

TEST_P(IdxErrorsBoth, AFifoIsRefusedWithoutReading) {
  TempDir dir;
  const std::string path = dir.file("images");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, "IDX file " + path + " is a FIFO, not a regular file"));
}

TEST_P(IdxErrorsBoth, ParsesBytesInMemoryLikeAFile) {
  // What a fuzzer calls: the same results and messages as the file readers.
  TempDir dir;
  const Small s;
  testing::write_bytes(
      dir.file("images"),
      testing::idx_bytes(0x803, {Small::kCount, Small::kRows, Small::kCols}, s.pixels), GetParam());
  testing::write_bytes(dir.file("labels"), testing::idx_bytes(0x801, {Small::kCount}, s.labels),
                       GetParam());
  const std::vector<uint8_t> image_bytes = testing::read_bytes(dir.file("images"));
  const IdxImages images = parse_idx_images(image_bytes, "mem-images");
  EXPECT_EQ(images.count, Small::kCount);
  EXPECT_EQ(images.rows, Small::kRows);
  EXPECT_EQ(images.cols, Small::kCols);
  EXPECT_EQ(images.pixels, s.pixels);
  EXPECT_EQ(parse_idx_labels(testing::read_bytes(dir.file("labels"))), s.labels);
  std::vector<uint8_t> cut(image_bytes.begin(), image_bytes.end() - 10);
  std::string msg = error_message([&] { parse_idx_images(cut, "mem-images"); });
  EXPECT_TRUE(contains(msg, "mem-images: truncated file")) << msg;
  EXPECT_TRUE(contains(error_message([&] { parse_idx_labels(image_bytes); }),
                       "<memory>: wrong magic number 0x00000803"));
  EXPECT_TRUE(contains(error_message([&] { parse_idx_images({}); }), "<memory>: truncated file"));
}

TEST_P(IdxErrorsBoth, AHeaderOverTheSizeBoundIsRefusedBeforeReading) {
  // 3 x 65536 x 32768 = 6 GiB of pixels: over kMaxIdxBytes, refused from the header alone.
  TempDir dir;
  const std::string path = dir.file("images");
  testing::write_bytes(path, testing::idx_bytes(0x803, {3, 65536, 32768}, {}), GetParam());
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, path + ": the header announces 3 images of 65536x32768, implausibly "
                                   "large (more than the 4 GiB"));
}

TEST(IdxErrors, APlainFileShorterThanItsHeaderSaysIsRefusedBeforeAllocating) {
  // A million 28x28 images announced, 100 bytes present.
  TempDir dir;
  const std::string path = dir.file("images");
  testing::write_bytes(
      path, testing::idx_bytes(0x803, {1000000, 28, 28}, std::vector<uint8_t>(100)), false);
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, "the header announces 784000000 bytes of pixel data, but only 100"));
  // 2^31 images of 1x1, within the size bound: the file size refuses them.
  testing::write_bytes(path, testing::idx_bytes(0x803, {0x80000000u, 1, 1}, {}), false);
  EXPECT_TRUE(contains(error_message([&] { read_idx_images(path); }),
                       "the header announces 2147483648 bytes of pixel data, but only 0"));
  // 2^31 x 2^31 x 1: a side over the bound.
  testing::write_bytes(path, testing::idx_bytes(0x803, {0x80000000u, 0x80000000u, 1}, {}), false);
  EXPECT_TRUE(contains(error_message([&] { read_idx_images(path); }),
                       "image size 2147483648x1 in the header is implausibly large"));
}

TEST(IdxErrors, TrailingGzipDataIsCountedOnlyUpToALimit) {
  // Five labels, then 2 MiB of zeros that compress to a few KiB: counting stops past 1 MiB.
  TempDir dir;
  const std::string path = dir.file("labels.gz");
  std::vector<uint8_t> data(5 + (size_t(2) << 20), 0);
  testing::write_bytes(path, testing::idx_bytes(0x801, {5}, data), true);
  std::string msg = error_message([&] { read_idx_labels(path); });
  EXPECT_TRUE(contains(msg, path + ": more than 1048576 unexpected bytes after the 5 bytes"));
}

TEST_P(IdxErrorsBoth, TruncatedHeader) {
  TempDir dir;
  const std::string path = dir.file("images");
  testing::write_bytes(path, {0, 0, 8, 3, 0, 0}, GetParam());
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, path));
  EXPECT_TRUE(contains(msg, "truncated file: 6 bytes, too short for the 16-byte IDX image header"));
}

TEST_P(IdxErrorsBoth, TrailingBytes) {
  TempDir dir;
  const std::string path = dir.file("labels");
  testing::write_bytes(path, testing::idx_bytes(0x801, {5}, std::vector<uint8_t>(7)), GetParam());
  std::string msg = error_message([&] { read_idx_labels(path); });
  EXPECT_TRUE(contains(msg, path));
  EXPECT_TRUE(contains(msg, "2 unexpected bytes after the 5 bytes of label data"));
}

TEST_P(IdxErrorsBoth, CountMismatch) {
  TempDir dir;
  Small s;
  testing::write_idx_split(dir, "train", s.kCount, s.kRows, s.kCols, s.pixels, {1, 2, 3, 4},
                           GetParam());
  std::string msg = error_message([&] { load_idx_split(dir.str(), "train"); });
  EXPECT_TRUE(contains(msg, "holds 5 images but"));
  EXPECT_TRUE(contains(msg, "holds 4 labels"));
  EXPECT_TRUE(contains(msg, "train-labels-idx1-ubyte"));
}

TEST_P(IdxErrorsBoth, LabelOutOfRange) {
  TempDir dir;
  Small s;
  testing::write_idx_split(dir, "train", s.kCount, s.kRows, s.kCols, s.pixels, {1, 2, 10, 4, 0},
                           GetParam());
  std::string msg = error_message([&] { load_idx_split(dir.str(), "train"); });
  EXPECT_TRUE(contains(msg, "train-labels-idx1-ubyte"));
  EXPECT_TRUE(contains(msg, "label 10 of sample 2 is out of range for 10 classes"));
}

INSTANTIATE_TEST_SUITE_P(Idx, IdxErrorsBoth, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "gzip" : "plain"; });

TEST(IdxErrors, ImplausibleHeader) {
  TempDir dir;
  const std::string path = dir.file("images");
  testing::write_bytes(path, testing::idx_bytes(0x803, {0xffffffffu, 0xffffffffu, 0xffffu}, {}),
                       false);
  EXPECT_TRUE(contains(error_message([&] { read_idx_images(path); }), "implausibly large"));
}

// A valid gzip file of 60 pixels, with bytes of its deflate stream or trailer altered.
std::vector<uint8_t> gzip_of_images(const TempDir& dir) {
  std::vector<uint8_t> pixels(60);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 31);
  testing::write_bytes(dir.file("valid.gz"), testing::idx_bytes(0x803, {5, 3, 4}, pixels), true);
  return testing::read_bytes(dir.file("valid.gz"));
}

TEST(IdxErrors, CorruptGzipCrc) {
  TempDir dir;
  std::vector<uint8_t> gz = gzip_of_images(dir);
  gz[gz.size() - 8] ^= 0xff;  // the CRC-32 of the trailer
  const std::string path = dir.file("images.gz");
  testing::write_bytes(path, gz, false);
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, path));
  EXPECT_TRUE(contains(msg, "corrupt gzip stream"));
}

TEST(IdxErrors, CorruptGzipData) {
  TempDir dir;
  std::vector<uint8_t> gz = gzip_of_images(dir);
  // Block header bits of the deflate stream (after the 10-byte gzip header) set to the
  // reserved block type 3: an invalid stream whatever the data.
  gz[10] |= 0x06;
  const std::string path = dir.file("images.gz");
  testing::write_bytes(path, gz, false);
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, path));
  EXPECT_TRUE(contains(msg, "corrupt gzip stream (zlib: invalid block type)"));
}

TEST(IdxErrors, TruncatedGzipStream) {
  TempDir dir;
  std::vector<uint8_t> gz = gzip_of_images(dir);
  gz.resize(gz.size() - 20);  // cut inside the deflate data
  const std::string path = dir.file("images.gz");
  testing::write_bytes(path, gz, false);
  std::string msg = error_message([&] { read_idx_images(path); });
  EXPECT_TRUE(contains(msg, path));
  EXPECT_TRUE(contains(msg, "truncated file"));
  EXPECT_TRUE(contains(msg, "the gzip stream ends early"));
}

}  // namespace
}  // namespace campo
