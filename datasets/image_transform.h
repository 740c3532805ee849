// Image preprocessing shared by the image data sets (image folders, CIFAR-10): 8-bit
// pixels in any layout -> a normalised f32 CHW square, through
//
//   1. channel conversion: grey -> colour by replication, colour -> grey by luminance
//      Y = 0.299 R + 0.587 G + 0.114 B (ITU-R 601, as PIL's convert("L")); an alpha
//      channel is dropped (not composited);
//   2. resize of the shorter side to `resize` (the longer side to
//      floor(resize * long / short), as torchvision's Resize(int)), bilinear, with PIL's
//      antialiasing when shrinking: output pixel r of an axis of n -> m pixels averages
//      the inputs i with weights max(0, 1 - |i + 0.5 - c| / s), c = (r + 0.5) n / m,
//      s = max(1, n / m), normalised to sum 1 (for s = 1 this is plain bilinear
//      interpolation with half-pixel centres, clamped at the edges);
//   3. a square crop of side `crop`:
//        evaluation: centred, top = round_half_even((H - crop) / 2) (torchvision's
//                    CenterCrop; Python's round),
//        training:   a black border of `padding` pixels on each side, then a uniformly
//                    random window, then a horizontal flip with probability 1/2
//                    (torchvision's RandomCrop(crop, padding) + RandomHorizontalFlip());
//      pixels of the window outside the image are black (0 before normalisation), so an
//      image smaller than the crop is centred on black;
//   4. x = (p / 255 - mean[c]) / std[c] per output channel.
//
// Random draws, in this order from the given Rng: top offset, left offset, flip.
// Linear steps commute, so the implementation resamples only the pixels the crop keeps:
// the cost is proportional to the source rows it touches times the output width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/rng.h"

namespace campo {

// Per-channel statistics of common data sets, in [0, 1] pixel units.
inline const std::vector<float> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline const std::vector<float> kImageNetStd = {0.229f, 0.224f, 0.225f};
inline const std::vector<float> kCifar10Mean = {0.4914f, 0.4822f, 0.4465f};
inline const std::vector<float> kCifar10Std = {0.2470f, 0.2435f, 0.2616f};

// A read-only 8-bit image in any layout: pixel (c, y, x) is
// data[c * stride_c + y * stride_y + x * stride_x]. channels: 1 grey, 2 grey + alpha,
// 3 RGB, 4 RGBA.
struct ImageView {
  const uint8_t* data = nullptr;
  int64_t height = 0, width = 0, channels = 0;
  int64_t stride_c = 0, stride_y = 0, stride_x = 0;

  // Interleaved rows (stb_image's layout): stride_x = channels.
  static ImageView interleaved(const uint8_t* data, int64_t height, int64_t width,
                               int64_t channels);
  // Separate planes (CIFAR-10's layout): stride_c = height * width.
  static ImageView planar(const uint8_t* data, int64_t height, int64_t width, int64_t channels);
};

struct ImageTransform {
  int64_t crop = 0;      // side of the square output, > 0
  int64_t resize = 0;    // shorter side after the resize; 0: keep the source size
  int64_t padding = 0;   // training only: black border on each side before the random crop
  bool random = false;   // training: random crop + horizontal flip; else a centre crop
  int64_t channels = 3;  // output channels, 1 or 3
  std::vector<float> mean, stddev;  // one per output channel, in [0, 1] pixel units

  // Throws a campo::Error prefixed with `who` when a field is out of range.
  void validate(const std::string& who) const;
};

// Where the crop window lies in the resized image, and whether it is mirrored.
struct CropPlacement {
  int64_t resized_height = 0, resized_width = 0;
  int64_t top = 0, left = 0;  // may be negative (padding, or an image smaller than the crop)
  bool flip = false;
};

// The placement for an image of height x width; draws from `rng` only when t.random.
CropPlacement place_crop(int64_t height, int64_t width, const ImageTransform& t, Rng& rng);

// Writes t.channels * t.crop * t.crop floats (CHW) to `out`. `rng` is used only when
// t.random.
void transform_image(const ImageView& src, const ImageTransform& t, Rng& rng, float* out);

}  // namespace campo
