// CPU kernel of MatMul (oneDNN 2.6 matmul primitive): C [M, N] = op(A) op(B).
// A transposed operand is not copied: it is described to oneDNN as the logical matrix with
// swapped strides (format tag `ba` on row-major [K, M] storage is [M, K] read by columns).
// The primitive and its scratchpad are built once, at construction.
//
// Padding (KernelSpec::pad_to = p > 0, set by the cost-aware policy, amp/padding.h): a
// native bf16 MatMul whose K or N is not a multiple of p runs on zero-padded operands,
//   C_pad [M, Np] = op(A_pad) [M, Kp] op(B_pad) [Kp, Np],  Kp = ceil(K / p) p, Np likewise,
// and hands back C = C_pad[:, :N]. The extra K terms are products with zeros, so they add
// exact zeros to every sum; the extra N columns are computed and dropped. M is not padded:
// rows of C are independent, so an unaligned M only leaves a shorter last block of rows
// (reasoned, not measured).
// The padded buffers are allocated and zeroed once, at construction; run() copies only the
// valid part of each operand into them, so their padding stays zero and nothing is
// allocated per step. f32 kernels ignore pad_to (the policy pads low-precision nodes only),
// and so does every emulated kernel (f16 on CPU, bf16 without AVX-512 BF16): its GEMM is
// the f32 one, so the bf16 fast path that padding aims at is not involved.
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "ops/cpu/context.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// inputs {A, B}, output C.
class MatMulKernel : public Kernel {
 public:
  MatMulKernel(const KernelSpec& spec, ExecContext& ctx) {
    const auto& t = attrs_as<MatMulAttrs>(spec.attrs);
    transpose_a_ = t.transpose_a;
    transpose_b_ = t.transpose_b;
    const Shape& a = spec.inputs[0].shape;
    const Shape& c = spec.outputs[0].shape;
    M_ = c[0];
    N_ = c[1];
    K_ = t.transpose_a ? a[0] : a[1];
    CAMPO_CHECK(spec.pad_to >= 0, "MatMul '", spec.node_name, "': pad_to must be >= 0, not ",
                spec.pad_to);
    const bool pads = spec.pad_to > 0 && spec.dtype == DType::bf16;
    Kp_ = pads ? round_up(K_, spec.pad_to) : K_;
    Np_ = pads ? round_up(N_, spec.pad_to) : N_;
    elem_ = dtype_size(spec.dtype);
    // Zeroed once; see the file comment. A needs a copy only when K grows, C only when N
    // does, B when either does.
    if (Kp_ != K_)
      a_pad_ = Tensor::zeros(t.transpose_a ? Shape{Kp_, M_} : Shape{M_, Kp_}, spec.dtype);
    if (Kp_ != K_ || Np_ != N_)
      b_pad_ = Tensor::zeros(t.transpose_b ? Shape{Np_, Kp_} : Shape{Kp_, Np_}, spec.dtype);
    if (Np_ != N_) c_pad_ = Tensor::zeros({M_, Np_}, spec.dtype);
    for (const Tensor* t : {&a_pad_, &b_pad_, &c_pad_})
      if (t->defined()) ctx.count_kernel_buffer(size_t(t->numel()) * elem_);

    const memory::data_type dt = dnnl_type(spec.dtype, "oneDNN matmul");
    const memory::desc a_md({M_, Kp_}, dt, t.transpose_a ? tag::ba : tag::ab);
    const memory::desc b_md({Kp_, Np_}, dt, t.transpose_b ? tag::ba : tag::ab);
    const memory::desc c_md({M_, Np_}, dt, tag::ab);
    const dnnl::engine& eng = cpu_engine(ctx);
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::matmul::primitive_desc pd(eng, a_md, b_md, c_md, attr);
      primitive_ = dnnl::matmul(pd);
      a_ = memory(a_md, eng, DNNL_MEMORY_NONE);
      b_ = memory(b_md, eng, DNNL_MEMORY_NONE);
      c_ = memory(c_md, eng, DNNL_MEMORY_NONE);
      args_ = {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}};
      scratchpad_.reserve(pd.scratchpad_desc(), ctx, args_);
    } catch (const dnnl::error& e) {
      CAMPO_FAIL("MatMul '", spec.node_name, "': oneDNN could not build a ", dtype_name(spec.dtype),
                 " kernel for ", shape_str(a), " x ", shape_str(spec.inputs[1].shape),
                 (pads ? " (padded to K=" + std::to_string(Kp_) + ", N=" + std::to_string(Np_) + ")"
                       : std::string()),
                 ": ", e.what());
    }
    // The padded buffers never move: bind them now.
    if (a_pad_.defined()) a_.set_data_handle(a_pad_.device_data());
    if (b_pad_.defined()) b_.set_data_handle(b_pad_.device_data());
    if (c_pad_.defined()) c_.set_data_handle(c_pad_.device_data());
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    // A: [M, K] -> [M, Kp] (new columns), or stored [K, M] -> [Kp, M] (new rows).
    if (a_pad_.defined()) {
      if (transpose_a_)
        copy_rows(in[0].device_data(), M_, a_pad_.device_data(), M_, K_, M_, elem_);
      else
        copy_rows(in[0].device_data(), K_, a_pad_.device_data(), Kp_, M_, K_, elem_);
    } else {
      a_.set_data_handle(in[0].device_data());
    }
    // B: [K, N] -> [Kp, Np], or stored [N, K] -> [Np, Kp].
    if (b_pad_.defined()) {
      if (transpose_b_)
        copy_rows(in[1].device_data(), K_, b_pad_.device_data(), Kp_, N_, K_, elem_);
      else
        copy_rows(in[1].device_data(), N_, b_pad_.device_data(), Np_, K_, N_, elem_);
    } else {
      b_.set_data_handle(in[1].device_data());
    }
    if (!c_pad_.defined()) c_.set_data_handle(out[0].device_data());
    scratchpad_.bind(ctx);
    primitive_.execute(cpu_stream(ctx), args_);
    cpu_stream(ctx).wait();
    // C = C_pad[:, :N].
    if (c_pad_.defined())
      copy_rows(c_pad_.device_data(), Np_, out[0].device_data(), N_, M_, N_, elem_);
  }

 private:
  dnnl::primitive primitive_;
  memory a_, b_, c_;
  std::unordered_map<int, memory> args_;
  WorkspaceScratchpad scratchpad_;
  bool transpose_a_ = false, transpose_b_ = false;
  int64_t M_ = 0, N_ = 0, K_ = 0, Kp_ = 0, Np_ = 0;
  size_t elem_ = 0;
  Tensor a_pad_, b_pad_, c_pad_;  // undefined where that operand is used in place
};

std::unique_ptr<Kernel> make_matmul(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<MatMulKernel>(spec, ctx);
}

KernelRegistrar matmul_f32(OpKind::MatMul, Device::cpu, DType::f32, make_matmul);
// bf16 operands and result, f32 accumulation inside oneDNN; emulated without AVX-512 BF16.
KernelRegistrar matmul_bf16(OpKind::MatMul, Device::cpu, DType::bf16,
                            native_bf16_onednn<make_matmul>);
// f16 likewise where the CPU has AVX-512 FP16.
KernelRegistrar matmul_f16(OpKind::MatMul, Device::cpu, DType::f16, native_f16_onednn<make_matmul>);

}  // namespace
}  // namespace campo
