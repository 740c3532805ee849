// Naive reference convolutions (the specification): plain loops, double accumulation.
// x [N, C, H, W], w [O, C/g, kh, kw], y [N, O, Ho, Wo]; output channel o belongs to group
// o / (O/g) and reads input channels group * C/g ... (group + 1) * C/g - 1.
#pragma once

#include <vector>

#include "ops/op.h"
#include "runtime/tensor.h"

namespace campo::reference {

// Calls tap(x_index, w_index, y_index) for every product x * w that contributes to y.
template <typename Tap>
void for_each_conv_tap(const Shape& x, const Shape& w, const Shape& y, const ConvAttrs& a,
                       Tap tap) {
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3];
  const int64_t O = w[0], Cg = w[1], KH = w[2], KW = w[3];
  const int64_t Ho = y[2], Wo = y[3];
  const int64_t Og = O / a.groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      const int64_t group = o / Og;
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j)
          for (int64_t ci = 0; ci < Cg; ++ci) {
            const int64_t c = group * Cg + ci;
            for (int64_t p = 0; p < KH; ++p)
              for (int64_t q = 0; q < KW; ++q) {
                const int64_t h = i * a.stride_h - a.pad_h + p * a.dilation_h;
                const int64_t v = j * a.stride_w - a.pad_w + q * a.dilation_w;
                if (h < 0 || h >= H || v < 0 || v >= W) continue;  // zero padding
                tap(((n * C + c) * H + h) * W + v, ((o * Cg + ci) * KH + p) * KW + q,
                    ((n * O + o) * Ho + i) * Wo + j);
              }
          }
    }
}

inline Shape conv2d_output_shape(const Shape& x, const Shape& w, const ConvAttrs& a) {
  return {x[0], w[0], window_output_size(x[2], int(w[2]), a.stride_h, a.pad_h, a.dilation_h),
          window_output_size(x[3], int(w[3]), a.stride_w, a.pad_w, a.dilation_w)};
}

inline Tensor to_f32_tensor(const std::vector<double>& v, const Shape& s) {
  Tensor t = Tensor::empty(s, DType::f32);
  float* p = t.data_as<float>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = float(v[i]);
  return t;
}

// y = conv(x, w)
inline Tensor conv2d(const Tensor& x, const Tensor& w, const ConvAttrs& a) {
  const Shape ys = conv2d_output_shape(x.shape(), w.shape(), a);
  std::vector<double> y(size_t(shape_numel(ys)), 0.0);
  const float* xp = x.data_as<float>();
  const float* wp = w.data_as<float>();
  for_each_conv_tap(x.shape(), w.shape(), ys, a, [&](int64_t xi, int64_t wi, int64_t yi) {
    y[size_t(yi)] += double(xp[xi]) * wp[wi];
  });
  return to_f32_tensor(y, ys);
}

// dx = d<conv(x, w), dy>/dx, dx shaped a.output_shape.
inline Tensor conv2d_backprop_input(const Tensor& dy, const Tensor& w, const ConvAttrs& a) {
  std::vector<double> dx(size_t(shape_numel(a.output_shape)), 0.0);
  const float* dyp = dy.data_as<float>();
  const float* wp = w.data_as<float>();
  for_each_conv_tap(
      a.output_shape, w.shape(), dy.shape(), a,
      [&](int64_t xi, int64_t wi, int64_t yi) { dx[size_t(xi)] += double(dyp[yi]) * wp[wi]; });
  return to_f32_tensor(dx, a.output_shape);
}

// dw = d<conv(x, w), dy>/dw, dw shaped a.output_shape.
inline Tensor conv2d_backprop_filter(const Tensor& x, const Tensor& dy, const ConvAttrs& a) {
  std::vector<double> dw(size_t(shape_numel(a.output_shape)), 0.0);
  const float* xp = x.data_as<float>();
  const float* dyp = dy.data_as<float>();
  for_each_conv_tap(
      x.shape(), a.output_shape, dy.shape(), a,
      [&](int64_t xi, int64_t wi, int64_t yi) { dw[size_t(wi)] += double(xp[xi]) * dyp[yi]; });
  return to_f32_tensor(dw, a.output_shape);
}

}  // namespace campo::reference
