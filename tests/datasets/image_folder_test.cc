// Image folders: listing and labels, decoding of PNG / JPEG / BMP (grey and colour) to
// normalised values, resize + crop geometry, augmentation determinism per (seed, epoch,
// index) through the loader, bad files, and the folder:PATH registry entry.
#include "datasets/image_folder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "datasets/loader.h"
#include "datasets/registry.h"
#include "tests/datasets/idx_file_util.h"
#include "tests/datasets/image_test_util.h"

// stb_image_write's implementation, private to this test.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace campo {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_message;
using testing::TempDir;

// An 8-bit interleaved image.
struct Pixels {
  int h = 0, w = 0, c = 0;
  std::vector<uint8_t> data;
  uint8_t& at(int y, int x, int ch) { return data[size_t((y * w + x) * c + ch)]; }
};

Pixels solid(int h, int w, std::vector<uint8_t> colour) {
  Pixels p{h, w, int(colour.size()), {}};
  for (int i = 0; i < h * w; ++i) p.data.insert(p.data.end(), colour.begin(), colour.end());
  return p;
}

// R = 4x, G = 8y, B = 100 (x < 64, y < 32).
Pixels gradient(int h, int w) {
  Pixels p{h, w, 3, std::vector<uint8_t>(size_t(h * w * 3))};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      p.at(y, x, 0) = uint8_t(4 * x);
      p.at(y, x, 1) = uint8_t(8 * y);
      p.at(y, x, 2) = 100;
    }
  return p;
}

// Writes `p` at `path` as PNG, JPEG (quality 100) or BMP by the extension.
void write_image(const std::string& path, const Pixels& p) {
  fs::create_directories(fs::path(path).parent_path());
  std::string ext = fs::path(path).extension().string();
  for (char& ch : ext) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  int ok = 0;
  if (ext == ".png")
    ok = stbi_write_png(path.c_str(), p.w, p.h, p.c, p.data.data(), p.w * p.c);
  else if (ext == ".jpg")
    ok = stbi_write_jpg(path.c_str(), p.w, p.h, p.c, p.data.data(), 100);
  else if (ext == ".bmp")
    ok = stbi_write_bmp(path.c_str(), p.w, p.h, p.c, p.data.data());
  ASSERT_TRUE(ok) << path;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  testing::write_bytes(path, bytes, false);
}

ImageFolderOptions plain_options(int64_t size, int channels = 3) {
  ImageFolderOptions o;
  o.image_size = size;
  o.channels = channels;
  o.mean.assign(size_t(channels), 0.0f);
  o.stddev.assign(size_t(channels), 1.0f);
  return o;
}

std::vector<float> sample(const Dataset& ds, int64_t index, int epoch = 0,
                          int32_t* label = nullptr) {
  std::vector<float> image(size_t(ds.image_numel()));
  int32_t l = -1;
  ds.get_for_epoch(index, epoch, image.data(), &l);
  if (label) *label = l;
  return image;
}

TEST(ImageFolder, ClassesAreTheSortedSubfoldersAndLabelTheirFiles) {
  TempDir dir;
  const Pixels img = solid(4, 4, {10, 20, 30});
  write_image(dir.file("zebra/b.png"), img);
  write_image(dir.file("zebra/a.png"), img);
  write_image(dir.file("apple/x.png"), img);
  write_image(dir.file("apple/sub/y.PNG"), img);  // recursive, any-case extension
  write_image(dir.file("Mango/m.bmp"), img);
  write_file(dir.file("apple/notes.txt"), {1, 2, 3});  // not an image: ignored
  write_file(dir.file("apple/._x.png"), {0, 0, 0});    // hidden: ignored
  write_image(dir.file(".cache/z.png"), img);          // hidden folder: not a class
  ImageFolderDataset ds(dir.str(), plain_options(4));
  EXPECT_EQ(ds.classes(), (std::vector<std::string>{"Mango", "apple", "zebra"}));
  ASSERT_EQ(ds.size(), 5);
  EXPECT_EQ(ds.num_classes(), 3);
  EXPECT_EQ(ds.image_shape(), (Shape{3, 4, 4}));
  EXPECT_EQ(ds.name(), dir.str());
  const std::vector<std::pair<std::string, int>> expected = {{"Mango/m.bmp", 0},
                                                             {"apple/sub/y.PNG", 1},
                                                             {"apple/x.png", 1},
                                                             {"zebra/a.png", 2},
                                                             {"zebra/b.png", 2}};
  for (int64_t i = 0; i < ds.size(); ++i) {
    EXPECT_EQ(ds.path(i), dir.file(expected[size_t(i)].first));
    int32_t label;
    sample(ds, i, 0, &label);
    EXPECT_EQ(label, expected[size_t(i)].second) << i;
  }
}

