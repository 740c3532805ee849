// CPU kernel of MatMul (oneDNN 2.6 matmul primitive): C [M, N] = op(A) op(B).
// A transposed operand is not copied: it is described to oneDNN as the logical matrix with
// swapped strides (format tag `ba` on row-major [K, M] storage is [M, K] read by columns).
// The primitive and its scratchpad are built once, at construction.
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::f32:
      return memory::data_type::f32;
    case DType::bf16:
      return memory::data_type::bf16;
    case DType::f16:
      return memory::data_type::f16;
    default:
      CAMPO_FAIL("oneDNN matmul has no ", dtype_name(t), " variant");
  }
}

// inputs {A, B}, output C.
class MatMulKernel : public Kernel {
 public:
  MatMulKernel(const KernelSpec& spec, CpuContext& ctx) {
    const auto& t = attrs_as<MatMulAttrs>(spec.attrs);
    const Shape& a = spec.inputs[0].shape;
    const Shape& c = spec.outputs[0].shape;
    const int64_t M = c[0], N = c[1], K = t.transpose_a ? a[0] : a[1];
    const memory::data_type dt = dnnl_type(spec.dtype);
    const memory::desc a_md({M, K}, dt, t.transpose_a ? tag::ba : tag::ab);
    const memory::desc b_md({K, N}, dt, t.transpose_b ? tag::ba : tag::ab);
    const memory::desc c_md({M, N}, dt, tag::ab);
    const dnnl::engine& eng = ctx.engine();
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
      primitive_ = dnnl::matmul(pd);
      a_ = memory(a_md, eng, DNNL_MEMORY_NONE);
      b_ = memory(b_md, eng, DNNL_MEMORY_NONE);
      c_ = memory(c_md, eng, DNNL_MEMORY_NONE);
      args_ = {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}};
      if (pd.scratchpad_desc().get_size() > 0)
        args_[DNNL_ARG_SCRATCHPAD] = memory(pd.scratchpad_desc(), eng);
    } catch (const dnnl::error& e) {
      CAMPO_FAIL("MatMul '", spec.node_name, "': oneDNN could not build a ", dtype_name(spec.dtype),
                 " kernel for ", shape_str(a), " x ", shape_str(spec.inputs[1].shape), ": ",
                 e.what());
    }
  }

  void run(CpuContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    a_.set_data_handle(in[0].data());
    b_.set_data_handle(in[1].data());
    c_.set_data_handle(out[0].data());
    primitive_.execute(ctx.stream(), args_);
    ctx.stream().wait();
  }

 private:
  dnnl::primitive primitive_;
  memory a_, b_, c_;
  std::unordered_map<int, memory> args_;
};

std::unique_ptr<Kernel> make_matmul(const KernelSpec& spec, CpuContext& ctx) {
  return std::make_unique<MatMulKernel>(spec, ctx);
}

KernelRegistrar matmul_f32(OpKind::MatMul, Device::cpu, DType::f32, make_matmul);
// bf16 operands and result, f32 accumulation inside oneDNN; emulated without AVX-512 BF16.
KernelRegistrar matmul_bf16(OpKind::MatMul, Device::cpu, DType::bf16,
                            native_bf16_onednn<make_matmul>);

}  // namespace
}  // namespace campo
