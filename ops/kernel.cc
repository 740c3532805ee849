#include "ops/kernel.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "ops/cpu/low_precision.h"

namespace campo {

struct CpuContext::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  ~Impl() { free_host(workspace); }
};

CpuContext::CpuContext() : impl_(std::make_unique<Impl>()) {
  const char* mode = std::getenv("CAMPO_CPU_BF16");
  if (mode != nullptr && *mode != '\0') {
    CAMPO_CHECK(std::strcmp(mode, "native") == 0 || std::strcmp(mode, "emulate") == 0,
                "CAMPO_CPU_BF16 must be 'native' or 'emulate', got '", mode, "'");
    native_bf16 = std::strcmp(mode, "native") == 0;
  }
}
CpuContext::~CpuContext() = default;
dnnl::engine& CpuContext::engine() { return impl_->engine; }
dnnl::stream& CpuContext::stream() { return impl_->stream; }

void CpuContext::reserve_emulation_workspace(size_t bytes) {
  if (bytes <= impl_->workspace_bytes) return;
  free_host(impl_->workspace);
  impl_->workspace = nullptr;
  impl_->workspace = alloc_host(bytes);
  impl_->workspace_bytes = bytes;
}
void* CpuContext::emulation_workspace() { return impl_->workspace; }

namespace {
using Key = std::tuple<OpKind, Device, DType>;
std::map<Key, KernelFactory>& registry() {
  static std::map<Key, KernelFactory> r;
  return r;
}

// The registered factory, else for f16 / bf16 on the CPU the emulation of the f32 kernel;
// nullptr when neither exists. Resolved at lookup rather than registered at start-up, so
// it holds whatever order the kernels' translation units initialise in.
KernelFactory find_factory(OpKind kind, Device device, DType dtype) {
  auto it = registry().find({kind, device, dtype});
  if (it != registry().end()) return it->second;
  if (device == Device::cpu && is_low_precision(dtype) &&
      registry().count({kind, device, DType::f32}) != 0)
    return make_emulated_kernel;
  return nullptr;
}
}  // namespace

void register_kernel(OpKind kind, Device device, DType dtype, KernelFactory factory) {
  registry()[{kind, device, dtype}] = factory;
}

bool has_kernel(OpKind kind, Device device, DType dtype) {
  return find_factory(kind, device, dtype) != nullptr;
}

std::unique_ptr<Kernel> create_kernel(const KernelSpec& spec, Device device, CpuContext& ctx) {
  const KernelFactory factory = find_factory(spec.kind, device, spec.dtype);
  CAMPO_CHECK(factory != nullptr, "no kernel for op ", op_name(spec.kind), " on device ",
              device_name(device), " with dtype ", dtype_name(spec.dtype),
              spec.node_name.empty() ? "" : " (node '", spec.node_name,
              spec.node_name.empty() ? "" : "')");
  return factory(spec, ctx);
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