TEST(ImageFolder, DecodesPngJpegAndBmpToNormalisedValues) {
  TempDir dir;
  write_image(dir.file("a/colour.png"), solid(10, 12, {200, 100, 50}));
  write_image(dir.file("a/colour.bmp"), solid(10, 12, {200, 100, 50}));
  write_image(dir.file("a/colour.jpg"), solid(16, 16, {200, 100, 50}));
  write_image(dir.file("a/grey.png"), solid(9, 9, {77}));
  write_image(dir.file("a/grey.jpg"), solid(8, 8, {77}));
  write_image(dir.file("a/rgba.png"), solid(9, 9, {200, 100, 50, 128}));

  // Colour model, ImageNet's statistics by default.
  ImageFolderOptions o;
  o.image_size = 6;
  ImageFolderDataset rgb(dir.file(""), o);
  ASSERT_EQ(rgb.size(), 6);
  const float mean[3] = {0.485f, 0.456f, 0.406f}, stdv[3] = {0.229f, 0.224f, 0.225f};
  for (int64_t i = 0; i < rgb.size(); ++i) {
    const bool grey = contains(rgb.path(i), "grey");
    const bool jpeg = contains(rgb.path(i), ".jpg");
    const float colour[3] = {200, 100, 50};
    // A solid JPEG block is pure DC: exact up to rounding in the colour conversion.
    const double tol = jpeg ? 2.5 / 255 / 0.224 : 1e-5;
    std::vector<float> image = sample(rgb, i);
    for (int c = 0; c < 3; ++c) {
      const float p = grey ? 77.0f : colour[c];
      for (int k = 0; k < 36; ++k)
        ASSERT_NEAR(image[size_t(c * 36 + k)], (p / 255 - mean[c]) / stdv[c], tol)
            << rgb.path(i) << " channel " << c;
    }
  }

  // Grey model: colour by luminance, 0.5 / 0.5 by default.
  ImageFolderOptions g;
  g.image_size = 6;
  g.channels = 1;
  ImageFolderDataset grey(dir.file(""), g);
  EXPECT_EQ(grey.image_shape(), (Shape{1, 6, 6}));
  for (int64_t i = 0; i < grey.size(); ++i) {
    const bool is_grey = contains(grey.path(i), "grey");
    const double y = is_grey ? 77 : 0.299 * 200 + 0.587 * 100 + 0.114 * 50;
    const double tol = contains(grey.path(i), ".jpg") ? 2.5 / 255 / 0.5 : 1e-5;
    for (float v : sample(grey, i)) ASSERT_NEAR(v, (y / 255 - 0.5) / 0.5, tol) << grey.path(i);
  }
}

TEST(ImageFolder, ResizesTheShorterSideThenCropsTheCentre) {
  // The 32 x 64 gradient, shorter side to 16 (16 x 32), centre crop 16: left = 8.
  TempDir dir;
  write_image(dir.file("a/g.png"), gradient(32, 64));
  ImageFolderOptions o = plain_options(16);
  o.resize = 16;
  ImageFolderDataset ds(dir.str(), o);
  std::vector<float> image = sample(ds, 0);
  for (int y = 1; y < 15; ++y)  // rows whose antialiasing window stays inside
    for (int x = 0; x < 16; ++x) {
      const double cx = (8 + x + 0.5) * 2, cy = (y + 0.5) * 2;
      ASSERT_NEAR(image[size_t(y * 16 + x)], 4 * (cx - 0.5) / 255, 1e-5);
      ASSERT_NEAR(image[size_t(256 + y * 16 + x)], 8 * (cy - 0.5) / 255, 1e-5);
      ASSERT_NEAR(image[size_t(512 + y * 16 + x)], 100.0 / 255, 1e-6);
    }
  // resize 0 means image_size: same result.
  o.resize = 0;
  EXPECT_EQ(sample(ImageFolderDataset(dir.str(), o), 0), image);
}

