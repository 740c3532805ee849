// Image preprocessing: resize and crop geometry against hand-computed values (torchvision's
// conventions), channel conversion, normalisation, and the random crop + flip.
#include "datasets/image_transform.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "runtime/check.h"
#include "tests/datasets/image_test_util.h"

namespace campo {
namespace {

ImageTransform eval_transform(int64_t crop, int64_t resize, int64_t channels) {
  ImageTransform t;
  t.crop = crop;
  t.resize = resize;
  t.channels = channels;
  t.mean.assign(size_t(channels), 0.0f);
  t.stddev.assign(size_t(channels), 1.0f);
  return t;
}

TEST(ImageTransform, CentreCropRoundsHalfToEvenAsTorchvision) {
  Rng rng(0);
  // top = round((H - crop) / 2) with Python's round: 2.5 -> 2, 1.5 -> 2, 3.5 -> 4.
  for (auto [size, top] : {std::pair{37, 2}, {35, 2}, {39, 4}, {36, 2}, {32, 0}, {30, -1}}) {
    CropPlacement p = place_crop(size, size, eval_transform(32, 0, 1), rng);
    EXPECT_EQ(p.top, top) << size;
    EXPECT_EQ(p.left, top) << size;
    EXPECT_FALSE(p.flip);
  }
}

TEST(ImageTransform, ResizeSetsTheShorterSide) {
  Rng rng(0);
  // The longer side becomes int(resize * long / short).
  for (auto [h, w, resize, rh, rw] : {std::tuple{32, 64, 16, 16, 32},
                                      {48, 30, 20, 32, 20},
                                      {100, 75, 64, 85, 64},
                                      {50, 50, 20, 20, 20},
                                      {3, 1000, 2, 2, 666}}) {
    CropPlacement p = place_crop(h, w, eval_transform(16, resize, 1), rng);
    EXPECT_EQ(p.resized_height, rh) << h << "x" << w;
    EXPECT_EQ(p.resized_width, rw) << h << "x" << w;
  }
}

TEST(ImageTransform, SameSizeIsTheIdentityAndNormalisesPerChannel) {
  const int64_t h = 6, w = 5;
  std::vector<uint8_t> px(size_t(h * w * 3));
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 37 % 256);
  ImageTransform t = eval_transform(5, 0, 3);
  t.mean = {0.1f, 0.2f, 0.3f};
  t.stddev = {0.5f, 0.25f, 2.0f};
  std::vector<float> out(3 * 25);
  Rng rng(0);
  transform_image(ImageView::interleaved(px.data(), h, w, 3), t, rng, out.data());
  // Centre crop of 6 rows to 5: top = round(0.5) = 0.
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 5; ++y)
      for (int64_t x = 0; x < 5; ++x) {
        float p = float(px[size_t((y * w + x) * 3 + c)]) / 255.0f;
        EXPECT_NEAR(out[size_t((c * 5 + y) * 5 + x)], (p - t.mean[c]) / t.stddev[c], 1e-6)
            << c << "," << y << "," << x;
      }
}

TEST(ImageTransform, DownscaleOfAGradientSamplesTheRightPlaces) {
  // R = 4x, G = 8y, B = 100 on 32 x 64; resize the shorter side to 16 (-> 16 x 32, a
  // factor 2), centre crop 16: left = 8. A symmetric filter reproduces a linear ramp, so
  // away from the edges output (y, x) is the ramp at source centre ((r + 0.5) * 2).
  const int64_t h = 32, w = 64;
  std::vector<uint8_t> px(size_t(h * w * 3));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      px[size_t((y * w + x) * 3 + 0)] = uint8_t(4 * x);
      px[size_t((y * w + x) * 3 + 1)] = uint8_t(8 * y);
      px[size_t((y * w + x) * 3 + 2)] = 100;
    }
  ImageTransform t = eval_transform(16, 16, 3);
  std::vector<float> out(3 * 16 * 16);
  Rng rng(0);
  transform_image(ImageView::interleaved(px.data(), h, w, 3), t, rng, out.data());
  const int64_t plane = 16 * 16;
  for (int64_t y = 0; y < 16; ++y)
    for (int64_t x = 0; x < 16; ++x) {
      const double cx = (double(8 + x) + 0.5) * 2, cy = (double(y) + 0.5) * 2;
      EXPECT_NEAR(out[size_t(y * 16 + x)], 4 * (cx - 0.5) / 255, 1e-5) << y << "," << x;
      if (y >= 1 && y <= 14)  // the antialiasing window (radius 2) stays inside
        EXPECT_NEAR(out[size_t(plane + y * 16 + x)], 8 * (cy - 0.5) / 255, 1e-5) << y;
      EXPECT_NEAR(out[size_t(2 * plane + y * 16 + x)], 100.0 / 255, 1e-6);
    }
}

