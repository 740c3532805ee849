// The choice among cuDNN's measured convolution algorithms (ops/cuda/conv_algo_filter.h),
// checked on the CPU: lists built as cudnnFind*AlgorithmEx returns them (fastest first, one
// cudnnConvolution*AlgoPerf_t per algorithm, with its status, workspace, determinism and math
// type), for every direction. Needs cudnn.h's types only (a build with the CUDA backend); no
// GPU, so it runs in CI. What it pins: --deterministic (and the CUDA tests that compare bits)
// never gets an algorithm with atomics, f16/bf16 never FFT or non-fused Winograd, f32 never
// TF32, and otherwise the fastest usable one is taken.
#include <gtest/gtest.h>

#if CAMPO_HAVE_CUDA
#include <vector>

#include "ops/cuda/conv_algo_filter.h"
#endif

namespace campo {
namespace {

#if CAMPO_HAVE_CUDA
using cuda::ConvAlgoRules;
using cuda::pick_conv_algo;

constexpr size_t kMiB = size_t(1) << 20;

template <typename Perf, typename Algo>
Perf perf(Algo algo, float ms, size_t workspace = 0,
          cudnnDeterminism_t determinism = CUDNN_DETERMINISTIC,
          cudnnMathType_t math = CUDNN_DEFAULT_MATH, cudnnStatus_t status = CUDNN_STATUS_SUCCESS) {
  Perf p{};
  p.algo = algo;
  p.status = status;
  p.time = ms;
  p.memory = workspace;
  p.determinism = determinism;
  p.mathType = math;
  return p;
}

// The algorithm picked from `list` under `rules`, or -1.
template <typename Perf>
int picked(const std::vector<Perf>& list, const ConvAlgoRules& rules) {
  const int i = pick_conv_algo(list.data(), int(list.size()), rules);
  return i < 0 ? -1 : int(list[size_t(i)].algo);
}

using Filter = cudnnConvolutionBwdFilterAlgoPerf_t;
using Data = cudnnConvolutionBwdDataAlgoPerf_t;
using Fwd = cudnnConvolutionFwdAlgoPerf_t;

// Backward filter of a ResNet 3x3 layer as cuDNN 9 orders such a list: the atomic ALGO_0 and
// ALGO_3 fastest, then the deterministic ones.
std::vector<Filter> backward_filter_list(cudnnMathType_t math) {
  return {
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, 0.10f, 0, CUDNN_NON_DETERMINISTIC, math),
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, 0.12f, 4 * kMiB, CUDNN_NON_DETERMINISTIC,
                   math),
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, 0.13f, 32 * kMiB,
                   CUDNN_DETERMINISTIC, math),
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, 0.15f, 8 * kMiB, CUDNN_DETERMINISTIC, math),
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, 0.20f, 64 * kMiB,
                   CUDNN_DETERMINISTIC, math)};
}

TEST(ConvAlgoFilterTest, DeterministicRunsNeverGetAtomicBackwardFilterAlgorithms) {
  const std::vector<Filter> f32 = backward_filter_list(CUDNN_FMA_MATH);
  EXPECT_EQ(picked(f32, {DType::f32, 256 * kMiB, false}), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  EXPECT_EQ(picked(f32, {DType::f32, 256 * kMiB, true}),
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING);
  const std::vector<Filter> f16 = backward_filter_list(CUDNN_TENSOR_OP_MATH);
  EXPECT_EQ(picked(f16, {DType::f16, 256 * kMiB, false}), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  // Deterministic and low precision: no atomics, no FFT tiles.
  EXPECT_EQ(picked(f16, {DType::f16, 256 * kMiB, true}), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  EXPECT_EQ(picked(f16, {DType::bf16, 256 * kMiB, true}), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
}

// ALGO_0 and ALGO_3 add with atomics whatever determinism field a list carries (a list
// recorded by another cuDNN, or a field left at its default): refused all the same.
TEST(ConvAlgoFilterTest, AtomicAlgorithmsAreRefusedEvenWhenMarkedDeterministic) {
  const std::vector<Filter> filter = {perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, 0.1f),
                                      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, 0.2f),
                                      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, 0.3f)};
  EXPECT_EQ(picked(filter, {DType::f32, 0, true}), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  const std::vector<Data> data = {perf<Data>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, 0.1f),
                                  perf<Data>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 0.2f)};
  EXPECT_EQ(picked(data, {DType::f32, 0, true}), CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  EXPECT_EQ(picked(data, {DType::f32, 0, false}), CUDNN_CONVOLUTION_BWD_DATA_ALGO_0);
  // And any algorithm cuDNN itself reports not deterministic.
  const std::vector<Fwd> fwd = {
      perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 0.1f, 0, CUDNN_NON_DETERMINISTIC),
      perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0.2f)};
  EXPECT_EQ(picked(fwd, {DType::f32, 0, true}), CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  EXPECT_STREQ(cuda::conv_algo_refusal(fwd[0], {DType::f32, 0, true}), "not deterministic");
}

