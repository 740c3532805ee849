// Naive reference matrix product (the specification): C = op(A) op(B) with op(X) = X or
// X^T, row-major storage, double accumulation.
#pragma once

#include "runtime/tensor.h"

namespace campo::reference {

inline Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  const int64_t M = transpose_a ? a.dim(1) : a.dim(0);
  const int64_t K = transpose_a ? a.dim(0) : a.dim(1);
  const int64_t N = transpose_b ? b.dim(0) : b.dim(1);
  const float* ap = a.data_as<float>();
  const float* bp = b.data_as<float>();
  // Element (i, k) of op(A) and (k, j) of op(B).
  auto A = [&](int64_t i, int64_t k) { return transpose_a ? ap[k * M + i] : ap[i * K + k]; };
  auto B = [&](int64_t k, int64_t j) { return transpose_b ? bp[j * K + k] : bp[k * N + j]; };
  Tensor c = Tensor::empty({M, N}, DType::f32);
  float* cp = c.data_as<float>();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += double(A(i, k)) * B(k, j);
      cp[i * N + j] = float(sum);
    }
  return c;
}

}  // namespace campo::reference