TEST(ImageFolder, AugmentationIsAFunctionOfSeedEpochAndIndex) {
  TempDir dir;
  for (int k = 0; k < 3; ++k)
    write_image(dir.file("c" + std::to_string(k) + "/g.png"), gradient(16, 16));
  ImageFolderOptions o = plain_options(16);
  o.padding = 3;
  ImageFolderDataset eval(dir.str(), o);
  o.augment = true;
  o.seed = 5;
  ImageFolderDataset a(dir.str(), o), b(dir.str(), o);
  o.seed = 6;
  ImageFolderDataset other_seed(dir.str(), o);

  const std::vector<float> ref = sample(eval, 0);
  EXPECT_EQ(sample(eval, 0, 7), ref);  // no augmentation: the same in every epoch
  std::set<std::vector<float>> draws;
  bool seed_matters = false;
  for (int epoch = 0; epoch < 12; ++epoch) {
    const std::vector<float> x = sample(a, 1, epoch);
    EXPECT_EQ(x, sample(a, 1, epoch));  // repeatable
    EXPECT_EQ(x, sample(b, 1, epoch));  // another instance, same seed
    seed_matters |= x != sample(other_seed, 1, epoch);
    draws.insert(x);
    // A window of the padded image (black = 0 here), mirrored or not.
    EXPECT_TRUE(testing::find_crop(ref, 3, 16, 16, x, 16, 3, {0, 0, 0}).found) << epoch;
  }
  EXPECT_GE(draws.size(), 6u);  // 98 placements: 12 draws repeat rarely
  EXPECT_TRUE(seed_matters);
  std::vector<float> image(size_t(a.image_numel()));
  int32_t label;
  a.get(1, image.data(), &label);
  EXPECT_EQ(image, sample(a, 1, 0));  // get() is epoch 0

  // The loader passes the epoch: its batches hold exactly these draws, prefetched or not.
  for (int prefetch : {0, 2}) {
    DataLoader loader(
        std::make_shared<ImageFolderDataset>(dir.str(), o),
        LoaderOptions{.batch_size = 2, .shuffle = true, .seed = 1, .prefetch = prefetch});
    for (int epoch : {0, 3}) {
      loader.start_epoch(epoch);
      const std::vector<int64_t> order = loader.epoch_order(epoch);
      Batch batch;
      int64_t seen = 0;
      while (loader.next(batch)) {
        for (int64_t i = 0; i < batch.size(); ++i, ++seen) {
          const std::vector<float> expected = sample(other_seed, order[size_t(seen)], epoch);
          const float* got = batch.images.data_as<float>() + i * 768;
          ASSERT_EQ(std::vector<float>(got, got + 768), expected) << epoch << " " << seen;
        }
      }
      EXPECT_EQ(seen, 3);
    }
  }
}

TEST(ImageFolder, CorruptFileIsAnErrorNamingIt) {
  TempDir dir;
  write_image(dir.file("a/good.png"), solid(4, 4, {1, 2, 3}));
  std::vector<uint8_t> noise(300);
  Rng rng(3);
  for (uint8_t& v : noise) v = uint8_t(rng.below(256));
  write_file(dir.file("a/bad.png"), noise);
  ImageFolderDataset ds(dir.str(), plain_options(4));  // construction only lists files
  ASSERT_EQ(ds.size(), 2);
  ASSERT_EQ(ds.path(0), dir.file("a/bad.png"));
  std::string msg = error_message([&] { sample(ds, 0); });
  EXPECT_TRUE(contains(msg, dir.file("a/bad.png")));
  EXPECT_TRUE(contains(msg, "cannot decode the image (stb_image: "));
  // Through the loader: the same error reaches the consumer.
  DataLoader loader(std::make_shared<ImageFolderDataset>(dir.str(), plain_options(4)),
                    LoaderOptions{.batch_size = 2, .shuffle = false});
  loader.start_epoch(0);
  Batch batch;
  EXPECT_TRUE(contains(error_message([&] { loader.next(batch); }), dir.file("a/bad.png")));
}

