// Naive references for ConcatV2 and SplitV: every element placed by its full index, one at a
// time (no rows, no byte offsets), on host f32 tensors.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace campo::reference {

// The multi-index of flat element `flat` of a tensor of `shape` (row-major).
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

inline int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

// y[..., k, ...] = xs[i][..., k - offset_i, ...] along `axis` (>= 0), offset_i = sum of the
// earlier inputs' sizes there.
inline Tensor concat(const std::vector<Tensor>& xs, int axis) {
  Shape out = xs[0].shape();
  out[size_t(axis)] = 0;
  for (const Tensor& x : xs) out[size_t(axis)] += x.shape()[size_t(axis)];
  Tensor y = Tensor::zeros(out, DType::f32);
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    for (int64_t e = 0; e < x.numel(); ++e) {
      std::vector<int64_t> index = unravel(e, x.shape());
      index[size_t(axis)] += offset;
      y.data_as<float>()[ravel(index, out)] = x.data_as<float>()[e];
    }
    offset += x.shape()[size_t(axis)];
  }
  return y;
}

// Piece k of x along `axis` (>= 0): x[..., offset_k : offset_k + sizes[k], ...].
inline std::vector<Tensor> split(const Tensor& x, int axis, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> pieces;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    Shape s = x.shape();
    s[size_t(axis)] = size;
    Tensor p = Tensor::zeros(s, DType::f32);
    for (int64_t e = 0; e < p.numel(); ++e) {
      std::vector<int64_t> index = unravel(e, s);
      index[size_t(axis)] += offset;
      p.data_as<float>()[e] = x.data_as<float>()[ravel(index, x.shape())];
    }
    pieces.push_back(p);
    offset += size;
  }
  return pieces;
}

}  // namespace campo::reference
