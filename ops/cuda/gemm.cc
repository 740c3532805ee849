// cuBLASLt GEMM planned once (ops/cuda/gemm.h: the operand swap, numerics and planning).
#include "ops/cuda/gemm.h"

#include <climits>
#include <utility>

#include "ops/cuda/context.h"

namespace campo::cuda {
namespace {

cudaDataType_t cuda_data_type(DType t, const std::string& what) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
    default:
      CAMPO_FAIL(what, ": no cuBLASLt GEMM for ", dtype_name(t), " (f32, f16 and bf16 only)");
  }
}

cudaDataType_t fp8_data_type(ElementFormat f, const std::string& what) {
  CAMPO_CHECK(f == ElementFormat::e4m3 || f == ElementFormat::e5m2, what,
              ": no cuBLASLt FP8 GEMM on ", element_format_name(f), " operands");
  return f == ElementFormat::e4m3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

// The column-major layout of a row-major [rows, cols] matrix stored densely (ld = cols),
// `batch` of them `stride` elements apart.
// Created into `layout` (a member) first, so a failing attribute leaves it to destroy().
void set_row_major_layout(cublasLtMatrixLayout_t& layout, cudaDataType_t type, int64_t rows,
                          int64_t cols, int64_t batch, int64_t stride) {
  CAMPO_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(cols), uint64_t(rows), cols));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    CAMPO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                        &count, sizeof(count)));
    CAMPO_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
}

}  // namespace

Gemm::Gemm(const GemmShape& s, ExecContext& ctx, std::string what)
    : shape_(s), what_(std::move(what)) {
  (void)cuda_data_type(s.dtype, what_);  // refuses other dtypes before any planning
  CAMPO_CHECK(s.M >= 0 && s.N >= 0 && s.K >= 0 && s.batch >= 0, what_, ": negative GEMM size M=",
              s.M, " N=", s.N, " K=", s.K, " batch=", s.batch);
  CAMPO_CHECK(s.batch <= INT32_MAX, what_, ": ", s.batch,
              " products exceed cuBLASLt's batch count (int32)");
  empty_ = s.M == 0 || s.N == 0 || s.batch == 0;
  no_sum_ = !empty_ && s.K == 0;
  if (empty_ || no_sum_) return;
  try {
    plan(s, ctx);
  } catch (...) {
    destroy();  // the destructor does not run for a constructor that throws
    throw;
  }
}

void Gemm::plan(const GemmShape& s, ExecContext& ctx) {
  const cudaDataType_t type = cuda_data_type(s.dtype, what_);
  // campo's operand types (A, B): the storage dtype, or FP8 codes.
  const cudaDataType_t type_a = s.fp8 ? fp8_data_type(s.fp8_formats[0], what_) : type;
  const cudaDataType_t type_b = s.fp8 ? fp8_data_type(s.fp8_formats[1], what_) : type;
  if (s.fp8)
    CAMPO_CHECK(!s.transpose_a && s.transpose_b && s.dtype == DType::f32 &&
                    !(type_a == CUDA_R_8F_E5M2 && type_b == CUDA_R_8F_E5M2),
                "internal: ", what_,
                ": cuBLASLt's FP8 GEMM takes e4m3 x e4m3, e4m3 x e5m2 or "
                "e5m2 x e4m3 codes, A [M, K] and B stored [N, K], into f32");
  // Compute and scale type f32 for every storage dtype (gemm.h, "Numerics").
  CAMPO_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (s.fp8) {
    // cuBLASLt's A is campo's B (the operand swap below), so its A scale is campo's B's.
    const void* scale_a = s.fp8_scales[1];
    const void* scale_b = s.fp8_scales[0];
    CAMPO_CHECK(scale_a && scale_b, "internal: ", what_, ": an FP8 GEMM without its scales");
    CAMPO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                      &scale_a, sizeof(scale_a)));
    CAMPO_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                      &scale_b, sizeof(scale_b)));
  }
  // The operand swap: cuBLASLt's A is campo's B and keeps B's transpose flag, and vice versa.
  const cublasOperation_t op_a = s.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CAMPO_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  CAMPO_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  // campo's B is stored [N, K] (transposed) or [K, N]; campo's A [K, M] or [M, K]; C [M, N].
  if (s.transpose_b)
    set_row_major_layout(a_layout_, type_b, s.N, s.K, s.batch, s.stride_b);
  else
    set_row_major_layout(a_layout_, type_b, s.K, s.N, s.batch, s.stride_b);
  if (s.transpose_a)
    set_row_major_layout(b_layout_, type_a, s.K, s.M, s.batch, s.stride_a);
  else
    set_row_major_layout(b_layout_, type_a, s.M, s.K, s.batch, s.stride_a);
  set_row_major_layout(c_layout_, type, s.M, s.N, s.batch, s.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  CAMPO_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = kMaxWorkspaceBytes;
  const uint32_t alignment = uint32_t(kOperandAlignment);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment));
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(cuda_backend(ctx).cublaslt(), desc_, a_layout_,
                                            b_layout_, c_layout_, c_layout_, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  CAMPO_CUBLAS_CHECK(status);
  CAMPO_CHECK(found > 0 && result.state == CUBLAS_STATUS_SUCCESS, what_,
              ": cuBLASLt has no algorithm for ",
              s.fp8 ? std::string(element_format_name(s.fp8_formats[0])) + " x " +
                          element_format_name(s.fp8_formats[1]) + " codes"
                    : std::string(dtype_name(s.dtype)),
              " [", s.M, ", ", s.K, "] x [", s.K, ", ", s.N, "]",
              (s.batch > 1 ? " x" + std::to_string(s.batch) : ""), " (transpose_a=", s.transpose_a,
              ", transpose_b=", s.transpose_b, ")");
  algo_ = result.algo;
  workspace_bytes_ = result.workspaceSize;
  // The context's kernels run one at a time on one stream: one workspace serves them all.
  // Room to align it to 256 bytes (cuBLAS's workspace alignment; the backend gives 64).
  if (workspace_bytes_ > 0) ctx.reserve_workspace(workspace_bytes_ + kWorkspaceAlignment);
}

