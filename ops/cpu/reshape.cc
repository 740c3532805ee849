// CPU kernel of Reshape: a byte copy (the output is its own planned buffer; row-major order
// is unchanged). Type-agnostic, so it is registered for every floating compute dtype.
#include <cstring>

#include "ops/kernel.h"

namespace campo {
namespace {

class ReshapeKernel : public Kernel {
 public:
  ReshapeKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    CAMPO_CHECK(in[0].nbytes() == out[0].nbytes(), "internal: Reshape of ",
                shape_str(in[0].shape()), " ", dtype_name(in[0].dtype()), " into ",
                shape_str(out[0].shape()), " ", dtype_name(out[0].dtype()));
    if (in[0].device_data() != out[0].device_data() && in[0].nbytes() > 0)
      std::memcpy(out[0].device_data(), in[0].device_data(), in[0].nbytes());
  }
};

std::unique_ptr<Kernel> make_reshape(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ReshapeKernel>(spec, ctx);
}

KernelRegistrar reshape_f32(OpKind::Reshape, Device::cpu, DType::f32, make_reshape);
KernelRegistrar reshape_f16(OpKind::Reshape, Device::cpu, DType::f16, make_reshape);
KernelRegistrar reshape_bf16(OpKind::Reshape, Device::cpu, DType::bf16, make_reshape);

}  // namespace
}  // namespace campo
