// BatchMatMulV2 on CUDA (ops/cuda/batch_matmul.cc, one strided batched cuBLASLt GEMM) against
// the CPU kernel, per dtype: every adj_x / adj_y combination (the gradients of z = x y are
// dx = dz adj(y) and dy = adj(x) dz, the adj variants), ranks 2 to 4, odd sizes, BERT's
// attention shapes, and an empty sum (K = 0). Tolerances: tests/cuda/gemm_tolerance.h.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/gemm_tolerance.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::gemm_tolerance;
using testing::random_tensor_of;

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

struct Case {
  Shape batch;
  int64_t M, K, N;
};

// [batch..., rows, cols], or [batch..., cols, rows] when adjoint.
Shape side(const Shape& batch, int64_t rows, int64_t cols, bool adj) {
  Shape s = batch;
  s.push_back(adj ? cols : rows);
  s.push_back(adj ? rows : cols);
  return s;
}

TEST(BatchMatMulCudaTest, MatchesCpuForEveryAdjointAndDtype) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  const std::vector<Case> cases = {
      {{}, 7, 5, 3},          // rank 2: one product
      {{1}, 1, 1, 1},         //
      {{3}, 9, 33, 17},       //
      {{2, 3}, 5, 129, 7},    // rank 4
      {{2, 4}, 13, 16, 13},   // attention scores, [B, H, T, d] x [B, H, T, d]^T, T = 13
      {{5}, 1, 1000, 1},      // long sums
  };
  for (DType dtype : kDtypes)
    for (const Case& c : cases)
      for (bool adj_x : {false, true})
        for (bool adj_y : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " batch " + shape_str(c.batch) +
                       " M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
                       " N=" + std::to_string(c.N) + (adj_x ? " adj_x" : "") + (adj_y ? " adj_y" : ""));
          Tensor x = random_tensor_of(dtype, side(c.batch, c.M, c.K, adj_x), rng);
          Tensor y = random_tensor_of(dtype, side(c.batch, c.K, c.N, adj_y), rng);
          EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::BatchMatMulV2, BatchMatMulAttrs{adj_x, adj_y},
                                       dtype, {x, y}, {{side(c.batch, c.M, c.N, false), dtype}},
                                       gemm_tolerance(dtype, c.K)));
        }
}

// K = 0: an empty sum, z = 0. The output starts as ones, so the kernel must write the zeros.
TEST(BatchMatMulCudaTest, EmptySumIsZero) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Shape x{3, 4, 0}, y{3, 0, 5}, z{3, 4, 5};
    auto gpu_ptr = std::shared_ptr<Backend>(gpu.get(), [](Backend*) {});
    ExecContext gpu_ctx(gpu_ptr);
    KernelSpec spec{OpKind::BatchMatMulV2, BatchMatMulAttrs{}, dtype, {{x, dtype}, {y, dtype}},
                    {{z, dtype}}, "empty_sum"};
    auto kernel = create_kernel(spec, gpu_ctx);
    const std::vector<Tensor> out = {gpu->empty(z, dtype)};
    gpu->write(out[0], random_tensor_of(dtype, z, rng, 1.0f, 2.0f));
    kernel->run(gpu_ctx, {gpu->zeros(x, dtype), gpu->zeros(y, dtype)}, out);
    for (float v : gpu->to_host(out[0]).to_float_vector()) EXPECT_EQ(v, 0.0f);
  }
}

// Padding is MatMul's alone: a request here is refused, as on the CPU.
TEST(BatchMatMulCudaTest, RefusesPadding) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  auto gpu_ptr = std::shared_ptr<Backend>(gpu.get(), [](Backend*) {});
  ExecContext gpu_ctx(gpu_ptr);
  KernelSpec spec{OpKind::BatchMatMulV2, BatchMatMulAttrs{}, DType::bf16,
                  {{{2, 3, 5}, DType::bf16}, {{2, 5, 7}, DType::bf16}}, {{{2, 3, 7}, DType::bf16}},
                  "padded"};
  spec.pad_to = 16;
  EXPECT_THROW(create_kernel(spec, gpu_ctx), Error);
}

}  // namespace
}  // namespace campo
