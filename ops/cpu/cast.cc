// CPU kernel of Cast between f32, f16 and bf16 through campo::convert (vectorised,
// multithreaded, round to nearest even). Registered under every source dtype, since a
// Cast node's compute dtype is its source dtype (ops/cast.cc); the conversion itself is
// driven by the actual input and output types.
#include "ops/kernel.h"

namespace campo {
namespace {

class CastKernel : public Kernel {
 public:
  CastKernel(const KernelSpec& spec, ExecContext&)
      : from_(spec.inputs[0].dtype), to_(spec.outputs[0].dtype) {
    CAMPO_CHECK(is_floating(from_) && is_floating(to_), "Cast '", spec.node_name,
                "': ", dtype_name(from_), " -> ", dtype_name(to_), " is not supported");
  }
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    convert(in[0].device_data(), from_, out[0].device_data(), to_, size_t(in[0].numel()));
  }

 private:
  DType from_, to_;
};

std::unique_ptr<Kernel> make_cast(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<CastKernel>(spec, ctx);
}

KernelRegistrar cast_f32(OpKind::Cast, Device::cpu, DType::f32, make_cast);
KernelRegistrar cast_f16(OpKind::Cast, Device::cpu, DType::f16, make_cast);
KernelRegistrar cast_bf16(OpKind::Cast, Device::cpu, DType::bf16, make_cast);

}  // namespace
}  // namespace campo
