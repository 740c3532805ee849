// CUDA kernel of MatMul: C [M, N] = op(A) op(B), one cuBLASLt GEMM planned at construction
// (ops/cuda/gemm.h: f32 compute for every dtype, no TF32). A transposed operand is not
// copied: the transpose is the GEMM's.
//
// Padding (KernelSpec::pad_to = p > 0, amp/padding.h), the semantics of the CPU kernel
// (ops/cpu/matmul.cc): a low-precision MatMul whose K or N is not a multiple of p runs on
// zero-padded operands, C_pad [M, Np] = op(A_pad) [M, Kp] op(B_pad) [Kp, Np], and hands back
// C = C_pad[:, :N]; the extra K terms are exact zeros, so the result is the unpadded one up
// to the order of the sums. On the CPU only bf16 pads (f16 is emulated there, its GEMM the
// f32 one); here f16 and bf16 both run native tensor-core GEMMs, so both pad. f32 ignores
// pad_to, as on the CPU. The padded buffers are allocated and zeroed once, at construction
// (stream-ordered before any run); run() copies only the valid part of each operand into
// them (cudaMemcpy2DAsync), so the padding stays zero.
#include <memory>

#include "ops/cuda/context.h"
#include "ops/cuda/gemm.h"

namespace campo {
namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// inputs {A, B}, output C.
class MatMulCudaKernel : public Kernel {
 public:
  MatMulCudaKernel(const KernelSpec& spec, ExecContext& ctx) {
    const auto& t = attrs_as<MatMulAttrs>(spec.attrs);
    const Shape& a = spec.inputs[0].shape;
    const Shape& c = spec.outputs[0].shape;
    const std::string what = "MatMul '" + spec.node_name + "'";
    CAMPO_CHECK(a.size() == 2 && spec.inputs[1].shape.size() == 2 && c.size() == 2, what,
                ": expected 2-D operands, got ", shape_str(a), " x ", shape_str(spec.inputs[1].shape));
    CAMPO_CHECK(spec.pad_to >= 0, what, ": pad_to must be >= 0, not ", spec.pad_to);
    transpose_a_ = t.transpose_a;
    transpose_b_ = t.transpose_b;
    M_ = c[0];
    N_ = c[1];
    K_ = t.transpose_a ? a[0] : a[1];
    elem_ = dtype_size(spec.dtype);
    const bool pads = spec.pad_to > 0 && (spec.dtype == DType::bf16 || spec.dtype == DType::f16);
    Kp_ = pads ? round_up(K_, spec.pad_to) : K_;
    Np_ = pads ? round_up(N_, spec.pad_to) : N_;

    Backend& backend = ctx.backend();
    cudaStream_t stream = cuda_stream(ctx);
    auto zeroed = [&](int64_t elements) {
      std::shared_ptr<void> p = backend.allocate(size_t(elements) * elem_);
      CAMPO_CUDA_CHECK(cudaMemsetAsync(p.get(), 0, size_t(elements) * elem_, stream));
      return p;
    };
    // A needs a copy only when K grows, C only when N does, B when either does.
    if (Kp_ != K_) a_pad_ = zeroed(M_ * Kp_);
    if (Kp_ != K_ || Np_ != N_) b_pad_ = zeroed(Kp_ * Np_);
    if (Np_ != N_) c_pad_ = zeroed(M_ * Np_);

    cuda::GemmShape shape;
    shape.dtype = spec.dtype;
    shape.M = M_;
    shape.N = Np_;
    shape.K = Kp_;
    shape.transpose_a = t.transpose_a;
    shape.transpose_b = t.transpose_b;
    gemm_ = std::make_unique<cuda::Gemm>(shape, ctx, what);
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    using cuda::copy_rows;
    const void* a = in[0].device_data();
    const void* b = in[1].device_data();
    void* c = out[0].device_data();
    // A: [M, K] -> [M, Kp] (new columns), or stored [K, M] -> [Kp, M] (new rows).
    if (a_pad_) {
      if (transpose_a_)
        copy_rows(ctx, a, M_, a_pad_.get(), M_, K_, M_, elem_);
      else
        copy_rows(ctx, a, K_, a_pad_.get(), Kp_, M_, K_, elem_);
      a = a_pad_.get();
    }
    // B: [K, N] -> [Kp, Np], or stored [N, K] -> [Np, Kp].
    if (b_pad_) {
      if (transpose_b_)
        copy_rows(ctx, b, K_, b_pad_.get(), Kp_, N_, K_, elem_);
      else
        copy_rows(ctx, b, N_, b_pad_.get(), Np_, K_, N_, elem_);
      b = b_pad_.get();
    }
    gemm_->run(ctx, a, b, c_pad_ ? c_pad_.get() : c);
    // C = C_pad[:, :N].
    if (c_pad_) copy_rows(ctx, c_pad_.get(), Np_, c, N_, M_, N_, elem_);
  }

 private:
  std::unique_ptr<cuda::Gemm> gemm_;
  bool transpose_a_ = false, transpose_b_ = false;
  int64_t M_ = 0, N_ = 0, K_ = 0, Kp_ = 0, Np_ = 0;
  size_t elem_ = 0;
  std::shared_ptr<void> a_pad_, b_pad_, c_pad_;  // null where that operand is used in place
};

std::unique_ptr<Kernel> make_matmul(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<MatMulCudaKernel>(spec, ctx);
}

KernelRegistrar matmul_f32(OpKind::MatMul, Device::cuda, DType::f32, make_matmul);
KernelRegistrar matmul_f16(OpKind::MatMul, Device::cuda, DType::f16, make_matmul);
KernelRegistrar matmul_bf16(OpKind::MatMul, Device::cuda, DType::bf16, make_matmul);

}  // namespace
}  // namespace campo
