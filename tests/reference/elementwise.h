// Naive references (the specification) for the element-wise ops, the reductions and their
// gradients: plain loops over host f32 tensors, double where it accumulates.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace campo::reference {

// out[i] = f(x[i]) for a tensor of x's shape.
inline Tensor map(const Tensor& x, const std::function<float(float)>& f) {
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i) y.data_as<float>()[i] = f(x.data_as<float>()[i]);
  return y;
}

// out[i] = f(a[i], b[i]).
inline Tensor zip(const Tensor& a, const Tensor& b, const std::function<float(float, float)>& f) {
  Tensor y = Tensor::empty(a.shape(), DType::f32);
  for (int64_t i = 0; i < a.numel(); ++i)
    y.data_as<float>()[i] = f(a.data_as<float>()[i], b.data_as<float>()[i]);
  return y;
}

inline Tensor relu(const Tensor& x) {
  return map(x, [](float v) { return std::isnan(v) || v > 0 ? v : 0.0f; });  // NaN stays NaN
}
// dX = dY where Y > 0, else 0.
inline Tensor relu_grad(const Tensor& dy, const Tensor& y) {
  return zip(dy, y, [](float g, float v) { return v > 0 ? g : 0.0f; });
}
inline Tensor leaky_relu(const Tensor& x, float alpha) {
  return map(x, [=](float v) { return v > 0 ? v : alpha * v; });
}
inline Tensor leaky_relu_grad(const Tensor& dy, const Tensor& x, float alpha) {
  return zip(dy, x, [=](float g, float v) { return v > 0 ? g : alpha * g; });
}
inline Tensor tanh(const Tensor& x) {
  return map(x, [](float v) { return float(std::tanh(double(v))); });
}
inline Tensor tanh_grad(const Tensor& dy, const Tensor& y) {
  return zip(dy, y, [](float g, float v) { return float(double(g) * (1.0 - double(v) * v)); });
}
inline Tensor sigmoid(const Tensor& x) {
  return map(x, [](float v) { return float(1.0 / (1.0 + std::exp(-double(v)))); });
}
inline Tensor sigmoid_grad(const Tensor& dy, const Tensor& y) {
  return zip(dy, y, [](float g, float v) { return float(double(g) * v * (1.0 - v)); });
}

inline Tensor add_n(const std::vector<Tensor>& xs) {
  Tensor y = Tensor::empty(xs.at(0).shape(), DType::f32);
  for (int64_t i = 0; i < y.numel(); ++i) {
    double s = 0;
    for (const Tensor& x : xs) s += x.data_as<float>()[i];
    y.data_as<float>()[i] = float(s);
  }
  return y;
}

// c = a * b, b of a's shape, a scalar, or a prefix of a's shape (repeated along a's
// trailing dims): element i of a pairs with element i / (numel(a) / numel(b)) of b.
inline Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor c = Tensor::empty(a.shape(), DType::f32);
  const int64_t repeat = a.numel() / b.numel();
  for (int64_t i = 0; i < a.numel(); ++i)
    c.data_as<float>()[i] = a.data_as<float>()[i] * b.data_as<float>()[i / repeat];
  return c;
}

// Row-major multi-index of flat index i in shape s.
inline std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}

// True for every axis that `axes` reduces (empty = all; negative axes from the end).
inline std::vector<bool> reduced_axes(int rank, const std::vector<int>& axes) {
  std::vector<bool> r(size_t(rank), axes.empty());
  for (int a : axes) r[size_t(a < 0 ? a + rank : a)] = true;
  return r;
}

// Flat index in the reduced output (keep_dims does not change it) of input index idx.
inline int64_t reduced_index(const std::vector<int64_t>& idx, const Shape& in,
                             const std::vector<bool>& reduced) {
  int64_t o = 0;
  for (size_t d = 0; d < in.size(); ++d)
    if (!reduced[d]) o = o * in[d] + idx[d];
  return o;
}

inline Shape reduce_shape(const Shape& in, const std::vector<int>& axes, bool keep_dims) {
  std::vector<bool> r = reduced_axes(int(in.size()), axes);
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!r[d])
      out.push_back(in[d]);
    else if (keep_dims)
      out.push_back(1);
  }
  return out;
}

// Sum (or Mean) over axes, in double.
inline Tensor reduce(const Tensor& x, const std::vector<int>& axes, bool keep_dims, bool mean) {
  const Shape& in = x.shape();
  std::vector<bool> r = reduced_axes(int(in.size()), axes);
  Shape out_shape = reduce_shape(in, axes, keep_dims);
  std::vector<double> acc(size_t(shape_numel(out_shape)), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i)
    acc[size_t(reduced_index(unravel(i, in), in, r))] += x.data_as<float>()[i];
  int64_t count = x.numel() / std::max<int64_t>(1, shape_numel(out_shape));
  Tensor y = Tensor::empty(out_shape, DType::f32);
  for (size_t o = 0; o < acc.size(); ++o)
    y.data_as<float>()[o] = float(mean ? acc[o] / double(count) : acc[o]);
  return y;
}

// dX[i] = dY[reduced index of i] (/ count for Mean's gradient).
inline Tensor broadcast_back(const Tensor& dy, const Shape& in, const std::vector<int>& axes,
                             bool mean) {
  std::vector<bool> r = reduced_axes(int(in.size()), axes);
  const int64_t count = shape_numel(in) / std::max<int64_t>(1, dy.numel());
  Tensor dx = Tensor::empty(in, DType::f32);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    double g = dy.data_as<float>()[reduced_index(unravel(i, in), in, r)];
    dx.data_as<float>()[i] = float(mean ? g / double(count) : g);
  }
  return dx;
}

}  // namespace campo::reference
