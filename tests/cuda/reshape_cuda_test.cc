// Reshape and Const on CUDA (ops/cuda/reshape.cu, ops/cuda/const.cu) against the CPU
// kernels. Copies and fills compute nothing: tolerance 0.
#include <gtest/gtest.h>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;

TEST(ReshapeCudaTest, MatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_tensor_of(dtype, {7, 1000003 / 7 + 1}, rng);
    const Shape out{x.numel()};
    EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Reshape, ReshapeAttrs{out}, dtype, {x}, {{out, dtype}},
                                 {0.0, 0.0}));
  }
}

TEST(ConstCudaTest, MatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{1000003}, Shape{3, 0}})
    EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Const, ConstAttrs{shape, 0.375f}, DType::f32, {},
                                 {{shape, DType::f32}}, {0.0, 0.0}));
}

}  // namespace
}  // namespace campo
