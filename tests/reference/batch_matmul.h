// Naive reference of BatchMatMulV2 (the specification): for every batch index b,
// z[b] = adj(x[b]) adj(y[b]) with adj the transpose of the last two dims when asked, every
// element summed in double from its full index; host f32 tensors, equal batch dims.
#pragma once

#include "runtime/tensor.h"

namespace campo::reference {

inline Tensor batch_matmul(const Tensor& x, const Tensor& y, bool adj_x, bool adj_y) {
  const Shape& xs = x.shape();
  const size_t r = xs.size();
  const int64_t xr = xs[r - 2], xc = xs[r - 1];  // x stored [..., xr, xc]
  const int64_t yr = y.shape()[r - 2], yc = y.shape()[r - 1];
  const int64_t M = adj_x ? xc : xr, K = adj_x ? xr : xc, N = adj_y ? yr : yc;
  int64_t batch = 1;
  Shape zs;
  for (size_t d = 0; d + 2 < r; ++d) {
    batch *= xs[d];
    zs.push_back(xs[d]);
  }
  zs.push_back(M);
  zs.push_back(N);
  const float* xp = x.data_as<float>();
  const float* yp = y.data_as<float>();
  Tensor z = Tensor::empty(zs, DType::f32);
  float* zp = z.data_as<float>();
  for (int64_t b = 0; b < batch; ++b) {
    const float* xb = xp + b * xr * xc;
    const float* yb = yp + b * yr * yc;
    // Element (i, k) of adj(x[b]) and (k, j) of adj(y[b]).
    auto X = [&](int64_t i, int64_t k) { return adj_x ? xb[k * xc + i] : xb[i * xc + k]; };
    auto Y = [&](int64_t k, int64_t j) { return adj_y ? yb[j * yc + k] : yb[k * yc + j]; };
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += double(X(i, k)) * Y(k, j);
        zp[(b * M + i) * N + j] = float(sum);
      }
  }
  return z;
}

}  // namespace campo::reference