TEST(ImageFolder, SkipBadLeavesOutUnreadableFilesWithOneWarningEach) {
  TempDir dir;
  write_image(dir.file("a/good.png"), solid(4, 4, {1, 2, 3}));
  write_image(dir.file("b/good.jpg"), solid(4, 4, {1, 2, 3}));
  write_file(dir.file("a/bad.png"), std::vector<uint8_t>(100, 0xab));
  write_file(dir.file("b/empty.jpg"), {});
  ImageFolderOptions o = plain_options(4);
  o.skip_bad = true;
  ::testing::internal::CaptureStderr();
  ImageFolderDataset ds(dir.str(), o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.path(0), dir.file("a/good.png"));
  EXPECT_EQ(ds.path(1), dir.file("b/good.jpg"));
  EXPECT_EQ(ds.label_of(1), 1);
  EXPECT_TRUE(contains(err, "warning: " + dir.file("a/bad.png") + ": skipping"));
  EXPECT_TRUE(contains(err, dir.file("b/empty.jpg")));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2);
  sample(ds, 0);
  sample(ds, 1);

  // A sound header with damaged data passes the check, and get() says why it fails.
  TempDir cut;
  write_image(cut.file("a/whole.png"), gradient(32, 32));
  std::vector<uint8_t> bytes = testing::read_bytes(cut.file("a/whole.png"));
  bytes.resize(bytes.size() / 2);
  write_file(cut.file("a/cut.png"), bytes);
  ImageFolderDataset half(cut.str(), o);
  ASSERT_EQ(half.size(), 2);
  std::string msg = error_message([&] { sample(half, 0); });
  EXPECT_TRUE(contains(msg, cut.file("a/cut.png")));
  EXPECT_TRUE(contains(msg, "skip_bad checks only file headers"));

  // Nothing left.
  TempDir all_bad;
  write_file(all_bad.file("a/x.png"), {1, 2, 3});
  ::testing::internal::CaptureStderr();
  msg = error_message([&] { ImageFolderDataset(all_bad.str(), o); });
  ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(msg, "no usable images"));
}

TEST(ImageFolder, SkipBadLeavesOutImagesOverThePixelLimit) {
  TempDir dir;
  write_image(dir.file("a/good.png"), solid(4, 4, {1, 2, 3}));
  const std::string header = "P5\n10000 10000\n255\n";  // 100 M pixels announced, none there
  write_file(dir.file("a/huge.pgm"), std::vector<uint8_t>(header.begin(), header.end()));
  write_file(dir.file("a/bad.png"), std::vector<uint8_t>(100, 0xab));
  ImageFolderOptions o = plain_options(4);
  o.skip_bad = true;
  ::testing::internal::CaptureStderr();
  ImageFolderDataset ds(dir.str(), o);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(ds.size(), 1);
  EXPECT_TRUE(contains(err, dir.file("a/huge.pgm") +
                                ": skipping an unreadable image (10000x10000 is 100000000 pixels, "
                                "more than the 67108864 (8192 x 8192) this loader decodes"));
  EXPECT_TRUE(contains(err, dir.file("a/bad.png") + ": skipping an unreadable image (stb_image: "));
}

