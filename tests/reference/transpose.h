// Naive reference of Transpose: y[i] = x[j] with j[perm[d]] = i[d], each element placed by
// its full index, one at a time, whatever its type (copied by its bytes).
#pragma once

#include <cstring>
#include <vector>

#include "runtime/tensor.h"

namespace campo::reference {

inline Tensor transpose(const Tensor& x, const std::vector<int>& perm) {
  const Shape& xs = x.shape();
  Shape ys;
  for (int p : perm) ys.push_back(xs[size_t(p)]);
  Tensor y = Tensor::empty(ys, x.dtype());
  const size_t elem = dtype_size(x.dtype());
  const auto* xp = static_cast<const char*>(x.data());
  auto* yp = static_cast<char*>(y.data());
  std::vector<int64_t> i(ys.size()), j(xs.size());
  for (int64_t flat = 0; flat < y.numel(); ++flat) {
    int64_t rest = flat;
    for (size_t d = ys.size(); d-- > 0;) {
      i[d] = rest % ys[d];
      rest /= ys[d];
    }
    for (size_t d = 0; d < perm.size(); ++d) j[size_t(perm[d])] = i[d];
    int64_t src = 0;
    for (size_t d = 0; d < xs.size(); ++d) src = src * xs[d] + j[d];
    std::memcpy(yp + size_t(flat) * elem, xp + size_t(src) * elem, elem);
  }
  return y;
}

}  // namespace campo::reference
