// One cuBLASLt GEMM, planned once: the matmul of MatMul and BatchMatMulV2 (and of any CUDA
// kernel that needs C = alpha op(A) op(B) + beta C on row-major campo tensors).
//
// Row-major to column-major: cuBLASLt is column-major, and a row-major [r, c] matrix is the
// column-major [c, r] one with the same bytes. So the row-major C [M, N] = op(A) op(B) is
// computed as the column-major C^T [N, M] = op(B)^T op(A)^T: cuBLASLt's A is campo's B,
// its B is campo's A, m = N, n = M, and each keeps its own transpose flag (a row-major
// operand stored transposed is, read column-major, the untransposed one, and vice versa).
//
// Numerics: CUBLAS_COMPUTE_32F with f32 scale type for every storage dtype. f32 operands
// run true f32 FMA (no TF32: that would be CUBLAS_COMPUTE_32F_FAST_TF32), so the result
// differs from the CPU's only by the order of the sums. f16 / bf16 operands go to tensor
// cores with f32 accumulation and one rounding of the result (as oneDNN's bf16 matmul).
//
// Planned at construction: the matmul descriptor, the four layouts, the algorithm (the
// heuristic's first choice, cublasLtMatmulAlgoGetHeuristic) and its workspace (at most
// kMaxWorkspaceBytes, the context's shared workspace, ExecContext::reserve_workspace). The
// algorithm is chosen for operand addresses aligned to kOperandAlignment bytes (campo's
// buffers and planned tensors are 64-byte aligned); run() checks it and refuses others.
// run() issues one cublasLtMatmul on the context's stream and nothing else.
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <string>

#include "ops/kernel.h"

namespace campo::cuda {

struct GemmShape {
  DType dtype = DType::f32;     // storage type of A, B and C (f32, f16, bf16)
  int64_t M = 0, N = 0, K = 0;  // C [M, N] = op(A) [M, K] op(B) [K, N]
  bool transpose_a = false;     // A stored [K, M] (else [M, K]), row-major
  bool transpose_b = false;     // B stored [N, K] (else [K, N]), row-major
  // Strided batch: `batch` products, operand i of product b at base + b * stride (elements).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // FP8 operands (the quantized GEMMs, ops/cuda/quantized_gemm.cu): A and B hold one-byte
  // codes of fp8_formats[0] and [1], C is `dtype` (f32), and the product of operand i is
  // multiplied by the f32 at fp8_scales[i] (device memory that outlives the Gemm; cuBLASLt
  // reads it at every run): C = (s_a s_b) op(A) op(B). cuBLASLt's FP8 GEMM takes only its
  // "TN" layout, here transpose_a = false and transpose_b = true (both operands K-contiguous),
  // and no e5m2 x e5m2.
  bool fp8 = false;
  std::array<ElementFormat, 2> fp8_formats{};
  std::array<const float*, 2> fp8_scales{};
};

class Gemm {
 public:
  static constexpr size_t kMaxWorkspaceBytes = size_t(32) << 20;
  static constexpr uintptr_t kOperandAlignment = 16;
  static constexpr uintptr_t kWorkspaceAlignment = 256;

  // `what` names the node for errors ("MatMul 'dense/MatMul'").
  Gemm(const GemmShape& shape, ExecContext& ctx, std::string what);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // C = alpha op(A) op(B) + beta C (beta = 0: C is only written), on cuda_stream(ctx).
  void run(ExecContext& ctx, const void* a, const void* b, void* c, float alpha = 1.0f,
           float beta = 0.0f) const;

  const GemmShape& shape() const { return shape_; }

 private:
  void plan(const GemmShape& s, ExecContext& ctx);
  void destroy();

  GemmShape shape_;
  std::string what_;
  bool empty_ = false;  // M, N or batch is 0: nothing to compute
  bool no_sum_ = false;  // K is 0: C = beta C
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_layout_ = nullptr, b_layout_ = nullptr, c_layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_bytes_ = 0;
};

}  // namespace campo::cuda
