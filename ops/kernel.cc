#include "ops/kernel.h"

#include <chrono>
#include <map>
#include <tuple>

#include "ops/cpu/low_precision.h"
#include "runtime/communicator.h"

namespace campo {

ExecContext::ExecContext() : ExecContext(make_backend({Device::cpu, 0})) {}

ExecContext::ExecContext(std::shared_ptr<Backend> backend) : backend_(std::move(backend)) {
  CAMPO_CHECK(backend_ != nullptr, "internal: ExecContext without a backend");
  native_bf16 = backend_->allows_native_low_precision();
  native_f16 = backend_->allows_native_f16();
}
ExecContext::~ExecContext() = default;

void ExecContext::start_reduction(float* bucket, int64_t count, Device device, void* stream) {
  CAMPO_CHECK(!reductions_in_flight_.count(bucket),
              "internal: a gradient bucket started twice before its wait");
  reductions_in_flight_[bucket] = communicator->start_all_reduce(bucket, count, device, stream);
}

void ExecContext::finish_reduction(const float* bucket, int64_t bytes, void* stream) {
  auto it = reductions_in_flight_.find(bucket);
  CAMPO_CHECK(it != reductions_in_flight_.end(),
              "internal: a gradient bucket waited for but never started");
  const auto start = std::chrono::steady_clock::now();
  communicator->finish(it->second, stream);
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
  reductions_in_flight_.erase(it);
  // On a device stream the host only queued the wait: nothing of it is the host's.
  communicator->count_bucket(bytes, stream ? 0.0 : waited.count());
}

size_t ExecContext::reserve_workspace(size_t bytes) {
  const size_t offset = (workspace_floor_ + 63) / 64 * 64;
  bytes += offset;
  if (bytes <= workspace_bytes_) return offset;
  // The new buffer is taken before the old one is released, so it always has another
  // address: kernels that bound the old one see the move (EmulatedKernel::bind), even where
  // the allocator would have handed the freed block back grown in place.
  std::shared_ptr<void> larger = backend_->allocate(bytes);
  workspace_ = std::move(larger);
  workspace_bytes_ = bytes;
  return offset;
}

namespace {
using Key = std::tuple<OpKind, Device, DType>;
std::map<Key, KernelFactory>& registry() {
  static std::map<Key, KernelFactory> r;
  return r;
}
std::map<Device, KernelFactory>& quantized_registry() {
  static std::map<Device, KernelFactory> r;
  return r;
}

// The registered factory, else for f16 / bf16 on the CPU the emulation of the f32 kernel;
// nullptr when neither exists. Resolved at lookup rather than registered at start-up, so
// it holds whatever order the kernels' translation units initialise in.
KernelFactory find_factory(OpKind kind, Device device, DType dtype, bool emulates_low) {
  auto it = registry().find({kind, device, dtype});
  if (it != registry().end()) return it->second;
  if (emulates_low && is_low_precision(dtype) &&
      registry().count({kind, device, DType::f32}) != 0)
    return make_emulated_kernel;
  return nullptr;
}
}  // namespace

void register_kernel(OpKind kind, Device device, DType dtype, KernelFactory factory) {
  // Two registrations of one key would leave whichever static initializer ran last.
  const bool added = registry().emplace(std::tuple{kind, device, dtype}, factory).second;
  CAMPO_CHECK(added, "internal: two ", device_name(device), " kernels registered for ",
              op_name(kind), " ", dtype_name(dtype));
}

void register_quantized_gemm_kernel(Device device, KernelFactory factory) {
  const bool added = quantized_registry().emplace(device, factory).second;
  CAMPO_CHECK(added, "internal: two quantized GEMM kernels registered for ", device_name(device));
}

bool has_quantized_gemm_kernel(Device device) { return quantized_registry().count(device) != 0; }

bool is_quantizable_gemm(OpKind kind) {
  return kind == OpKind::MatMul || kind == OpKind::BatchMatMulV2 || kind == OpKind::Conv2D ||
         kind == OpKind::Conv2DBackpropInput || kind == OpKind::Conv2DBackpropFilter;
}

bool has_kernel(OpKind kind, Device device, DType dtype, bool emulates_low_precision) {
  return find_factory(kind, device, dtype, emulates_low_precision) != nullptr;
}

bool has_kernel(OpKind kind, const Backend& backend, DType dtype) {
  return has_kernel(kind, backend.kernel_device(), dtype, backend.emulates_low_precision());
}

std::unique_ptr<Kernel> create_kernel(const KernelSpec& spec, ExecContext& ctx) {
  const Device device = ctx.backend().kernel_device();
  if (spec.quant.enabled) {
    CAMPO_CHECK(is_quantizable_gemm(spec.kind), "internal: ", spec.quant.format, " operands on op ",
                op_name(spec.kind), " (node '", spec.node_name, "')");
    const auto it = quantized_registry().find(device);
    CAMPO_CHECK(it != quantized_registry().end(), "node '", spec.node_name, "' (",
                op_name(spec.kind), ") is a ", spec.quant.format,
                " GEMM: this build has no quantized GEMM kernel for ", device_name(device),
                " (FP8 and MX emulation runs on the CPU only in a build without CUDA)");
    return it->second(spec, ctx);
  }
  const KernelFactory factory =
      find_factory(spec.kind, device, spec.dtype, ctx.backend().emulates_low_precision());
  CAMPO_CHECK(factory != nullptr, "no kernel for op ", op_name(spec.kind), " on device ",
              device_name(device), " with dtype ", dtype_name(spec.dtype),
              spec.node_name.empty() ? "" : " (node '", spec.node_name,
              spec.node_name.empty() ? "" : "')");
  return factory(spec, ctx);
}

std::vector<Tensor> run_op_eager(OpKind kind, const Attrs& attrs, DType dtype,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<TensorDesc>& output_descs, ExecContext& ctx) {
  KernelSpec spec{kind, attrs, dtype, {}, output_descs, op_name(kind)};
  for (const Tensor& t : inputs) spec.inputs.push_back({t.shape(), t.dtype()});
  auto kernel = create_kernel(spec, ctx);
  std::vector<Tensor> outputs;
  for (const TensorDesc& d : output_descs) outputs.push_back(ctx.backend().zeros(d.shape, d.dtype));
  run_kernel(*kernel, ctx, inputs, outputs);
  return outputs;
}

}  // namespace campo