// f16 and bf16 never use FFT, FFT_TILING or WINOGRAD_NONFUSED, in any direction; f32 may.
TEST(ConvAlgoFilterTest, LowPrecisionNeverUsesFftOrNonFusedWinograd) {
  const std::vector<Fwd> fwd = {perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_FFT, 0.1f, kMiB),
                                perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, 0.2f, kMiB),
                                perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, 0.3f, kMiB),
                                perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, 0.4f),
                                perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 0.5f)};
  EXPECT_EQ(picked(fwd, {DType::f32, 64 * kMiB, false}), CUDNN_CONVOLUTION_FWD_ALGO_FFT);
  for (DType low : {DType::f16, DType::bf16})
    EXPECT_EQ(picked(fwd, {low, 64 * kMiB, false}), CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD)
        << dtype_name(low);
  const std::vector<Data> data = {
      perf<Data>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, 0.1f),
      perf<Data>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, 0.2f),
      perf<Data>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, 0.3f),
      perf<Data>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 0.4f)};
  EXPECT_EQ(picked(data, {DType::f16, 0, false}), CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
  EXPECT_EQ(picked(data, {DType::f32, 0, false}), CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING);
  const std::vector<Filter> filter = {
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, 0.1f),
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING, 0.2f),
      perf<Filter>(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED, 0.3f)};
  EXPECT_EQ(picked(filter, {DType::bf16, 0, false}), -1);
  EXPECT_EQ(picked(filter, {DType::f32, 0, false}), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT);
}

// What every run refuses: an algorithm that failed, one whose workspace is over the limit,
// and TF32 (tensor-core math) for f32.
TEST(ConvAlgoFilterTest, FailedOversizedAndTf32AlgorithmsAreRefused) {
  const std::vector<Fwd> fwd = {
      perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, 0.05f, 0, CUDNN_DETERMINISTIC, CUDNN_DEFAULT_MATH,
                CUDNN_STATUS_NOT_SUPPORTED),
      perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 0.1f, 512 * kMiB),
      perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0.2f, 0, CUDNN_DETERMINISTIC,
                CUDNN_TENSOR_OP_MATH),
      perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, 0.3f, 0, CUDNN_DETERMINISTIC,
                CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION),
      perf<Fwd>(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0.4f, 0, CUDNN_DETERMINISTIC,
                CUDNN_FMA_MATH)};
  const ConvAlgoRules f32{DType::f32, 256 * kMiB, false};
  EXPECT_STREQ(cuda::conv_algo_refusal(fwd[0], f32), "it did not run");
  EXPECT_STREQ(cuda::conv_algo_refusal(fwd[1], f32), "its workspace is over the limit");
  EXPECT_STREQ(cuda::conv_algo_refusal(fwd[2], f32), "f32 on tensor cores (TF32)");
  EXPECT_EQ(cuda::conv_algo_refusal(fwd[4], f32), nullptr);
  EXPECT_EQ(pick_conv_algo(fwd.data(), int(fwd.size()), f32), 4);
  // f16 runs on tensor cores: the first that ran within the workspace.
  EXPECT_EQ(pick_conv_algo(fwd.data(), int(fwd.size()), {DType::f16, 256 * kMiB, false}), 2);
  // A larger limit admits the 512 MiB one.
  EXPECT_EQ(pick_conv_algo(fwd.data(), int(fwd.size()), {DType::f16, 1024 * kMiB, false}), 1);
  EXPECT_EQ(pick_conv_algo(fwd.data(), 0, f32), -1);
}
#else
TEST(ConvAlgoFilterTest, NeedsCudnnHeaders) {
  GTEST_SKIP() << "this build has no CUDA backend (configured without nvcc, or CAMPO_CUDA=OFF): "
                  "cudnn.h's types are not available";
}
#endif

}  // namespace
}  // namespace campo
