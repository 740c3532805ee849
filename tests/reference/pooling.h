// Naive pooling reference (the specification of MaxPool / AvgPool and their gradients):
// NCHW, floor output size, symmetric padding that never contributes to a max or a sum (a
// padded position never wins a max); an average's divisor counts it only with
// count_include_pad (then the divisor is kernel_h * kernel_w).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/op.h"
#include "runtime/tensor.h"

namespace campo::reference {

struct MaxPoolForward {
  Tensor y;       // [N, C, OH, OW]
  Tensor argmax;  // i32, index within the input's H * W plane
};

// Visits every (output position, input position inside its window) pair of one plane.
template <typename F>
void for_each_window_element(const PoolAttrs& a, int64_t h, int64_t w, F&& f) {
  const int64_t oh = window_output_size(h, a.kernel_h, a.stride_h, a.pad_h);
  const int64_t ow = window_output_size(w, a.kernel_w, a.stride_w, a.pad_w);
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j)
      for (int64_t ki = 0; ki < a.kernel_h; ++ki)
        for (int64_t kj = 0; kj < a.kernel_w; ++kj) {
          const int64_t r = i * a.stride_h - a.pad_h + ki, c = j * a.stride_w - a.pad_w + kj;
          if (r >= 0 && r < h && c >= 0 && c < w) f(i * ow + j, r * w + c);
        }
}

inline Shape pooled(const PoolAttrs& a, const Shape& x) {
  return {x[0], x[1], window_output_size(x[2], a.kernel_h, a.stride_h, a.pad_h),
          window_output_size(x[3], a.kernel_w, a.stride_w, a.pad_w)};
}

inline MaxPoolForward max_pool_forward(const Tensor& x, const PoolAttrs& a) {
  const Shape ys = pooled(a, x.shape());
  const int64_t planes = ys[0] * ys[1], in_plane = x.dim(2) * x.dim(3), out_plane = ys[2] * ys[3];
  const std::vector<float> xv = x.to_float_vector();
  std::vector<float> y(size_t(planes * out_plane), -std::numeric_limits<float>::infinity());
  std::vector<int32_t> arg(y.size(), -1);
  for (int64_t p = 0; p < planes; ++p)
    for_each_window_element(a, x.dim(2), x.dim(3), [&](int64_t o, int64_t i) {
      const float v = xv[p * in_plane + i];
      if (arg[p * out_plane + o] < 0 || v > y[p * out_plane + o]) {
        y[p * out_plane + o] = v;
        arg[p * out_plane + o] = int32_t(i);
      }
    });
  return {Tensor::from_vector(y, ys), Tensor::from_vector(arg, ys)};
}

inline Tensor avg_pool_forward(const Tensor& x, const PoolAttrs& a) {
  const Shape ys = pooled(a, x.shape());
  const int64_t planes = ys[0] * ys[1], in_plane = x.dim(2) * x.dim(3), out_plane = ys[2] * ys[3];
  const std::vector<float> xv = x.to_float_vector();
  std::vector<double> sum(size_t(planes * out_plane)), count(sum.size());
  for (int64_t p = 0; p < planes; ++p)
    for_each_window_element(a, x.dim(2), x.dim(3), [&](int64_t o, int64_t i) {
      sum[p * out_plane + o] += xv[p * in_plane + i];
      count[p * out_plane + o] += 1;
    });
  std::vector<float> y(sum.size());
  const double full = double(a.kernel_h) * a.kernel_w;
  for (size_t k = 0; k < y.size(); ++k)
    y[k] = float(sum[k] / (a.count_include_pad ? full : count[k]));
  return Tensor::from_vector(y, ys);
}

// dx[argmax] += dy.
inline Tensor max_pool_backward(const Tensor& dy, const Tensor& argmax, const Shape& x_shape) {
  const int64_t planes = x_shape[0] * x_shape[1], in_plane = x_shape[2] * x_shape[3],
                out_plane = dy.dim(2) * dy.dim(3);
  const std::vector<float> g = dy.to_float_vector();
  const int32_t* arg = argmax.data_as<int32_t>();
  std::vector<double> dx(size_t(planes * in_plane));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t o = 0; o < out_plane; ++o)
      dx[p * in_plane + arg[p * out_plane + o]] += g[p * out_plane + o];
  return Tensor::from_vector(std::vector<float>(dx.begin(), dx.end()), x_shape);
}

// dx[window] += dy / count(window) (kernel_h * kernel_w with count_include_pad).
inline Tensor avg_pool_backward(const Tensor& dy, const PoolAttrs& a, const Shape& x_shape) {
  const int64_t planes = x_shape[0] * x_shape[1], in_plane = x_shape[2] * x_shape[3],
                out_plane = dy.dim(2) * dy.dim(3);
  const std::vector<float> g = dy.to_float_vector();
  std::vector<double> count(static_cast<size_t>(out_plane)), dx(size_t(planes * in_plane));
  for_each_window_element(a, x_shape[2], x_shape[3], [&](int64_t o, int64_t) { count[o] += 1; });
  if (a.count_include_pad) std::fill(count.begin(), count.end(), double(a.kernel_h) * a.kernel_w);
  for (int64_t p = 0; p < planes; ++p)
    for_each_window_element(a, x_shape[2], x_shape[3], [&](int64_t o, int64_t i) {
      dx[p * in_plane + i] += g[p * out_plane + o] / count[o];
    });
  return Tensor::from_vector(std::vector<float>(dx.begin(), dx.end()), x_shape);
}

}  // namespace campo::reference
