// SyntheticDataset: a pure function of (seed, stream, index), balanced-ish, and learnable
// (a nearest-class-mean classifier fit on the train stream classifies the test stream).
#include "datasets/synthetic.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

std::vector<float> sample(const Dataset& ds, int64_t i, int32_t* label) {
  std::vector<float> image(size_t(ds.image_numel()));
  ds.get(i, image.data(), label);
  return image;
}

TEST(Synthetic, DeterministicPerSeedAndIndex) {
  SyntheticOptions o{.size = 100, .image_shape = {3, 8, 8}, .num_classes = 5, .seed = 42};
  SyntheticDataset a(o), b(o);
  EXPECT_EQ(a.image_shape(), (Shape{3, 8, 8}));
  EXPECT_EQ(a.num_classes(), 5);
  int32_t la, lb;
  std::vector<float> a7 = sample(a, 7, &la);
  sample(a, 3, &lb);  // the order of calls does not matter
  std::vector<float> b7 = sample(b, 7, &lb);
  EXPECT_EQ(a7, b7);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(sample(a, 7, &la), a7);
  EXPECT_NE(sample(a, 8, &la), a7);

  o.seed = 43;
  SyntheticDataset c(o);
  EXPECT_NE(sample(c, 7, &la), a7);

  o.seed = 42;
  o.stream = 1;  // the test stream: other samples, same prototypes
  SyntheticDataset test(o);
  EXPECT_NE(sample(test, 7, &la), a7);
  for (int cls = 0; cls < 5; ++cls)
    for (int64_t p = 0; p < a.image_numel(); ++p)
      ASSERT_EQ(a.prototype(cls)[p], test.prototype(cls)[p]);
}

TEST(Synthetic, LabelsAreSpreadAndLearnable) {
  const int classes = 10;
  SyntheticOptions o{.size = 400, .image_shape = {1, 12, 12}, .num_classes = classes, .seed = 7};
  SyntheticDataset train(o);
  o.stream = 1;
  SyntheticDataset test(o);
  const int64_t numel = train.image_numel();

  std::vector<double> means(size_t(classes * numel), 0.0);
  std::vector<int> counts(classes, 0);
  double pixel_sum = 0, pixel_sq = 0;
  for (int64_t i = 0; i < train.size(); ++i) {
    int32_t label;
    std::vector<float> x = sample(train, i, &label);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, classes);
    ++counts[size_t(label)];
    for (int64_t p = 0; p < numel; ++p) {
      means[size_t(label * numel + p)] += x[size_t(p)];
      pixel_sum += x[size_t(p)];
      pixel_sq += double(x[size_t(p)]) * x[size_t(p)];
    }
  }
  for (int c = 0; c < classes; ++c) {
    EXPECT_GT(counts[size_t(c)], 15) << "class " << c;  // 40 expected
    for (int64_t p = 0; p < numel; ++p) means[size_t(c * numel + p)] /= counts[size_t(c)];
  }
  const double n = double(train.size() * numel);
  const double mean = pixel_sum / n, var = pixel_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.3);
  EXPECT_GT(var, 0.3);  // not a constant image
  EXPECT_LT(var, 3.0);

  int correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    int32_t label;
    std::vector<float> x = sample(test, i, &label);
    int best = -1;
    double best_d = 1e300;
    for (int c = 0; c < classes; ++c) {
      double d = 0;
      for (int64_t p = 0; p < numel; ++p) {
        double diff = x[size_t(p)] - means[size_t(c * numel + p)];
        d += diff * diff;
      }
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == label;
  }
  EXPECT_GT(double(correct) / double(test.size()), 0.9);
}

TEST(Synthetic, BadOptionsAreRejected) {
  EXPECT_TRUE(contains(error_message([] {
                         SyntheticDataset({.image_shape = {28, 28}});
                       }),
                       "image shape must be [C, H, W] with positive sizes, got [28, 28]"));
  EXPECT_TRUE(contains(error_message([] { SyntheticDataset({.num_classes = 0}); }),
                       "num_classes must be positive"));
  EXPECT_TRUE(contains(error_message([] { SyntheticDataset({.size = -1}); }), "size must be >= 0"));
  SyntheticDataset ds({.size = 3});
  std::vector<float> image(784);
  int32_t label;
  EXPECT_TRUE(contains(error_message([&] { ds.get(3, image.data(), &label); }),
                       "synthetic: sample index 3 is out of range [0, 3)"));
}

}  // namespace
}  // namespace campo
