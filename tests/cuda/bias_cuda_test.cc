// CUDA BiasAdd and BiasAddGrad (ops/cuda/bias.cu) against the CPU kernels, per dtype, on
// [N, C] and NCHW shapes: single elements, odd sizes (7, 1000003 elements), few channels
// over many elements (BiasAddGrad's split path), many channels.
//
// Tolerances:
//  - BiasAdd: exact (x + bias[c] in f32 on both sides, one rounding).
//  - BiasAddGrad: the same sum in another order (CPU: f32 rows in 16 lanes, double across N;
//    CUDA: f32 per thread, a shared-memory tree, splits in order). Each order's rounding error
//    is at most ~depth * eps * sum |dy| and typically a random walk far below it; with dy in
//    [-1, 1] that is below 1e-7 * count (count = N * S summed values per channel), the atol
//    used, plus rtol 1e-5 in f32. A wrong channel or a lost element errs by ~1 or more. For
//    f16 / bf16 dbias, one ulp of the output dtype on top (output_ulp).
#include <gtest/gtest.h>

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
using testing::output_ulp;
using testing::random_tensor_of;
using testing::Tolerance;

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

std::vector<Shape> shapes() {
  return {{1, 1},          {1, 7},           {7, 1},       {1000003, 1}, {1, 1000003},
          {100003, 10},    {3, 3001},        {1, 7, 1, 1}, {2, 3, 5, 7}, {16, 3, 127, 129},
          {8, 16, 33, 35}, {3, 5, 1, 66667}, {5, 3, 1, 3}};  // the last: runs of 3, shorter than a
                                                             // 16-byte pack
}

Tolerance grad_tolerance(DType dtype, const Shape& shape) {
  const double count = double(shape_numel(shape) / shape[1]);
  return output_ulp(dtype, 1e-5, 1e-7 * count);
}

TEST(BiasCudaTest, BiasAddMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      const Tensor x = random_tensor_of(dtype, shape, rng),
                   bias = random_tensor_of(dtype, {shape[1]}, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::BiasAdd, NoAttrs{}, dtype, {x, bias},
                                   {{shape, dtype}}, exact_tolerance()));
    }
}

TEST(BiasCudaTest, BiasAddGradMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  for (DType dtype : kDtypes)
    for (const Shape& shape : shapes()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(shape));
      const Tensor dy = random_tensor_of(dtype, shape, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::BiasAddGrad, NoAttrs{}, dtype, {dy},
                                   {{{shape[1]}, dtype}}, grad_tolerance(dtype, shape)));
    }
}

// The same kernels on views one element past an aligned allocation.
TEST(BiasCudaTest, MisalignedViewsMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(3);
  const Shape shape = {4, 6, 37, 41};
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random_tensor_of(dtype, shape, rng),
                 bias = random_tensor_of(dtype, {shape[1]}, rng);
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::BiasAdd, NoAttrs{}, dtype, {x, bias},
                                            {{shape, dtype}}, exact_tolerance()));
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::BiasAddGrad, NoAttrs{}, dtype, {x},
                                            {{{shape[1]}, dtype}}, grad_tolerance(dtype, shape)));
  }
}

// Deterministic: the same dbias bits on every run (a fixed grid and summation order).
TEST(BiasCudaTest, BiasAddGradIsDeterministic) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(4);
  const Shape shape = {64, 3, 128, 128};
  const Tensor dy = gpu->to_device(random_tensor_of(DType::f32, shape, rng));
  ExecContext ctx(gpu);
  const Tensor first = gpu->to_host(
      run_op_eager(OpKind::BiasAddGrad, NoAttrs{}, DType::f32, {dy}, {{{3}, DType::f32}}, ctx)[0]);
  for (int k = 0; k < 3; ++k) {
    const Tensor again = gpu->to_host(run_op_eager(OpKind::BiasAddGrad, NoAttrs{}, DType::f32, {dy},
                                                   {{{3}, DType::f32}}, ctx)[0]);
    EXPECT_EQ(again.to_float_vector(), first.to_float_vector());
  }
}

}  // namespace
}  // namespace campo
