// Naive references (the specification) for Softmax / SoftmaxGrad over the last axis: plain
// loops over host f32 tensors, math in double.
#pragma once

#include <cmath>

#include "runtime/tensor.h"

namespace campo::reference {

// y = exp(x - max) / sum(exp(x - max)) per row of the last axis.
inline Tensor softmax(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  const int64_t cols = x.shape().back(), rows = cols == 0 ? 0 : x.numel() / cols;
  const float* xp = x.data_as<float>();
  float* yp = y.data_as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * cols;
    double m = -INFINITY;
    for (int64_t i = 0; i < cols; ++i) m = std::max(m, double(xr[i]));
    double s = 0;
    for (int64_t i = 0; i < cols; ++i) s += std::exp(double(xr[i]) - m);
    for (int64_t i = 0; i < cols; ++i) yp[r * cols + i] = float(std::exp(double(xr[i]) - m) / s);
  }
  return y;
}

// dX = (dY - sum(dY * Y, last axis)) * Y.
inline Tensor softmax_grad(const Tensor& dy, const Tensor& y) {
  Tensor dx = Tensor::empty(y.shape(), DType::f32);
  const int64_t cols = y.shape().back(), rows = cols == 0 ? 0 : y.numel() / cols;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = dy.data_as<float>() + r * cols;
    const float* v = y.data_as<float>() + r * cols;
    double s = 0;
    for (int64_t i = 0; i < cols; ++i) s += double(g[i]) * v[i];
    for (int64_t i = 0; i < cols; ++i)
      dx.data_as<float>()[r * cols + i] = float((double(g[i]) - s) * v[i]);
  }
  return dx;
}

}  // namespace campo::reference
