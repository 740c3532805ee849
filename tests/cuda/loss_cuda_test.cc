// CUDA losses against the CPU kernels (ops/cpu/loss.cc), per dtype of the logits: the
// sparse softmax cross entropy on the warp-per-row and block-per-row paths (up to BERT's
// vocabulary), with an ignore_label, large logits; an out-of-range label (NaN rows, then the
// CPU's error at the node's next run); the sigmoid cross entropy and its gradient with tails.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// f32 results: CUDA's expf / log1pf / log differ from glibc's by up to 2 ulp and the row
// sum runs in another order, so a few f32 ulp (rtol 1e-5); loss = log(s) + m - x[label]
// and backprop[label] = p - 1 cancel, so an absolute floor of 1e-6 (a few ulp of values near
// 1). Low-precision outputs: one rounding of nearly equal f32 values, the dtype's table.
testing::Tolerance tol(DType output) {
  return output == DType::f32 ? testing::Tolerance{1e-5, 1e-6} : testing::tolerance_for(output);
}

Tensor labels_for(int64_t N, int64_t C, Rng& rng, bool with_ignored) {
  Tensor labels = Tensor::empty({N}, DType::i32);
  for (int64_t n = 0; n < N; ++n)
    labels.data_as<int32_t>()[n] =
        with_ignored && n % 3 == 1 ? -100 : int32_t(rng.below(uint64_t(C)));
  return labels;
}

TEST(LossCudaTest, SparseSoftmaxCrossEntropyMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(11);
  // {N, C}: one class; warp rows with a tail; the largest warp row; block rows; BERT's vocab.
  const Shape shapes[] = {{1, 1}, {7, 10}, {33, 1000}, {5, 1024}, {5, 1025}, {3, 30522}};
  for (const Shape& s : shapes)
    for (DType dtype : kDtypes)
      for (bool ignore : {false, true}) {
        const Attrs attrs = ignore ? Attrs{SparseSoftmaxCrossEntropyAttrs{-100}} : Attrs{NoAttrs{}};
        const Tensor logits = random_tensor_of(dtype, s, rng, -20.0f, 20.0f);
        EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::SparseSoftmaxCrossEntropyWithLogits, attrs,
                                     dtype, {logits, labels_for(s[0], s[1], rng, ignore)},
                                     {{{s[0]}, DType::f32}, {s, DType::f32}}, tol(DType::f32)))
            << shape_str(s) << (ignore ? " with ignore_label" : "");
      }
}

// Logits far beyond exp's range: the row maximum is subtracted first on both sides.
TEST(LossCudaTest, SparseSoftmaxCrossEntropyLargeLogits) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(12);
  const Shape s{9, 2001};
  EXPECT_TRUE(cuda_matches_cpu(
      *gpu, OpKind::SparseSoftmaxCrossEntropyWithLogits, NoAttrs{}, DType::f32,
      {random_tensor_of(DType::f32, s, rng, 500.0f, 1000.0f), labels_for(s[0], s[1], rng, false)},
      {{{s[0]}, DType::f32}, {s, DType::f32}}, tol(DType::f32)));
}

// A label outside [0, C): that row's loss and backprop are NaN at once (the other rows are
// computed), and the node's next run (after the host has read the loss, so the report has
// landed) throws the CPU kernel's error naming row and label.
TEST(LossCudaTest, SparseSoftmaxCrossEntropyReportsBadLabel) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(13);
  const int64_t N = 4, C = 6;
  Tensor labels = labels_for(N, C, rng, false);
  labels.data_as<int32_t>()[2] = 6;
  ExecContext ctx(gpu);
  KernelSpec spec{OpKind::SparseSoftmaxCrossEntropyWithLogits,
                  NoAttrs{},
                  DType::f32,
                  {{{N, C}, DType::f32}, {{N}, DType::i32}},
                  {{{N}, DType::f32}, {{N, C}, DType::f32}},
                  "ce"};
  auto kernel = create_kernel(spec, ctx);
  const std::vector<Tensor> in{gpu->to_device(random_tensor_of(DType::f32, {N, C}, rng)),
                               gpu->to_device(labels)};
  const std::vector<Tensor> out{gpu->zeros({N}, DType::f32), gpu->zeros({N, C}, DType::f32)};
  run_kernel(*kernel, ctx, in, out);
  const std::vector<float> loss = gpu->to_host(out[0]).to_float_vector();
  EXPECT_TRUE(std::isnan(loss[2]));
  EXPECT_TRUE(std::isfinite(loss[0]) && std::isfinite(loss[1]) && std::isfinite(loss[3]));
  const std::string message = testing::error_message([&] { run_kernel(*kernel, ctx, in, out); });
  EXPECT_TRUE(testing::contains(message, "label 6 in row 2 is outside [0, 6)")) << message;
}

TEST(LossCudaTest, SigmoidCrossEntropyMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(14);
  for (const Shape& s : {Shape{1}, Shape{7, 3}, Shape{1000003}})
    for (DType dtype : kDtypes) {
      const Tensor x = random_tensor_of(dtype, s, rng, -10.0f, 10.0f);
      const Tensor z = random_tensor_of(dtype, s, rng, 0.0f, 1.0f);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::SigmoidCrossEntropyWithLogits, NoAttrs{}, dtype,
                                   {x, z}, {{s, dtype}}, tol(dtype)))
          << shape_str(s);
      const Tensor dloss = random_tensor_of(dtype, s, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::SigmoidCrossEntropyWithLogitsGrad, NoAttrs{},
                                   dtype, {dloss, x, z}, {{s, dtype}}, tol(dtype)))
          << shape_str(s);
    }
}

}  // namespace
}  // namespace campo