Gemm::~Gemm() { destroy(); }

void Gemm::destroy() {
  // Destroy calls only fail on a null handle; nothing to report from a destructor.
  if (c_layout_) cublasLtMatrixLayoutDestroy(c_layout_);
  if (b_layout_) cublasLtMatrixLayoutDestroy(b_layout_);
  if (a_layout_) cublasLtMatrixLayoutDestroy(a_layout_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
  c_layout_ = b_layout_ = a_layout_ = nullptr;
  desc_ = nullptr;
}

void Gemm::run(ExecContext& ctx, const void* a, const void* b, void* c, float alpha,
               float beta) const {
  if (empty_) return;
  cudaStream_t stream = cuda_stream(ctx);
  if (no_sum_) {  // an empty sum over K: C = beta C
    if (beta == 1.0f) return;
    CAMPO_CHECK(beta == 0.0f, what_, ": K = 0 with beta = ", beta, " is not supported");
    const size_t elem = dtype_size(shape_.dtype);
    const size_t bytes = size_t(shape_.M * shape_.N) * elem;
    if (shape_.batch == 1 || shape_.stride_c == shape_.M * shape_.N)
      CAMPO_CUDA_CHECK(cudaMemsetAsync(c, 0, bytes * size_t(shape_.batch), stream));
    else
      CAMPO_CUDA_CHECK(cudaMemset2DAsync(c, size_t(shape_.stride_c) * elem, 0, bytes,
                                         size_t(shape_.batch), stream));
    return;
  }
  for (const void* p : {a, b, static_cast<const void*>(c)})
    CAMPO_CHECK(reinterpret_cast<uintptr_t>(p) % kOperandAlignment == 0, what_, ": operand at ", p,
                " is not ", kOperandAlignment,
                "-byte aligned, which the planned cuBLASLt algorithm assumes");
  void* workspace = nullptr;
  if (workspace_bytes_ > 0) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(ctx.workspace());
    workspace = reinterpret_cast<void*>((p + kWorkspaceAlignment - 1) / kWorkspaceAlignment *
                                        kWorkspaceAlignment);
  }
  // cuBLASLt's A is campo's B and its B campo's A (gemm.h); C is also the output D.
  CAMPO_CUBLAS_CHECK(cublasLtMatmul(cuda_backend(ctx).cublaslt(), desc_, &alpha, b, a_layout_, a,
                                    b_layout_, &beta, c, c_layout_, c, c_layout_, &algo_, workspace,
                                    workspace_bytes_, stream));
}

}  // namespace campo::cuda
