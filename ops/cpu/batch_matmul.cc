// CPU kernel of BatchMatMulV2 (oneDNN 2.6 matmul primitive, batched): the batch dims are
// flattened into one, B = prod(dims before the last two) (1 for rank 2), and each side is
// described as a 3-D [B, rows, cols] matrix. As for MatMul (ops/cpu/matmul.cc), a transposed
// side is not copied: format tag `acb` on row-major [B, K, M] storage is the logical
// [B, M, K] read with swapped strides. The primitive and its scratchpad are built once, at
// construction; run() only binds the buffers.
// bf16: native oneDNN bf16 (f32 accumulation, one rounding) where the CPU has AVX-512 BF16,
// emulated elsewhere (native_bf16_onednn); f16 is emulated (no registration, as MatMul).
// Padding (KernelSpec::pad_to) is MatMul's alone (amp/padding.h): a request here is refused.
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "ops/cpu/context.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// inputs {x, y}, output z.
class BatchMatMulKernel : public Kernel {
 public:
  BatchMatMulKernel(const KernelSpec& spec, ExecContext& ctx) {
    const auto& t = attrs_as<BatchMatMulAttrs>(spec.attrs);
    CAMPO_CHECK(spec.pad_to == 0, "BatchMatMulV2 '", spec.node_name,
                "': padding (pad_to = ", spec.pad_to,
                ") is implemented for MatMul only; leave pad_to at 0");
    const Shape& x = spec.inputs[0].shape;
    const Shape& z = spec.outputs[0].shape;
    const size_t r = z.size();
    int64_t B = 1;
    for (size_t d = 0; d + 2 < r; ++d) B *= z[d];
    const int64_t M = z[r - 2], N = z[r - 1], K = t.adj_x ? x[r - 2] : x[r - 1];
    const memory::data_type dt = dnnl_type(spec.dtype, "oneDNN batched matmul");
    // Nothing to compute (an empty z), or z = 0 (an empty sum over K): no primitive.
    if (B * M * N == 0 || K == 0) {
      zero_bytes_ = size_t(B * M * N) * dtype_size(spec.dtype);
      return;
    }
    const memory::desc x_md({B, M, K}, dt, t.adj_x ? tag::acb : tag::abc);
    const memory::desc y_md({B, K, N}, dt, t.adj_y ? tag::acb : tag::abc);
    const memory::desc z_md({B, M, N}, dt, tag::abc);
    const dnnl::engine& eng = cpu_engine(ctx);
    try {
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      dnnl::matmul::primitive_desc pd(eng, x_md, y_md, z_md, attr);
      primitive_ = dnnl::matmul(pd);
      x_ = memory(x_md, eng, DNNL_MEMORY_NONE);
      y_ = memory(y_md, eng, DNNL_MEMORY_NONE);
      z_ = memory(z_md, eng, DNNL_MEMORY_NONE);
      args_ = {{DNNL_ARG_SRC, x_}, {DNNL_ARG_WEIGHTS, y_}, {DNNL_ARG_DST, z_}};
      scratchpad_.reserve(pd.scratchpad_desc(), ctx, args_);
    } catch (const dnnl::error& e) {
      CAMPO_FAIL("BatchMatMulV2 '", spec.node_name, "': oneDNN could not build a ",
                 dtype_name(spec.dtype), " kernel for ", shape_str(x), " x ",
                 shape_str(spec.inputs[1].shape), ": ", e.what());
    }
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (!primitive_) {
      if (zero_bytes_ > 0) std::memset(out[0].device_data(), 0, zero_bytes_);
      return;
    }
    x_.set_data_handle(in[0].device_data());
    y_.set_data_handle(in[1].device_data());
    z_.set_data_handle(out[0].device_data());
    scratchpad_.bind(ctx);
    primitive_.execute(cpu_stream(ctx), args_);
    cpu_stream(ctx).wait();
  }

 private:
  dnnl::primitive primitive_;
  memory x_, y_, z_;
  std::unordered_map<int, memory> args_;
  WorkspaceScratchpad scratchpad_;
  size_t zero_bytes_ = 0;  // without a primitive: z's bytes, all set to 0
};

std::unique_ptr<Kernel> make_batch_matmul(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<BatchMatMulKernel>(spec, ctx);
}

KernelRegistrar batch_matmul_f32(OpKind::BatchMatMulV2, Device::cpu, DType::f32, make_batch_matmul);
KernelRegistrar batch_matmul_bf16(OpKind::BatchMatMulV2, Device::cpu, DType::bf16,
                                  native_bf16_onednn<make_batch_matmul>);
KernelRegistrar batch_matmul_f16(OpKind::BatchMatMulV2, Device::cpu, DType::f16,
                                 native_f16_onednn<make_batch_matmul>);

}  // namespace
}  // namespace campo
