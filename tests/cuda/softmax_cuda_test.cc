// CUDA Softmax / SoftmaxGrad against the CPU kernels (ops/cpu/softmax.cc), per dtype, on
// the warp-per-row path (rows up to 1024) and the block-per-row path, odd row lengths and
// counts that leave tails, attention-shaped [B, H, S, S] input, and large logits.
#include <gtest/gtest.h>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// f32: CUDA's expf differs from oneDNN's by a few ulp, the row sum is f32 in another order
// (rows up to 30k values: relative error ~1e-6) and y = e * (1 / s) is two roundings:
// rtol 1e-5; values near 0 take the absolute 1e-6. Low-precision outputs: one rounding of
// f32 values that agree that well, so the dtype's table (one ulp).
testing::Tolerance tol(DType dtype) {
  return dtype == DType::f32 ? testing::Tolerance{1e-5, 1e-6} : testing::tolerance_for(dtype);
}

const Shape kShapes[] = {{1},       {7},       {3, 5, 33}, {2, 4, 17, 17},
                         {9, 1024}, {5, 1025}, {3, 30522}, {1000, 3}};

TEST(SoftmaxCudaTest, SoftmaxMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(21);
  for (const Shape& s : kShapes)
    for (DType dtype : kDtypes)
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Softmax, NoAttrs{}, dtype,
                                   {random_tensor_of(dtype, s, rng, -8.0f, 8.0f)}, {{s, dtype}},
                                   tol(dtype)))
          << shape_str(s);
}

// Logits beyond exp's range: the row maximum is subtracted first.
TEST(SoftmaxCudaTest, SoftmaxLargeLogits) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(22);
  for (const Shape& s : {Shape{4, 100}, Shape{3, 2000}})
    EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Softmax, NoAttrs{}, DType::f32,
                                 {random_tensor_of(DType::f32, s, rng, 1000.0f, 1010.0f)},
                                 {{s, DType::f32}}, tol(DType::f32)));
}

// dX = (dY - sum(dY Y)) Y: the f32 dot product runs in another order than the CPU's simd
// reduction; (dY - s) cancels where dY is close to s, so the absolute floor is the sum's
// error, about 1e-6 for the rows here (|dY Y| <= 1).
TEST(SoftmaxCudaTest, SoftmaxGradMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(23);
  for (const Shape& s : kShapes)
    for (DType dtype : kDtypes) {
      const Tensor dy = random_tensor_of(dtype, s, rng);
      const Tensor y = random_tensor_of(dtype, s, rng, 0.0f, 1.0f);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::SoftmaxGrad, NoAttrs{}, dtype, {dy, y},
                                   {{s, dtype}}, tol(dtype)))
          << shape_str(s);
    }
}

}  // namespace
}  // namespace campo
