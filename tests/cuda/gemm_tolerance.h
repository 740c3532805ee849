// The tolerance of a CUDA GEMM (ops/cuda/gemm.h) against the CPU's oneDNN one, by dtype and
// the length K of its sums, for operands in [-1, 1].
//  - f32: CUBLAS_COMPUTE_32F runs true f32 FMAs (no TF32), so the two results differ only
//    in the order of the K-term sums, whose rounding error grows like sqrt(K) eps sum|a b|
//    (typically): rtol 1e-5 sqrt(K), and atol 1e-6 sqrt(K) for results that cancel to near 0.
//  - f16 / bf16: identical inputs, f32 accumulation on both sides, one rounding of the
//    result. The two f32 sums differ by the f32 bound above, which can move the rounding of
//    the output by one ulp of the output dtype: allow 2 ulp (rtol 2 * 2^-10 ~ 2e-3 for f16,
//    2 * 2^-7 ~ 1.6e-2 for bf16), and the f32 atol above, ten times, for results near 0.
#pragma once

#include <cmath>

#include "runtime/dtype.h"
#include "tests/test_util.h"

namespace campo::testing {

inline Tolerance gemm_tolerance(DType dtype, int64_t K) {
  const double root_k = std::sqrt(double(K > 0 ? K : 1));
  switch (dtype) {
    case DType::f16:
      return {2e-3, 1e-5 * root_k};
    case DType::bf16:
      return {1.6e-2, 1e-5 * root_k};
    default:
      return {1e-5 * root_k, 1e-6 * root_k};
  }
}

}  // namespace campo::testing
