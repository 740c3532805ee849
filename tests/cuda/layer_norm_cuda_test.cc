// CUDA LayerNorm / LayerNormGrad against the CPU kernels (ops/cpu/layer_norm.cc), per dtype
// of the data (scale, offset and the statistics f32), on the warp-per-row path (BERT's
// [B, S, 768]), the block-per-row path (C > 1024), a single row, C = 1, and many short rows
// (many row chunks in dscale / doffset).
#include <gtest/gtest.h>

#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
const Shape kShapes[] = {{7}, {4, 1}, {3, 5}, {2, 50, 768}, {3, 1025}, {1000, 17}};

Shape rows_of(const Shape& x) { return Shape(x.begin(), x.end() - 1); }

// Forward: both sides take the row statistics in double and round them to f32, so mean and
// inv_std agree but for rare one-ulp flips of that rounding, which pass on to y through
// (x - mean) * inv_std: rtol 1e-5 for f32 (a few ulp), 1e-6 absolute for y near 0. Low
// precision y: one rounding of f32 values that agree that well, the dtype's table.
testing::Tolerance forward_tol(DType dtype) {
  return dtype == DType::f32 ? testing::Tolerance{1e-5, 1e-6} : testing::tolerance_for(dtype);
}

// Backward: dx = inv_std (g - mean(g) - xhat mean(g xhat)) cancels, and dscale / doffset add
// f32 products over up to 1000 rows in another (chunked) order: 1e-5 relative and absolute
// for f32 data; low-precision dx the dtype's table with the same absolute floor.
testing::Tolerance backward_tol(DType dtype) {
  return dtype == DType::f32 ? testing::Tolerance{1e-5, 1e-5}
                             : testing::Tolerance{testing::tolerance_for(dtype).rtol, 1e-5};
}

TEST(LayerNormCudaTest, LayerNormMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(31);
  for (const Shape& s : kShapes)
    for (DType dtype : kDtypes) {
      const Shape c{s.back()};
      const std::vector<Tensor> in{random_tensor_of(dtype, s, rng, -3.0f, 5.0f),
                                   random_tensor_of(DType::f32, c, rng, 0.5f, 1.5f),
                                   random_tensor_of(DType::f32, c, rng)};
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::LayerNorm, LayerNormAttrs{1e-5f}, dtype, in,
                                   {{s, dtype}, {rows_of(s), DType::f32}, {rows_of(s), DType::f32}},
                                   forward_tol(dtype)))
          << shape_str(s);
    }
}

TEST(LayerNormCudaTest, LayerNormGradMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(32);
  for (const Shape& s : kShapes)
    for (DType dtype : kDtypes) {
      const Shape c{s.back()};
      const Tensor x = random_tensor_of(dtype, s, rng, -3.0f, 5.0f);
      const Tensor scale = random_tensor_of(DType::f32, c, rng, 0.5f, 1.5f);
      const Tensor offset = random_tensor_of(DType::f32, c, rng);
      // The statistics the forward pass gives (the CPU's), as LayerNormGrad's inputs.
      ExecContext cpu;
      const std::vector<Tensor> fwd =
          run_op_eager(OpKind::LayerNorm, LayerNormAttrs{1e-5f}, dtype, {x, scale, offset},
                       {{s, dtype}, {rows_of(s), DType::f32}, {rows_of(s), DType::f32}}, cpu);
      const Tensor dy = random_tensor_of(dtype, s, rng);
      EXPECT_TRUE(cuda_matches_cpu(
          *gpu, OpKind::LayerNormGrad, LayerNormAttrs{1e-5f}, dtype, {dy, x, scale, fwd[1], fwd[2]},
          {{s, dtype}, {c, DType::f32}, {c, DType::f32}}, backward_tol(dtype)))
          << shape_str(s);
    }
}

}  // namespace
}  // namespace campo
