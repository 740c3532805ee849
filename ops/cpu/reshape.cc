// CPU kernels of Reshape, a byte copy (the output is its own planned buffer; row-major
// order is unchanged; type-agnostic, so it is registered for every floating compute dtype),
// and of Const, a fill.
#include <algorithm>
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

class ConstKernel : public Kernel {
 public:
  ConstKernel(const KernelSpec& spec, ExecContext&)
      : value_(attrs_as<ConstAttrs>(spec.attrs).value) {}
  void run(ExecContext&, const std::vector<Tensor>&, const std::vector<Tensor>& out) override {
    float* y = out[0].device_data<float>();
    std::fill(y, y + out[0].numel(), value_);
  }

 private:
  float value_;
};

std::unique_ptr<Kernel> make_const(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ConstKernel>(spec, ctx);
}

KernelRegistrar const_f32(OpKind::Const, Device::cpu, DType::f32, make_const);

}  // namespace
}  // namespace campo
