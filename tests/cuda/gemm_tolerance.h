// The tolerance of a CUDA GEMM (ops/cuda/gemm.h) against the CPU's oneDNN one, by dtype and
// the length K of its sums, for operands in [-1, 1].
//  - f32: CUBLAS_COMPUTE_32F runs true f32 FMAs (no TF32), so the two results differ only
//    in the order of the K-term sums. Relative to the result: rtol 1e-5 sqrt(K) (the rounding
//    error of a sum grows like sqrt(K)). Absolute, for results that cancel to near 0: each of
//    the K additions rounds by up to eps/2 of a partial sum of size ~ sqrt(K)/3, a random walk
//    of ~ eps K / 6 per side; allow 4 eps K ~ 5e-7 K.
//  - f16 / bf16: identical inputs, f32 accumulation on both sides, one rounding of the
//    result. The two f32 sums differ by the f32 bound above, which can move the rounding of
//    the output by one ulp of the output dtype: allow 2 ulp (rtol 2 * 2^-10 ~ 2e-3 for f16,
//    2 * 2^-7 ~ 1.6e-2 for bf16), plus the f32 atol above for results near 0.
#pragma once

#include <cmath>

#include "runtime/dtype.h"
#include "tests/test_util.h"

namespace campo::testing {

inline Tolerance gemm_tolerance(DType dtype, int64_t K) {
  const double k = double(K > 0 ? K : 1);
  const double atol = 5e-7 * k;
  switch (dtype) {
    case DType::f16:
      return {2e-3, atol};
    case DType::bf16:
      return {1.6e-2, atol};
    default:
      return {1e-5 * std::sqrt(k), atol};
  }
}

}  // namespace campo::testing
