#include "ops/kernel.h"

#include <array>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

namespace campo {

struct CpuContext::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

CpuContext::CpuContext() : impl_(std::make_unique<Impl>()) {}
CpuContext::~CpuContext() = default;
dnnl::engine& CpuContext::engine() { return impl_->engine; }
dnnl::stream& CpuContext::stream() { return impl_->stream; }

namespace {
using Key = std::tuple<OpKind, Device, DType>;
std::map<Key, KernelFactory>& registry() {
  static std::map<Key, KernelFactory> r;
  return r;
}
}  // namespace

void register_kernel(OpKind kind, Device device, DType dtype, KernelFactory factory) {
  registry()[{kind, device, dtype}] = factory;
}

bool has_kernel(OpKind kind, Device device, DType dtype) {
  return registry().count({kind, device, dtype}) != 0;
}

std::unique_ptr<Kernel> create_kernel(const KernelSpec& spec, Device device, CpuContext& ctx) {
  auto it = registry().find({spec.kind, device, spec.dtype});
  CAMPO_CHECK(it != registry().end(), "no kernel for op ", op_name(spec.kind), " on device ",
              device_name(device), " with dtype ", dtype_name(spec.dtype),
              spec.node_name.empty() ? "" : " (node '", spec.node_name,
              spec.node_name.empty() ? "" : "')");
  return it->second(spec, ctx);
}

std::vector<Tensor> run_op_eager(OpKind kind, const Attrs& attrs, DType dtype,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<TensorDesc>& output_descs, CpuContext& ctx) {
  KernelSpec spec{kind, attrs, dtype, {}, output_descs, op_name(kind)};
  for (const Tensor& t : inputs) spec.inputs.push_back({t.shape(), t.dtype()});
  auto kernel = create_kernel(spec, Device::cpu, ctx);
  std::vector<Tensor> outputs;
  for (const TensorDesc& d : output_descs) outputs.push_back(Tensor::zeros(d.shape, d.dtype));
  kernel->run(ctx, inputs, outputs);
  return outputs;
}

}  // namespace campo