TEST(ImageFolder, EmptyOrMissingFoldersAreClearErrors) {
  TempDir dir;
  std::string msg = error_message([&] { ImageFolderDataset(dir.file("nope"), {}); });
  EXPECT_TRUE(contains(msg, dir.file("nope") + ": no such folder"));
  msg = error_message([&] { ImageFolderDataset(dir.str(), {}); });
  EXPECT_TRUE(contains(msg, dir.str() + ": no class folders"));
  write_image(dir.file("loose.png"), solid(2, 2, {0}));
  msg = error_message([&] { ImageFolderDataset(dir.str(), {}); });
  EXPECT_TRUE(contains(msg, "1 images lie directly in it"));
  write_image(dir.file("cat/a.png"), solid(2, 2, {0}));
  fs::create_directories(dir.file("dog/nested"));
  write_file(dir.file("dog/readme.txt"), {1});
  msg = error_message([&] { ImageFolderDataset(dir.str(), {}); });
  EXPECT_TRUE(contains(msg, dir.file("dog") + ": empty class folder"));
}

// A folder of two classes, a/1.png and b/2.png, for the symbolic-link tests.
void write_two_classes(const TempDir& dir) {
  write_image(dir.file("a/1.png"), solid(2, 2, {10}));
  write_image(dir.file("b/2.png"), solid(2, 2, {20}));
}

TEST(ImageFolderLinks, ALinkToAFolderIsRefusedNamingIt) {
  // a/up -> .. would list b's image under label a (and loop back into a).
  TempDir dir;
  write_two_classes(dir);
  fs::create_directory_symlink("..", dir.file("a/up"));
  std::string msg = error_message([&] { ImageFolderDataset(dir.str(), plain_options(2, 1)); });
  EXPECT_TRUE(contains(msg, dir.file("a/up") + ": a symbolic link to a folder")) << msg;
  EXPECT_TRUE(contains(msg, "not followed")) << msg;
  // The same for a link to a folder elsewhere.
  TempDir other, outside;
  write_two_classes(other);
  write_image(outside.file("more/3.png"), solid(2, 2, {30}));
  fs::create_directory_symlink(outside.file("more"), other.file("b/more"));
  msg = error_message([&] { ImageFolderDataset(other.str(), plain_options(2, 1)); });
  EXPECT_TRUE(contains(msg, other.file("b/more") + ": a symbolic link to a folder")) << msg;
}

TEST(ImageFolderLinks, ALoopOfLinksIsRefusedNamingIt) {
  TempDir dir;
  write_two_classes(dir);
  fs::create_symlink("loop2.png", dir.file("a/loop1.png"));
  fs::create_symlink("loop1.png", dir.file("a/loop2.png"));
  std::string msg = error_message([&] { ImageFolderDataset(dir.str(), plain_options(2, 1)); });
  // Either link may be listed first.
  EXPECT_TRUE(contains(msg, dir.file("a/loop"))) << msg;
  EXPECT_TRUE(contains(msg, ".png: a symbolic link that leads nowhere")) << msg;
  // A dangling image link, too.
  TempDir dangling;
  write_two_classes(dangling);
  fs::create_symlink("gone.png", dangling.file("b/x.png"));
  msg = error_message([&] { ImageFolderDataset(dangling.str(), plain_options(2, 1)); });
  EXPECT_TRUE(contains(msg, dangling.file("b/x.png") + ": a symbolic link that leads nowhere"))
      << msg;
}

TEST(ImageFolderLinks, ALinkToAFileOutsideItsClassFolderIsRefused) {
  // Into another class folder: its image would carry both labels.
  TempDir dir;
  write_two_classes(dir);
  fs::create_symlink("../b/2.png", dir.file("a/stolen.png"));
  std::string msg = error_message([&] { ImageFolderDataset(dir.str(), plain_options(2, 1)); });
  EXPECT_TRUE(
      contains(msg, dir.file("a/stolen.png") + ": a symbolic link to " + dir.file("b/2.png")))
      << msg;
  EXPECT_TRUE(contains(msg, "outside its class folder " + dir.file("a"))) << msg;
  // Out of the data set altogether.
  TempDir escaping, outside;
  write_two_classes(escaping);
  write_image(outside.file("3.png"), solid(2, 2, {30}));
  fs::create_symlink(outside.file("3.png"), escaping.file("b/3.png"));
  msg = error_message([&] { ImageFolderDataset(escaping.str(), plain_options(2, 1)); });
  EXPECT_TRUE(contains(msg, escaping.file("b/3.png") + ": a symbolic link to ")) << msg;
  EXPECT_TRUE(contains(msg, "outside its class folder")) << msg;
}

