// CUDA kernel of Const: fills its output with the attribute's value. Const's output is always
// f32 (ops/leaves.cc; it is on the fp32 AMP list), so, as on the CPU (ops/cpu/reshape.cc),
// only the f32 kernel exists.
#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

__global__ void fill(float* __restrict__ y, float value, int64_t n) {
  CAMPO_CUDA_FOR(i, n) y[i] = value;
}

class ConstCudaKernel : public Kernel {
 public:
  ConstCudaKernel(const KernelSpec& spec, ExecContext& ctx)
      : value_(attrs_as<ConstAttrs>(spec.attrs).value),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {}

  void run(ExecContext& ctx, const std::vector<Tensor>&, const std::vector<Tensor>& out) override {
    const int64_t n = out[0].numel();
    if (n == 0) return;
    fill<<<cuda::grid_for(n, multiprocessors_), cuda::kThreads, 0, cuda_stream(ctx)>>>(
        out[0].device_data<float>(), value_, n);
    cuda::check_launch("Const fill");
  }

 private:
  float value_;
  int multiprocessors_;
};

std::unique_ptr<Kernel> make_const(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ConstCudaKernel>(spec, ctx);
}

KernelRegistrar const_f32(OpKind::Const, Device::cuda, DType::f32, make_const);

}  // namespace
}  // namespace campo
