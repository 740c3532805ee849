#include "datasets/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/check.h"

namespace campo {
namespace {

// Python's round((d) / 2) for an integer d: halves go to the even neighbour.
int64_t half_round_even(int64_t d) {
  int64_t q = d >= 0 ? d / 2 : -((-d + 1) / 2);  // floor(d / 2)
  if (d % 2 != 0 && q % 2 != 0) ++q;
  return q;
}

// The resampling taps of one output axis: output o reads source pixels
// [first[o], first[o] + count[o]) with weights[offset[o] + k]; count 0 means black.
struct AxisTaps {
  std::vector<int64_t> first;
  std::vector<int32_t> count, offset;
  std::vector<float> weights;
};

// Taps for the crop window [start, start + len) of an axis resized from n to m pixels,
// mirrored when `flip`. See the header for the filter.
AxisTaps axis_taps(int64_t n, int64_t m, int64_t start, int64_t len, bool flip) {
  AxisTaps t;
  t.first.resize(size_t(len));
  t.count.resize(size_t(len));
  t.offset.resize(size_t(len));
  const double scale = double(n) / double(m);
  const double support = std::max(scale, 1.0);
  std::vector<double> w;
  for (int64_t o = 0; o < len; ++o) {
    const int64_t r = start + (flip ? len - 1 - o : o);
    t.offset[size_t(o)] = int32_t(t.weights.size());
    if (r < 0 || r >= m) {
      t.first[size_t(o)] = 0;
      t.count[size_t(o)] = 0;
      continue;
    }
    const double center = (double(r) + 0.5) * scale;
    int64_t lo = std::max<int64_t>(int64_t(center - support + 0.5), 0);
    int64_t hi = std::min<int64_t>(int64_t(center + support + 0.5), n);
    w.clear();
    double sum = 0;
    for (int64_t i = lo; i < hi; ++i) {
      double wi = std::max(0.0, 1.0 - std::fabs((double(i) - center + 0.5) / support));
      w.push_back(wi);
      sum += wi;
    }
    // Drop zero weights at both ends (at scale 1 the second tap always has weight 0).
    size_t b = 0, e = w.size();
    while (e > b + 1 && w[e - 1] == 0.0) --e;
    while (b + 1 < e && w[b] == 0.0) ++b;
    t.first[size_t(o)] = lo + int64_t(b);
    t.count[size_t(o)] = int32_t(e - b);
    for (size_t k = b; k < e; ++k) t.weights.push_back(float(w[k] / sum));
  }
  return t;
}

// One output channel as a weighted sum of source channels (weights include the 1/255).
struct ChannelMix {
  int n = 0;
  int64_t channel[3] = {0, 0, 0};
  float weight[3] = {0, 0, 0};
};

}  // namespace

ImageView ImageView::interleaved(const uint8_t* data, int64_t height, int64_t width,
                                 int64_t channels) {
  return {data, height, width, channels, 1, width * channels, channels};
}

ImageView ImageView::planar(const uint8_t* data, int64_t height, int64_t width, int64_t channels) {
  return {data, height, width, channels, height * width, width, 1};
}

void ImageTransform::validate(const std::string& who) const {
  CAMPO_CHECK(crop > 0, who, ": the image size (crop) must be positive, got ", crop);
  CAMPO_CHECK(resize >= 0, who, ": resize must be >= 0 (0: no resize), got ", resize);
  CAMPO_CHECK(padding >= 0, who, ": crop padding must be >= 0, got ", padding);
  CAMPO_CHECK(channels == 1 || channels == 3, who, ": channels must be 1 or 3, got ", channels);
  CAMPO_CHECK(int64_t(mean.size()) == channels && int64_t(stddev.size()) == channels, who,
              ": normalisation needs one mean and one std per channel (", channels, "), got ",
              mean.size(), " and ", stddev.size());
  for (size_t c = 0; c < mean.size(); ++c)
    CAMPO_CHECK(std::isfinite(mean[c]) && std::isfinite(stddev[c]) && stddev[c] > 0, who,
                ": normalisation of channel ", c, " needs a finite mean and a positive std, got ",
                "mean ", mean[c], " std ", stddev[c]);
}

CropPlacement place_crop(int64_t height, int64_t width, const ImageTransform& t, Rng& rng) {
  CropPlacement p;
  p.resized_height = height;
  p.resized_width = width;
  if (t.resize > 0) {
    // torchvision: the shorter side becomes `resize`, the longer int(resize * long / short).
    if (height <= width) {
      p.resized_height = t.resize;
      p.resized_width = std::max<int64_t>(1, int64_t(double(t.resize * width) / double(height)));
    } else {
      p.resized_width = t.resize;
      p.resized_height = std::max<int64_t>(1, int64_t(double(t.resize * height) / double(width)));
    }
  }
  auto offset = [&](int64_t size) {
    if (!t.random) return half_round_even(size - t.crop);
    const int64_t span = size + 2 * t.padding - t.crop;
    if (span < 0) return half_round_even(size - t.crop);
    return int64_t(rng.below(uint64_t(span) + 1)) - t.padding;
  };
  p.top = offset(p.resized_height);
  p.left = offset(p.resized_width);
  p.flip = t.random && rng.below(2) == 1;
  return p;
}

void transform_image(const ImageView& src, const ImageTransform& t, Rng& rng, float* out) {
  CAMPO_CHECK(src.height > 0 && src.width > 0 && src.channels >= 1 && src.channels <= 4,
              "transform_image: bad source image ", src.height, "x", src.width, "x", src.channels);
  const CropPlacement place = place_crop(src.height, src.width, t, rng);
  const int64_t side = t.crop, plane = side * side;
  const AxisTaps ty = axis_taps(src.height, place.resized_height, place.top, side, false);
  const AxisTaps tx = axis_taps(src.width, place.resized_width, place.left, side, place.flip);

  // Output channel mixes; a grey source gives one mix, copied to every output channel.
  const bool grey_source = src.channels <= 2;
  const int64_t mixes = grey_source ? 1 : t.channels;
  ChannelMix mix[3];
  for (int64_t c = 0; c < mixes; ++c) {
    if (grey_source) {
      mix[c] = {1, {0, 0, 0}, {1.0f / 255.0f, 0, 0}};
    } else if (t.channels == 3) {
      mix[c] = {1, {c, 0, 0}, {1.0f / 255.0f, 0, 0}};
    } else {
      mix[c] = {3, {0, 1, 2}, {0.299f / 255.0f, 0.587f / 255.0f, 0.114f / 255.0f}};
    }
  }

  // Source rows any output row reads.
  int64_t row_lo = src.height, row_hi = 0;
  for (int64_t o = 0; o < side; ++o) {
    if (ty.count[size_t(o)] == 0) continue;
    row_lo = std::min(row_lo, ty.first[size_t(o)]);
    row_hi = std::max(row_hi, ty.first[size_t(o)] + ty.count[size_t(o)]);
  }
  const int64_t rows = std::max<int64_t>(0, row_hi - row_lo);

  // Horizontal pass: tmp[c][row - row_lo][ox] = sum_k wx_k * mix_c(src[row][first + k]).
  std::vector<float> tmp(size_t(mixes * rows * side));
  for (int64_t c = 0; c < mixes; ++c) {
    const ChannelMix& m = mix[c];
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = src.data + (row_lo + r) * src.stride_y;
      float* dst = tmp.data() + (c * rows + r) * side;
      for (int64_t ox = 0; ox < side; ++ox) {
        const int32_t count = tx.count[size_t(ox)];
        const float* w = tx.weights.data() + tx.offset[size_t(ox)];
        const uint8_t* px = row + tx.first[size_t(ox)] * src.stride_x;
        float acc = 0;
        for (int32_t k = 0; k < count; ++k) {
          float v = 0;
          for (int j = 0; j < m.n; ++j)
            v += m.weight[j] * float(px[k * src.stride_x + m.channel[j] * src.stride_c]);
          acc += w[k] * v;
        }
        dst[ox] = acc;
      }
    }
  }

  // Vertical pass into the output planes: out[c][oy][ox] = sum_k wy_k * tmp[c][first + k].
  for (int64_t c = 0; c < mixes; ++c) {
    for (int64_t oy = 0; oy < side; ++oy) {
      float* dst = out + c * plane + oy * side;
      std::fill(dst, dst + side, 0.0f);
      const int32_t count = ty.count[size_t(oy)];
      const float* w = ty.weights.data() + ty.offset[size_t(oy)];
      for (int32_t k = 0; k < count; ++k) {
        const float* srow = tmp.data() + (c * rows + ty.first[size_t(oy)] + k - row_lo) * side;
        for (int64_t ox = 0; ox < side; ++ox) dst[ox] += w[k] * srow[ox];
      }
    }
  }
  for (int64_t c = mixes; c < t.channels; ++c)
    std::memcpy(out + c * plane, out, size_t(plane) * sizeof(float));

  // Normalisation: x = (p - mean) / std.
  for (int64_t c = 0; c < t.channels; ++c) {
    const float mean = t.mean[size_t(c)], stddev = t.stddev[size_t(c)];
    float* p = out + c * plane;
    for (int64_t i = 0; i < plane; ++i) p[i] = (p[i] - mean) / stddev;
  }
}

}  // namespace campo