TEST(ImageFolderLinks, ALinkToAFileInsideItsClassFolderIsFollowed) {
  TempDir dir;
  write_two_classes(dir);
  write_image(dir.file("a/sub/3.png"), solid(2, 2, {30}));
  fs::create_symlink("sub/3.png", dir.file("a/alias.png"));
  fs::create_symlink("../b/2.png", dir.file("a/notes.txt"));  // not an image name: ignored
  fs::create_symlink("nowhere", dir.file("b/readme"));        // dangling, not an image: ignored
  ImageFolderDataset ds(dir.str(), plain_options(2, 1));
  ASSERT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.path(0), dir.file("a/1.png"));
  EXPECT_EQ(ds.path(1), dir.file("a/alias.png"));
  EXPECT_EQ(ds.path(2), dir.file("a/sub/3.png"));
  EXPECT_EQ(ds.label_of(1), 0);
  EXPECT_EQ(ds.label_of(3), 1);
  EXPECT_NEAR(sample(ds, 1)[0], 30.0f / 255, 1e-6);
}

TEST(ImageFolderLinks, ClassFoldersMayBeLinksButNeverShareImages) {
  // A class folder linked to a folder elsewhere is that folder.
  TempDir dir, elsewhere;
  write_two_classes(dir);
  write_image(elsewhere.file("cats/c.png"), solid(2, 2, {40}));
  fs::create_directory_symlink(elsewhere.file("cats"), dir.file("c"));
  ImageFolderDataset ds(dir.str(), plain_options(2, 1));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.path(2), dir.file("c/c.png"));
  EXPECT_EQ(ds.label_of(2), 2);
  // One class folder linked to another: the images would carry two labels.
  fs::create_directory_symlink("a", dir.file("d"));
  std::string msg = error_message([&] { ImageFolderDataset(dir.str(), plain_options(2, 1)); });
  EXPECT_TRUE(contains(msg, "through a symbolic link")) << msg;
  EXPECT_TRUE(contains(msg, dir.file("d"))) << msg;
  fs::remove(dir.file("d"));
  // A class folder linked to the root holds every other class.
  fs::create_directory_symlink(".", dir.file("e"));
  msg = error_message([&] { ImageFolderDataset(dir.str(), plain_options(2, 1)); });
  EXPECT_TRUE(contains(msg, dir.file("e") + " (")) << msg;
  EXPECT_TRUE(contains(msg, "holds class folder")) << msg;
}

TEST(ImageFolderRegistry, SplitFoldersShareTheTrainClasses) {
  TempDir dir;
  for (const char* cls : {"ant", "bee", "cow"})
    write_image(dir.file(std::string("train/") + cls + "/1.png"), solid(8, 8, {9, 9, 9}));
  write_image(dir.file("test/cow/1.png"), solid(8, 8, {9, 9, 9}));  // ant, bee: absent
  DatasetOptions o;
  o.image_size = 8;
  const std::string name = "folder:" + dir.str();
  auto train = open_dataset(name, "train", o);
  auto test = open_dataset(name, "test", o);
  EXPECT_EQ(train->name(), name + "/train");
  EXPECT_EQ(test->name(), name + "/test");
  EXPECT_EQ(train->size(), 3);
  EXPECT_EQ(train->image_shape(), (Shape{3, 8, 8}));
  ASSERT_EQ(test->size(), 1);
  EXPECT_EQ(test->num_classes(), 3);
  int32_t label;
  sample(*test, 0, 0, &label);
  EXPECT_EQ(label, 2);  // cow is class 2 of the train folder
  // Augmentation: on for train, off for test, unless asked.
  EXPECT_TRUE(dynamic_cast<const ImageFolderDataset&>(*train).transform().random);
  EXPECT_FALSE(dynamic_cast<const ImageFolderDataset&>(*test).transform().random);
  o.augment = false;
  EXPECT_FALSE(
      dynamic_cast<const ImageFolderDataset&>(*open_dataset(name, "train", o)).transform().random);
  // "folder" with a data directory is the same thing.
  o.data_dir = dir.str();
  EXPECT_EQ(open_dataset("folder", "test", o)->size(), 1);

  // A test class the train folder lacks would shift the labels: an error.
  write_image(dir.file("test/dog/1.png"), solid(8, 8, {9, 9, 9}));
  std::string msg = error_message([&] { open_dataset(name, "test", o); });
  EXPECT_TRUE(contains(msg, dir.file("test/dog") + ": a class folder that the training"));
  // val/ stands in for test/.
  fs::rename(dir.file("test"), dir.file("val"));
  fs::remove_all(dir.file("val/dog"));
  EXPECT_EQ(open_dataset(name, "test", o)->name(), name + "/test");
}