TEST(ImageTransform, UpscaleIsBilinearWithHalfPixelCentres) {
  // A 4 x 4 image of rows [0, 40, 80, 120] -> 8 x 8: PyTorch's
  // interpolate(bilinear, align_corners=False) gives [0, 10, 30, 50, 70, 90, 110, 120].
  std::vector<uint8_t> px(16);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) px[size_t(y * 4 + x)] = uint8_t(40 * x);
  std::vector<float> out(64);
  Rng rng(0);
  transform_image(ImageView::interleaved(px.data(), 4, 4, 1), eval_transform(8, 8, 1), rng,
                  out.data());
  const float expected[8] = {0, 10, 30, 50, 70, 90, 110, 120};
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) EXPECT_NEAR(out[size_t(y * 8 + x)], expected[x] / 255, 1e-6);
}

TEST(ImageTransform, ConvertsChannels) {
  Rng rng(0);
  // Colour -> grey: Y = 0.299 R + 0.587 G + 0.114 B; the alpha of RGBA is dropped.
  const uint8_t rgba[4] = {200, 100, 50, 7};
  for (int64_t n : {3, 4}) {
    std::vector<uint8_t> px;
    for (int i = 0; i < 4; ++i) px.insert(px.end(), rgba, rgba + n);
    float out[4];
    transform_image(ImageView::interleaved(px.data(), 2, 2, n), eval_transform(2, 0, 1), rng, out);
    for (float v : out) EXPECT_NEAR(v, (0.299 * 200 + 0.587 * 100 + 0.114 * 50) / 255, 1e-6);
  }
  // Grey (and grey + alpha) -> colour: the plane replicated, then normalised per channel.
  for (int64_t n : {1, 2}) {
    std::vector<uint8_t> px(size_t(4 * n), 51);
    ImageTransform t = eval_transform(2, 0, 3);
    t.mean = {0.0f, 0.1f, 0.2f};
    float out[12];
    transform_image(ImageView::interleaved(px.data(), 2, 2, n), t, rng, out);
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[c * 4 + i], 0.2f - 0.1f * float(c), 1e-6);
  }
}

TEST(ImageTransform, RandomCropIsAWindowOfThePaddedImageAndFlipsHalfTheTime) {
  const int64_t side = 8, padding = 2;
  std::vector<uint8_t> px(size_t(side * side * 3));
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7 % 251);
  const ImageView view = ImageView::interleaved(px.data(), side, side, 3);
  ImageTransform t = eval_transform(side, 0, 3);
  t.mean = {0.5f, 0.4f, 0.3f};
  std::vector<float> ref(size_t(3 * side * side)), out(ref.size());
  Rng rng(0);
  transform_image(view, t, rng, ref.data());
  t.random = true;
  t.padding = padding;
  const std::vector<float> black = {-0.5f, -0.4f, -0.3f};
  std::set<std::tuple<int64_t, int64_t, bool>> seen;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    Rng a(seed), b(seed);
    transform_image(view, t, a, out.data());
    const CropPlacement p = place_crop(side, side, t, b);
    testing::FoundCrop found = testing::find_crop(ref, 3, side, side, out, side, padding, black);
    ASSERT_TRUE(found.found) << "seed " << seed;
    EXPECT_EQ(std::tuple(found.top, found.left, found.flip), std::tuple(p.top, p.left, p.flip));
    seen.insert({p.top, p.left, p.flip});
  }
  EXPECT_EQ(seen.size(), 50u);  // all 5 x 5 offsets, both ways round
}

TEST(ImageTransform, RejectsBadSettings) {
  ImageTransform t = eval_transform(8, 0, 3);
  t.mean = {0.5f};
  EXPECT_THROW(t.validate("x"), Error);
  t = eval_transform(8, 0, 2);
  EXPECT_THROW(t.validate("x"), Error);
  t = eval_transform(0, 0, 1);
  EXPECT_THROW(t.validate("x"), Error);
  t = eval_transform(8, 0, 1);
  t.stddev = {0.0f};
  EXPECT_THROW(t.validate("x"), Error);
}

}  // namespace
}  // namespace campo
