// open_dataset: names, splits, options, and the errors a user sees on the command line.
#include "datasets/registry.h"

#include <gtest/gtest.h>

#include "datasets/idx.h"
#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::TempDir;

TEST(DatasetRegistry, UnknownNameListsTheKnownOnes) {
  std::string msg = error_message([] { open_dataset("cifar-100", "train"); });
  EXPECT_TRUE(contains(msg, "unknown dataset 'cifar-100'"));
  EXPECT_TRUE(contains(msg, "fashion-mnist, mnist, synthetic"));
}

TEST(DatasetRegistry, NamesTheImageAndTextDataSets) {
  EXPECT_EQ(dataset_names(), (std::vector<std::string>{"fashion-mnist", "mnist", "synthetic",
                                                       "cifar10", "folder:PATH", "fortunes",
                                                       "text:PATH"}));
  std::string msg = error_message([] { open_dataset("folders:/tmp", "train"); });
  EXPECT_TRUE(contains(msg, "cifar10, folder:PATH"));
}

TEST(DatasetRegistry, ImageOptionsAreRejectedWhereTheyMeanNothing) {
  DatasetOptions options;
  options.augment = true;
  EXPECT_TRUE(contains(error_message([&] { open_dataset("synthetic", "train", options); }),
                       "synthetic: augmentation is not available"));
  options = {};
  options.data_dir = "/nonexistent";
  options.resize = 40;
  EXPECT_TRUE(contains(error_message([&] { open_dataset("mnist", "train", options); }),
                       "mnist: resize is not available"));
  options = {};
  options.augment = false;  // saying no is fine
  EXPECT_EQ(open_dataset("synthetic", "test", options)->image_shape(), (Shape{1, 28, 28}));
}

TEST(DatasetRegistry, UnknownSplit) {
  EXPECT_TRUE(contains(error_message([] { open_dataset("synthetic", "val"); }),
                       "unknown split 'val' (expected train or test)"));
}

TEST(DatasetRegistry, MnistNeedsADataDir) {
  std::string msg = error_message([] { open_dataset("mnist", "train"); });
  EXPECT_TRUE(contains(msg, "mnist: no data directory given"));
  EXPECT_TRUE(contains(msg, "--data-dir"));
}

TEST(DatasetRegistry, MnistFromADirectoryUsesMnistStatistics) {
  TempDir dir;
  std::vector<uint8_t> pixels(2 * 28 * 28, 0);
  pixels[0] = 255;
  testing::write_idx_split(dir, "t10k", 2, 28, 28, pixels, {3, 4}, true);
  DatasetOptions options;
  options.data_dir = dir.str();
  auto ds = open_dataset("mnist", "test", options);
  EXPECT_EQ(ds->name(), "mnist/test");
  EXPECT_EQ(ds->size(), 2);
  std::vector<float> image(784);
  int32_t label;
  ds->get(0, image.data(), &label);
  EXPECT_EQ(label, 3);
  EXPECT_NEAR(image[0], (1.0f - 0.1307f) / 0.3081f, 1e-6);
  EXPECT_NEAR(image[1], -0.1307f / 0.3081f, 1e-6);
  // The train split is absent here: the error names the paths and how to get the files.
  std::string msg = error_message([&] { open_dataset("mnist", "train", options); });
  EXPECT_TRUE(contains(msg, dir.file("train-images-idx3-ubyte.gz")));
  EXPECT_TRUE(contains(msg, "download the four MNIST IDX files"));
  // Explicit statistics win.
  options.mean = 0.0f;
  options.stddev = 1.0f;
  ds = open_dataset("mnist", "test", options);
  ds->get(0, image.data(), &label);
  EXPECT_EQ(image[0], 1.0f);
  // Per-channel statistics of a replicated grey plane must agree.
  options.channels = 3;
  options.channel_mean = {0.5f, 0.5f, 0.5f};
  ds = open_dataset("mnist", "test", options);
  image.resize(3 * 784);
  ds->get(0, image.data(), &label);
  EXPECT_EQ(image[2 * 784], 0.5f);
  options.channel_mean = {0.5f, 0.4f, 0.5f};
  EXPECT_TRUE(contains(error_message([&] { open_dataset("mnist", "test", options); }),
                       "per-channel mean values must be equal"));
}

TEST(DatasetRegistry, FashionMnistInAWrongDirectory) {
  TempDir dir;
  DatasetOptions options;
  options.data_dir = dir.file("missing");
  std::string msg = error_message([&] { open_dataset("fashion-mnist", "train", options); });
  EXPECT_TRUE(contains(msg, dir.file("missing/train-images-idx3-ubyte")));
  EXPECT_TRUE(contains(msg, "apt-get install dataset-fashion-mnist"));
}

TEST(DatasetRegistry, SyntheticFollowsTheImageOptions) {
  DatasetOptions options;
  options.image_size = 32;
  options.channels = 3;
  options.synthetic_size = 64;
  options.synthetic_classes = 4;
  auto train = open_dataset("synthetic", "train", options);
  EXPECT_EQ(train->size(), 64);
  EXPECT_EQ(train->image_shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(train->num_classes(), 4);
  EXPECT_EQ(train->name(), "synthetic/train");
  auto test = open_dataset("synthetic", "test", {});
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->image_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(open_dataset("synthetic", "train", {})->size(), 60000);
}

TEST(DatasetRegistry, SplitsOfDifferentImageSizesAreNamedWithTheFix) {
  // MNIST-format files whose test images are 5x5 and train images 4x4.
  TempDir dir;
  testing::write_idx_split(dir, "train", 2, 4, 4, std::vector<uint8_t>(32), {0, 1}, false);
  testing::write_idx_split(dir, "t10k", 2, 5, 5, std::vector<uint8_t>(50), {0, 1}, false);
  DatasetOptions o;
  o.data_dir = dir.str();
  auto train = open_dataset("mnist", "train", o);
  auto test = open_dataset("mnist", "test", o);
  std::string msg = error_message([&] { check_splits_match(*train, *test); });
  EXPECT_TRUE(contains(msg,
                       "the test split mnist/test has images of 1x5x5 (CxHxW) but the train "
                       "split mnist/train has 1x4x4"));
  EXPECT_TRUE(contains(msg, "pass --image-size N to resize both splits to NxN"));
  // One image size for both: they agree.
  o.image_size = 4;
  check_splits_match(*open_dataset("mnist", "train", o), *open_dataset("mnist", "test", o));
  // Channels or classes that differ.
  DatasetOptions grey, colour;
  grey.synthetic_size = colour.synthetic_size = 4;
  colour.channels = 3;
  msg = error_message([&] {
    check_splits_match(*open_dataset("synthetic", "train", grey),
                       *open_dataset("synthetic", "test", colour));
  });
  EXPECT_TRUE(contains(msg, "give both splits the same channels (--channels)"));
  DatasetOptions more = grey;
  more.synthetic_classes = 12;
  msg = error_message([&] {
    check_splits_match(*open_dataset("synthetic", "train", grey),
                       *open_dataset("synthetic", "test", more));
  });
  EXPECT_TRUE(contains(msg,
                       "the test split synthetic/test has 12 classes but the train split "
                       "synthetic/train has 10"));
}

}  // namespace
}  // namespace campo