TEST(ImageFolderRegistry, ATestSplitNeedsATestFolderOrAHoldOut) {
  TempDir dir;
  for (int k = 0; k < 10; ++k) {
    write_image(dir.file("a/" + std::to_string(k) + ".png"), solid(4, 4, {1}));
    if (k < 3) write_image(dir.file("b/" + std::to_string(k) + ".png"), solid(4, 4, {1}));
  }
  const std::string name = "folder:" + dir.str();
  DatasetOptions o;
  o.image_size = 4;
  o.channels = 1;
  EXPECT_EQ(open_dataset(name, "train", o)->size(), 13);
  std::string msg = error_message([&] { open_dataset(name, "test", o); });
  EXPECT_TRUE(contains(msg, dir.str() + " holds the class folders directly"));
  EXPECT_TRUE(contains(msg, "hold-out"));

  o.holdout = 0.25;
  auto train = std::dynamic_pointer_cast<ImageFolderDataset>(open_dataset(name, "train", o));
  auto test = std::dynamic_pointer_cast<ImageFolderDataset>(open_dataset(name, "test", o));
  // floor(10 * 0.25) = 2 of a, floor(3 * 0.25) = 0 of b.
  EXPECT_EQ(train->size(), 11);
  ASSERT_EQ(test->size(), 2);
  std::set<std::string> all;
  for (int64_t i = 0; i < train->size(); ++i) all.insert(train->path(i));
  for (int64_t i = 0; i < test->size(); ++i) all.insert(test->path(i));
  EXPECT_EQ(all.size(), 13u);                     // disjoint, and together everything
  EXPECT_EQ(test->path(0), dir.file("a/3.png"));  // j = 3: floor(4 / 4) > floor(3 / 4)
  EXPECT_FALSE(test->transform().random);

  fs::create_directories(dir.file("x"));
  fs::rename(dir.file("a"), dir.file("x/train"));
  msg = error_message([&] { open_dataset("folder:" + dir.file("x"), "train", o); });
  EXPECT_TRUE(contains(msg, "no class folders"));  // x/train holds images, not classes
}

TEST(ImageFolderRegistry, RejectsMisuse) {
  TempDir dir;
  write_image(dir.file("a/1.png"), solid(4, 4, {1}));
  EXPECT_TRUE(
      contains(error_message([] { open_dataset("folder:", "train"); }), "no path after 'folder:'"));
  EXPECT_TRUE(contains(error_message([] { open_dataset("folder", "train"); }),
                       "use folder:PATH or pass --data-dir"));
  EXPECT_TRUE(contains(error_message([&] { open_dataset("folder:" + dir.file("z"), "train"); }),
                       "no such folder"));
  DatasetOptions o;
  o.channel_mean = {0.5f, 0.5f};
  EXPECT_TRUE(contains(error_message([&] { open_dataset("folder:" + dir.str(), "train", o); }),
                       "2 mean values given for 3 channels"));
  o = {};
  o.channels = 2;
  EXPECT_TRUE(contains(error_message([&] { open_dataset("folder:" + dir.str(), "train", o); }),
                       "channels must be 1 or 3"));
}

}  // namespace
}  // namespace campo
