// CUDA kernel of Reshape: a device-to-device byte copy on the stream (row-major order is
// unchanged), skipped when the executor placed the output on the input's buffer, as the CPU
// kernel (ops/cpu/reshape.cc). Type-agnostic (integer inputs of an f32 node too), so it is
// registered for every floating compute dtype.
#include "ops/cuda/context.h"

namespace campo {
namespace {

class ReshapeCudaKernel : public Kernel {
 public:
  ReshapeCudaKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    CAMPO_CHECK(in[0].nbytes() == out[0].nbytes(), "internal: Reshape of ", shape_str(in[0].shape()),
                " ", dtype_name(in[0].dtype()), " into ", shape_str(out[0].shape()), " ",
                dtype_name(out[0].dtype()));
    if (in[0].device_data() != out[0].device_data() && in[0].nbytes() > 0)
      CAMPO_CUDA_CHECK(cudaMemcpyAsync(out[0].device_data(), in[0].device_data(), in[0].nbytes(),
                                       cudaMemcpyDeviceToDevice, cuda_stream(ctx)));
  }
};

std::unique_ptr<Kernel> make_reshape(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ReshapeCudaKernel>(spec, ctx);
}

KernelRegistrar reshape_f32(OpKind::Reshape, Device::cuda, DType::f32, make_reshape);
KernelRegistrar reshape_f16(OpKind::Reshape, Device::cuda, DType::f16, make_reshape);
KernelRegistrar reshape_bf16(OpKind::Reshape, Device::cuda, DType::bf16, make_reshape);

}  // namespace
}  // namespace campo
