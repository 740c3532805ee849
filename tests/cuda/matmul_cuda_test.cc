// MatMul on CUDA (ops/cuda/matmul.cc, one cuBLASLt GEMM) against the CPU kernel, per dtype,
// for the four transpose combinations (both transposes are the gradients' GEMMs: dx = dy W^T,
// dW = x^T dy), odd sizes, an empty sum (K = 0), and the padded variant (pad_to).
// Tolerances: tests/cuda/gemm_tolerance.h.
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
  int64_t M, K, N;
};

Tensor operand(DType dtype, int64_t rows, int64_t cols, bool transposed, Rng& rng) {
  return random_tensor_of(dtype, transposed ? Shape{cols, rows} : Shape{rows, cols}, rng);
}

TEST(MatMulCudaTest, MatchesCpuForEveryTransposeAndDtype) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  for (DType dtype : kDtypes)
    for (const Case& c : {Case{1, 1, 1}, Case{7, 5, 3}, Case{33, 257, 17}, Case{128, 1000, 3},
                          Case{3, 64, 1001}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " M=" + std::to_string(c.M) +
                       " K=" + std::to_string(c.K) + " N=" + std::to_string(c.N) +
                       (ta ? " transpose_a" : "") + (tb ? " transpose_b" : ""));
          Tensor a = operand(dtype, c.M, c.K, ta, rng);
          Tensor b = operand(dtype, c.K, c.N, tb, rng);
          EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::MatMul, MatMulAttrs{ta, tb}, dtype, {a, b},
                                       {{{c.M, c.N}, dtype}}, gemm_tolerance(dtype, c.K)));
        }
}

// A dense layer's three GEMMs: y = x W, dx = dy W^T, dW = x^T dy (batch 37, 100 -> 19).
TEST(MatMulCudaTest, DenseLayerForwardAndGradients) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const int64_t batch = 37, in = 100, out = 19;
  Rng rng(2);
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = random_tensor_of(dtype, {batch, in}, rng);
    Tensor w = random_tensor_of(dtype, {in, out}, rng);
    Tensor dy = random_tensor_of(dtype, {batch, out}, rng);
    EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::MatMul, MatMulAttrs{false, false}, dtype, {x, w},
                                 {{{batch, out}, dtype}}, gemm_tolerance(dtype, in)));
    EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::MatMul, MatMulAttrs{false, true}, dtype, {dy, w},
                                 {{{batch, in}, dtype}}, gemm_tolerance(dtype, out)));
    EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::MatMul, MatMulAttrs{true, false}, dtype, {x, dy},
                                 {{{in, out}, dtype}}, gemm_tolerance(dtype, batch)));
  }
}

// K = 0: an empty sum, C = 0 (as the CPU kernel). The output starts as ones, so the
// kernel must write the zeros itself.
TEST(MatMulCudaTest, EmptySumIsZero) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(3);
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = random_tensor_of(dtype, {5, 0}, rng);
    Tensor b = random_tensor_of(dtype, {0, 3}, rng);
    auto gpu_ptr = std::shared_ptr<Backend>(gpu.get(), [](Backend*) {});
    ExecContext gpu_ctx(gpu_ptr);
    KernelSpec spec{OpKind::MatMul, MatMulAttrs{}, dtype, {{a.shape(), dtype}, {b.shape(), dtype}},
                    {{{5, 3}, dtype}}, "empty_sum"};
    auto kernel = create_kernel(spec, gpu_ctx);
    const std::vector<Tensor> out = {gpu->empty({5, 3}, dtype)};
    gpu->write(out[0], random_tensor_of(dtype, {5, 3}, rng, 1.0f, 2.0f));
    kernel->run(gpu_ctx, {gpu->to_device(a), gpu->to_device(b)}, out);
    for (float v : gpu->to_host(out[0]).to_float_vector()) EXPECT_EQ(v, 0.0f);
  }
}

// pad_to (amp/padding.h): the padded GEMM's result is the unpadded one up to the order of
// the sums, so it matches the CPU's unpadded kernel within the same tolerance. Run twice, so
// the second run sees padding buffers the first run left behind (they must stay zero).
TEST(MatMulCudaTest, PaddedMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(4);
  for (DType dtype : {DType::f16, DType::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (ta ? " transpose_a" : "") +
                     (tb ? " transpose_b" : ""));
        const int64_t M = 9, K = 37, N = 21;
        Tensor a = operand(dtype, M, K, ta, rng);
        Tensor b = operand(dtype, K, N, tb, rng);
        ExecContext cpu_ctx;
        const Tensor expected =
            run_op_eager(OpKind::MatMul, MatMulAttrs{ta, tb}, dtype, {a, b}, {{{M, N}, dtype}}, cpu_ctx)[0];

        auto gpu_ptr = std::shared_ptr<Backend>(gpu.get(), [](Backend*) {});
        ExecContext gpu_ctx(gpu_ptr);
        KernelSpec spec{OpKind::MatMul, MatMulAttrs{ta, tb}, dtype,
                        {{a.shape(), dtype}, {b.shape(), dtype}}, {{{M, N}, dtype}}, "padded"};
        spec.pad_to = 16;
        auto kernel = create_kernel(spec, gpu_ctx);
        const std::vector<Tensor> in = {gpu->to_device(a), gpu->to_device(b)};
        const std::vector<Tensor> out = {gpu->zeros({M, N}, dtype)};
        for (int run = 0; run < 2; ++run) {
          kernel->run(gpu_ctx, in, out);
          gpu->synchronize();
          const testing::Tolerance tol = gemm_tolerance(dtype, K);
          EXPECT_TRUE(testing::all_close(gpu->to_host(out[0]), expected, tol.rtol, tol.atol))
              << "run " << run;
        }
      }
}

}  // namespace
}  // namespace campo
