// CUDA Dropout (ops/cuda/dropout.cu) against the CPU kernel. The CPU's mask is a function
// of (seed drawn from ctx.rng, block of 4096 elements, position in the block) through
// runtime/rng.h's xoshiro256**, which the CUDA kernel replicates, so the same context state
// gives the same mask on both devices: y and mask are compared exactly (y = x * mask in f32
// on both sides, one rounding), per dtype, on sizes 1, 7 and 1000003, with a scalar rate and
// with per-slice rates, on misaligned views, and over consecutive steps. A statistics check
// on the GPU alone guards the keep probability and the 1 / (1 - rate) scaling directly.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/elementwise_cuda_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::cuda_matches_cpu_misaligned;
using testing::exact_tolerance;
using testing::random_tensor_of;

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

TEST(DropoutCudaTest, MaskAndOutputMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  for (DType dtype : kDtypes)
    for (int64_t n : {1, 7, 1000003})
      for (float rate : {0.0f, 0.1f, 0.5f}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                     " rate=" + std::to_string(rate));
        const Tensor x = random_tensor_of(dtype, {n}, rng);
        const std::vector<TensorDesc> out = {{{n}, dtype}, {{n}, dtype}};
        EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Dropout, DropoutAttrs{rate, {}}, dtype, {x}, out,
                                     exact_tolerance()));
      }
}

// x [outer, S, inner] with one rate per slice (a model array), including a rate of 0; runs of
// one slice shorter and longer than the 4096-element generator blocks.
TEST(DropoutCudaTest, SliceRatesMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  const DropoutAttrs attrs{0.5f, {0.0f, 0.3f, 0.6f}};
  for (DType dtype : kDtypes)
    for (const Shape& shape : std::vector<Shape>{{4, 6, 1001}, {3, 3, 5000}, {2, 9}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      const Tensor x = random_tensor_of(dtype, shape, rng);
      const std::vector<TensorDesc> out = {{shape, dtype}, {shape, dtype}};
      EXPECT_TRUE(
          cuda_matches_cpu(*gpu, OpKind::Dropout, attrs, dtype, {x}, out, exact_tolerance()));
    }
}

TEST(DropoutCudaTest, MisalignedViewsMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(3);
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random_tensor_of(dtype, {100003}, rng);
    const std::vector<TensorDesc> out = {{{100003}, dtype}, {{100003}, dtype}};
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::Dropout, DropoutAttrs{0.25f, {}}, dtype,
                                            {x}, out, exact_tolerance()));
  }
}

// Several runs of one kernel in one context per device: each run draws a new seed, the
// masks change from step to step and stay equal across devices.
TEST(DropoutCudaTest, ConsecutiveStepsMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(4);
  const int64_t n = 50001;
  const Tensor host_x = random_tensor_of(DType::f32, {n}, rng);
  const KernelSpec spec{OpKind::Dropout,
                        DropoutAttrs{0.5f, {}},
                        DType::f32,
                        {{{n}, DType::f32}},
                        {{{n}, DType::f32}, {{n}, DType::f32}},
                        "Dropout"};
  ExecContext cpu_ctx, gpu_ctx(gpu);
  auto cpu_kernel = create_kernel(spec, cpu_ctx);
  auto gpu_kernel = create_kernel(spec, gpu_ctx);
  const Tensor x = gpu->to_device(host_x);
  std::vector<float> previous;
  for (int step = 0; step < 3; ++step) {
    const Tensor cy = Tensor::zeros({n}, DType::f32), cm = Tensor::zeros({n}, DType::f32);
    cpu_kernel->run(cpu_ctx, {host_x}, {cy, cm});
    const Tensor gy = gpu->zeros({n}, DType::f32), gm = gpu->zeros({n}, DType::f32);
    run_kernel(*gpu_kernel, gpu_ctx, {x}, {gy, gm});
    const std::vector<float> mask = gpu->to_host(gm).to_float_vector();
    EXPECT_EQ(mask, cm.to_float_vector()) << "step " << step;
    EXPECT_EQ(gpu->to_host(gy).to_float_vector(), cy.to_float_vector()) << "step " << step;
    EXPECT_NE(mask, previous) << "step " << step;
    previous = mask;
  }
}

// The GPU alone: the kept fraction within 5 standard deviations of 1 - rate, and every
// element either dropped (y = 0, mask = 0) or kept (mask = 1 / (1 - rate), y = x * mask).
TEST(DropoutCudaTest, KeepStatisticsAndScaling) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(5);
  const int64_t n = 1000003;
  const float rate = 0.3f, scale = 1.0f / (1.0f - rate);
  const Tensor host_x = random_tensor_of(DType::f32, {n}, rng, 0.5f, 1.0f);
  ExecContext ctx(gpu);
  const auto out =
      run_op_eager(OpKind::Dropout, DropoutAttrs{rate, {}}, DType::f32, {gpu->to_device(host_x)},
                   {{{n}, DType::f32}, {{n}, DType::f32}}, ctx);
  const std::vector<float> y = gpu->to_host(out[0]).to_float_vector(),
                           m = gpu->to_host(out[1]).to_float_vector();
  const float* x = host_x.data_as<float>();
  int64_t kept = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (m[size_t(i)] == 0.0f) {
      bad += y[size_t(i)] != 0.0f;
    } else {
      ++kept;
      bad += m[size_t(i)] != scale || y[size_t(i)] != x[i] * scale;
    }
  }
  EXPECT_EQ(bad, 0);
  const double p = 1.0 - rate, sigma = std::sqrt(double(n) * p * (1 - p));
  EXPECT_NEAR(double(kept), double(n) * p, 5 * sigma);
}

}  // namespace
}  // namespace campo
