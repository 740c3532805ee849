// CPU kernels of AllReduceStart and AllReduceWait (ops/all_reduce.cc): the bucket is host
// memory in the arena, reduced in place by the communicator's own thread while the kernels
// after AllReduceStart run.
#include <cstring>

#include "ops/kernel.h"

namespace campo {
namespace {

class AllReduceStartKernel final : public Kernel {
 public:
  AllReduceStartKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    float* bucket = out[0].device_data<float>();
    int64_t offset = 0;
    for (const Tensor& g : in) {
      std::memcpy(bucket + offset, g.device_data<float>(), size_t(g.numel()) * sizeof(float));
      offset += g.numel();
    }
    if (ctx.communicator) ctx.start_reduction(bucket, offset, Device::cpu, nullptr);
  }
};

class AllReduceWaitKernel final : public Kernel {
 public:
  AllReduceWaitKernel(const KernelSpec& spec, ExecContext&)
      : scale_(attrs_as<AllReduceAttrs>(spec.attrs).scale) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const float* bucket = in[0].device_data<float>();
    if (ctx.communicator) ctx.finish_reduction(bucket, in[0].nbytes(), nullptr);
    int64_t offset = 0;
    for (const Tensor& g : out) {
      float* dst = g.device_data<float>();
      const float* src = bucket + offset;
      const int64_t n = g.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * scale_;
      offset += n;
    }
  }

 private:
  float scale_;
};

std::unique_ptr<Kernel> make_start(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<AllReduceStartKernel>(spec, ctx);
}
std::unique_ptr<Kernel> make_wait(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<AllReduceWaitKernel>(spec, ctx);
}

KernelRegistrar start_f32(OpKind::AllReduceStart, Device::cpu, DType::f32, make_start);
KernelRegistrar wait_f32(OpKind::AllReduceWait, Device::cpu, DType::f32, make_wait);

}  // namespace
}  // namespace campo
