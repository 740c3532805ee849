// CUDA kernels of AllReduceStart and AllReduceWait (ops/all_reduce.cc): the bucket is device
// memory in the arena; the gradients are packed into it by device-to-device copies on the
// compute stream, NCCL sums it on its own stream after them (runtime/communicator.h), and
// the compute stream waits for that sum only at AllReduceWait, whose unpacking scales by
// `scale`. The host never waits.
#include <cstdint>

#include "ops/cuda/context.h"

namespace campo {
namespace {

__global__ void scale_copy(float* __restrict__ dst, const float* __restrict__ src, int64_t n,
                           float scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __fmul_rn(src[i], scale);
}

class AllReduceStartKernel final : public Kernel {
 public:
  AllReduceStartKernel(const KernelSpec&, ExecContext& ctx)
      : reduces_(ctx.communicator != nullptr) {}
  std::string capture_blocker() const override {
    return reduces_ ? "a data-parallel step (its gradient reductions are started and finished by "
                      "the host at every step)"
                    : "";
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    cudaStream_t stream = cuda_stream(ctx);
    float* bucket = out[0].device_data<float>();
    int64_t offset = 0;
    for (const Tensor& g : in) {
      CAMPO_CUDA_CHECK(cudaMemcpyAsync(bucket + offset, g.device_data<float>(),
                                       size_t(g.numel()) * sizeof(float), cudaMemcpyDeviceToDevice,
                                       stream));
      offset += g.numel();
    }
    if (ctx.communicator) ctx.start_reduction(bucket, offset, Device::cuda, stream);
  }

 private:
  bool reduces_;
};

class AllReduceWaitKernel final : public Kernel {
 public:
  AllReduceWaitKernel(const KernelSpec& spec, ExecContext& ctx)
      : scale_(attrs_as<AllReduceAttrs>(spec.attrs).scale), reduces_(ctx.communicator != nullptr) {}
  std::string capture_blocker() const override {
    return reduces_ ? "a data-parallel step (its gradient reductions are started and finished by "
                      "the host at every step)"
                    : "";
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    cudaStream_t stream = cuda_stream(ctx);
    const float* bucket = in[0].device_data<float>();
    if (ctx.communicator) ctx.finish_reduction(bucket, in[0].nbytes(), stream);
    const int sms = cuda_backend(ctx).multiprocessors();
    int64_t offset = 0;
    for (const Tensor& g : out) {
      const int64_t n = g.numel();
      scale_copy<<<cuda::grid_for(n, sms), cuda::kThreads, 0, stream>>>(g.device_data<float>(),
                                                                        bucket + offset, n, scale_);
      cuda::check_launch("AllReduceWait");
      offset += n;
    }
  }

 private:
  float scale_;
  bool reduces_;
};

std::unique_ptr<Kernel> make_start(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<AllReduceStartKernel>(spec, ctx);
}
std::unique_ptr<Kernel> make_wait(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<AllReduceWaitKernel>(spec, ctx);
}

KernelRegistrar start_f32(OpKind::AllReduceStart, Device::cuda, DType::f32, make_start);
KernelRegistrar wait_f32(OpKind::AllReduceWait, Device::cuda, DType::f32, make_wait);

}  // namespace
}  // namespace campo
