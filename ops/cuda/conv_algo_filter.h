// Which measured cuDNN convolution algorithms a kernel may use (ops/cuda/conv.cc): a pure
// function of cuDNN's measurement (cudnnFind*AlgorithmEx's cudnnConvolution*AlgoPerf_t
// list, fastest first) and of what the run asks for, so that a test checks it on
// constructed lists without a GPU (tests/ops/conv_algo_filter_test.cc). Header only: it
// needs cudnn.h's types, not the library.
//
// An algorithm is refused, with the reason conv_algo_refusal returns, when
//   - it did not run (status) or needs more workspace than the search could give;
//   - f32: it uses tensor cores (TF32 rounds the inputs to 10 mantissa bits; the CPU, the
//     specification, computes in full f32);
//   - f16/bf16: it is FFT, FFT_TILING or WINOGRAD_NONFUSED, which keep the transformed tiles
//     in the data's precision: their error grows with the transform's size, beyond the few
//     ulp of one rounding the low-precision tests allow (and PyTorch's cudnn.benchmark does
//     not let them near its half-precision tolerance tests either);
//   - deterministic (--deterministic, and the tests that compare bits: a CUDA graph's
//     replay against launched steps, prefetched against fed steps): cuDNN reports it not
//     deterministic (determinism == CUDNN_NON_DETERMINISTIC), or it is one of those that add
//     partial sums with atomics (BWD_DATA_ALGO_0, BWD_FILTER_ALGO_0 and _3), whatever the
//     list says, so two identical steps cannot differ in the last bit.
#pragma once

#include <cudnn.h>

#include <cstddef>

#include "runtime/dtype.h"

namespace campo::cuda {

// What a run asks of a convolution's algorithm.
struct ConvAlgoRules {
  DType dtype = DType::f32;    // the data type the convolution computes in
  size_t workspace_limit = 0;  // the bytes of workspace the kernel can have
  bool deterministic = false;  // --deterministic
};

// Whether the algorithm adds partial sums with atomics (their order changes run to run).
inline bool uses_atomics(cudnnConvolutionFwdAlgo_t) { return false; }
inline bool uses_atomics(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
}
inline bool uses_atomics(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
}

// Whether the algorithm keeps transformed tiles (FFT, non-fused Winograd) in the data's type.
inline bool transforms_tiles(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
inline bool transforms_tiles(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
inline bool transforms_tiles(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// Why `p` may not be used under `rules` (a phrase), or nullptr when it may.
template <typename Perf>
const char* conv_algo_refusal(const Perf& p, const ConvAlgoRules& rules) {
  if (p.status != CUDNN_STATUS_SUCCESS) return "it did not run";
  if (p.memory > rules.workspace_limit) return "its workspace is over the limit";
  const bool tensor_ops =
      p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  if (rules.dtype == DType::f32 && tensor_ops) return "f32 on tensor cores (TF32)";
  if (rules.dtype != DType::f32 && transforms_tiles(p.algo))
    return "FFT or non-fused Winograd tiles in low precision";
  if (rules.deterministic && (p.determinism != CUDNN_DETERMINISTIC || uses_atomics(p.algo)))
    return "not deterministic";
  return nullptr;
}

// The index in perf[0, count) (cuDNN's order: fastest first) of the first algorithm that
// may be used under `rules`; -1 when none may.
template <typename Perf>
int pick_conv_algo(const Perf* perf, int count, const ConvAlgoRules& rules) {
  for (int i = 0; i < count; ++i)
    if (!conv_algo_refusal(perf[i], rules)) return i;
  return -1;
}

}  // namespace campo::cuda
