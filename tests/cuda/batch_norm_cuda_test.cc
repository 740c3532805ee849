// The CUDA batch-norm kernels (ops/cuda/batch_norm.cu) against the CPU kernels on the same
// inputs, per dtype: FusedBatchNorm in training (y, batch mean, batch inv_std, and the running
// statistics updated in place) and inference, FusedBatchNormGrad in both modes, on [N, C, H, W]
// and [N, C] data of odd sizes. Skipped, saying why, without a GPU.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|): both take the statistics in two passes and
// finish them in double, but the CPU sums each plane in f32 SIMD lanes first (the GPU sums
// in double throughout), so the f32 statistics and per-channel coefficients may differ by
// f32 rounding of sums of up to ~10^3 terms in [-1, 1]; dscale and doffset are such sums
// themselves (magnitude ~sqrt(M)). f32: rtol 1e-5, atol 1e-4. f16 / bf16 x, y, dy, dx: both
// compute the same f32 value up to that and round it once, so one ulp of the dtype more:
// rtol 2^-10 (f16) / 2^-7 (bf16), atol 1e-4 (the statistics are f32 for every dtype and are
// held to the same bound).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::all_close;
using testing::cuda_matches_cpu;
using testing::random_tensor;
using testing::random_tensor_of;
using testing::Tolerance;

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

Tolerance bn_tolerance(DType t) {
  switch (t) {
    case DType::f16:
      return {1.0 / 1024, 1e-4};
    case DType::bf16:
      return {1.0 / 128, 1e-4};
    default:
      return {1e-5, 1e-4};
  }
}

// ResNet-like planes, odd sizes, a single-sample batch, and [N, C] (DCGAN's batch norm after
// its linear layer).
std::vector<Shape> bn_shapes() {
  return {{4, 6, 5, 7}, {8, 16, 14, 14}, {1, 3, 9, 11}, {3, 10}, {33, 7}};
}

struct BnInputs {
  Tensor x, scale, offset, running_mean, running_var;
};

BnInputs random_inputs(DType t, const Shape& xs, uint64_t seed) {
  Rng rng(seed);
  const Shape c = {xs[1]};
  // A mean away from 0 and a spread other than 1, so the statistics matter.
  return {random_tensor_of(t, xs, rng, -0.5f, 1.5f), random_tensor(c, rng, 0.5f, 1.5f),
          random_tensor(c, rng, -0.5f, 0.5f), random_tensor(c, rng, -0.2f, 0.2f),
          random_tensor(c, rng, 0.5f, 1.5f)};
}

std::vector<TensorDesc> forward_outputs(DType t, const Shape& xs) {
  return {{xs, t}, {{xs[1]}, DType::f32}, {{xs[1]}, DType::f32}};
}

// FusedBatchNorm on the CPU and the GPU from the same running statistics: the outputs and the
// running statistics each updated in place.
::testing::AssertionResult forward_matches(Backend& gpu, DType t, const Shape& xs,
                                           const BatchNormAttrs& attrs, Tolerance tol) {
  const BnInputs in = random_inputs(t, xs, 31);
  const std::vector<TensorDesc> outs = forward_outputs(t, xs);

  ExecContext cpu_ctx;
  const std::vector<Tensor> cpu_in = {in.x, in.scale, in.offset, in.running_mean.clone(),
                                      in.running_var.clone()};
  const std::vector<Tensor> expected =
      run_op_eager(OpKind::FusedBatchNorm, attrs, t, cpu_in, outs, cpu_ctx);

  ExecContext gpu_ctx(std::shared_ptr<Backend>(&gpu, [](Backend*) {}));
  std::vector<Tensor> gpu_in;
  for (const Tensor& h : {in.x, in.scale, in.offset, in.running_mean, in.running_var})
    gpu_in.push_back(gpu.to_device(h));
  const std::vector<Tensor> actual =
      run_op_eager(OpKind::FusedBatchNorm, attrs, t, gpu_in, outs, gpu_ctx);
  gpu.synchronize();

  const char* names[] = {"y", "mean", "inv_std"};
  for (size_t i = 0; i < outs.size(); ++i) {
    auto r = all_close(gpu.to_host(actual[i]), expected[i], tol.rtol, tol.atol);
    if (!r) return ::testing::AssertionFailure() << names[i] << ": " << r.message();
  }
  for (size_t i : {size_t(3), size_t(4)}) {
    auto r = all_close(gpu.to_host(gpu_in[i]), cpu_in[i], tol.rtol, tol.atol);
    if (!r)
      return ::testing::AssertionFailure()
             << (i == 3 ? "running_mean" : "running_var") << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

TEST(BatchNormCudaTest, TrainingMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const Shape& xs : bn_shapes())
    for (DType t : kDtypes)
      EXPECT_TRUE(forward_matches(*gpu, t, xs, BatchNormAttrs{1e-5f, 0.1f, true}, bn_tolerance(t)))
          << shape_str(xs) << " " << dtype_name(t);
}

// Another momentum and epsilon: the update rule, not one constant, is what must agree.
TEST(BatchNormCudaTest, TrainingMomentumAndEpsilonMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (DType t : kDtypes)
    EXPECT_TRUE(
        forward_matches(*gpu, t, {5, 4, 6, 3}, BatchNormAttrs{1e-3f, 0.9f, true}, bn_tolerance(t)))
        << dtype_name(t);
}

TEST(BatchNormCudaTest, InferenceMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const Shape& xs : bn_shapes())
    for (DType t : kDtypes)
      EXPECT_TRUE(forward_matches(*gpu, t, xs, BatchNormAttrs{1e-5f, 0.1f, false}, bn_tolerance(t)))
          << shape_str(xs) << " " << dtype_name(t);
}

// FusedBatchNormGrad from the CPU's batch statistics of the same x.
TEST(BatchNormCudaTest, GradMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const Shape& xs : bn_shapes())
    for (DType t : kDtypes)
      for (bool training : {true, false}) {
        const BatchNormAttrs attrs{1e-5f, 0.1f, training};
        const BnInputs in = random_inputs(t, xs, 32);
        ExecContext cpu_ctx;
        const std::vector<Tensor> stats = run_op_eager(
            OpKind::FusedBatchNorm, attrs, t,
            {in.x, in.scale, in.offset, in.running_mean.clone(), in.running_var.clone()},
            forward_outputs(t, xs), cpu_ctx);
        Rng rng(33);
        const Tensor dy = random_tensor_of(t, xs, rng);
        EXPECT_TRUE(cuda_matches_cpu(
            *gpu, OpKind::FusedBatchNormGrad, attrs, t, {dy, in.x, in.scale, stats[1], stats[2]},
            {{xs, t}, {{xs[1]}, DType::f32}, {{xs[1]}, DType::f32}}, bn_tolerance(t)))
            << shape_str(xs) << " " << dtype_name(t) << (training ? " training" : " inference");
      }
}

}  // namespace
}  // namespace campo
