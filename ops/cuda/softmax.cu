// CUDA kernels of Softmax / SoftmaxGrad over the last axis, data viewed as [R, S] (S = the
// last axis, R = the product of the others), f32 / f16 / bf16 storage, f32 math and f32
// sums. The CPU kernels (ops/cpu/softmax.cc) are the specification. One warp per row for
// S <= kWarpRowMax (attention scores, class logits), else one block per row; the row's sums
// are fixed trees (ops/cuda/block_reduce.cuh), so results are reproducible.
//  Softmax:     m = max(x), s = sum(exp(x - m)), y = exp(x - m) * (1 / s)
//  SoftmaxGrad: inputs {dY, Y}: s = sum(dY * Y), dX = (dY - s) * Y
#include <cmath>
#include <type_traits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

using cuda::from_float;
using cuda::to_float;

template <int kGroup, typename T>
__global__ void softmax_kernel(const T* x, int64_t rows, int64_t S, T* y) {
  constexpr int kPerBlock = cuda::kThreads / kGroup;
  __shared__ float scratch[cuda::kThreads / 32];
  const int64_t r = int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kGroup;
  const int lane = threadIdx.x % kGroup;
  if (r >= rows) return;  // whole warps only (a block's grid is exact)
  const T* xr = x + r * S;
  T* yr = y + r * S;
  float m = -INFINITY;
  for (int64_t i = lane; i < S; i += kGroup) m = fmaxf(m, to_float(xr[i]));
  m = cuda::group_max<kGroup>(m, scratch);
  float s = 0.0f;
  for (int64_t i = lane; i < S; i += kGroup) s += expf(to_float(xr[i]) - m);
  s = cuda::group_sum<kGroup>(s, scratch);
  const float inv = 1.0f / s;
  for (int64_t i = lane; i < S; i += kGroup)
    yr[i] = from_float<T>(__fmul_rn(expf(to_float(xr[i]) - m), inv));
}

template <int kGroup, typename T>
__global__ void softmax_grad_kernel(const T* dy, const T* y, int64_t rows, int64_t S, T* dx) {
  constexpr int kPerBlock = cuda::kThreads / kGroup;
  __shared__ float scratch[cuda::kThreads / 32];
  const int64_t r = int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kGroup;
  const int lane = threadIdx.x % kGroup;
  if (r >= rows) return;
  const T* dyr = dy + r * S;
  const T* yr = y + r * S;
  T* dxr = dx + r * S;
  float s = 0.0f;
  for (int64_t i = lane; i < S; i += kGroup) s += __fmul_rn(to_float(dyr[i]), to_float(yr[i]));
  s = cuda::group_sum<kGroup>(s, scratch);
  for (int64_t i = lane; i < S; i += kGroup)
    dxr[i] = from_float<T>(__fmul_rn(to_float(dyr[i]) - s, to_float(yr[i])));
}

template <typename T>
class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(const KernelSpec& spec, ExecContext&)
      : dims_(cuda::rows_of(spec.inputs[0].shape)) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].device_data());
    T* y = static_cast<T*>(out[0].device_data());
    cudaStream_t stream = cuda_stream(ctx);
    cuda::launch_rows(dims_, "Softmax", [&](auto group, unsigned blocks) {
      softmax_kernel<decltype(group)::value, T>
          <<<blocks, cuda::kThreads, 0, stream>>>(x, dims_.rows, dims_.cols, y);
    });
  }

 private:
  cuda::Rows dims_;
};

template <typename T>
class SoftmaxGradKernel final : public Kernel {
 public:
  SoftmaxGradKernel(const KernelSpec& spec, ExecContext&)
      : dims_(cuda::rows_of(spec.inputs[1].shape)) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].device_data());
    const T* y = static_cast<const T*>(in[1].device_data());
    T* dx = static_cast<T*>(out[0].device_data());
    cudaStream_t stream = cuda_stream(ctx);
    cuda::launch_rows(dims_, "SoftmaxGrad", [&](auto group, unsigned blocks) {
      softmax_grad_kernel<decltype(group)::value, T>
          <<<blocks, cuda::kThreads, 0, stream>>>(dy, y, dims_.rows, dims_.cols, dx);
    });
  }

 private:
  cuda::Rows dims_;
};

cuda::FloatKernelRegistrar<SoftmaxKernel> softmax_kernels(OpKind::Softmax);
cuda::FloatKernelRegistrar<SoftmaxGradKernel> softmax_grad_kernels(OpKind::SoftmaxGrad);

}  // namespace
}  // namespace campo
