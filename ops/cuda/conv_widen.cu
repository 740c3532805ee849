// The widening copy of the CUDA Conv2DBackpropFilter kernel (ops/cuda/conv.cc): cuDNN writes dw
// in the data's type, and a node with Node::f32_output wants it in f32. Exact (every f16 and
// bf16 value is an f32).
#include "ops/cuda/context.h"
#include "ops/cuda/conv_widen.h"
#include "ops/cuda/device_math.cuh"

namespace campo::cuda {
namespace {

template <typename T>
__global__ void widen_kernel(const T* src, float* dst, int64_t n) {
  CAMPO_CUDA_FOR(i, n) dst[i] = to_float(src[i]);
}

}  // namespace

void widen_to_f32(const void* src, DType src_type, float* dst, int64_t n, int multiprocessors,
                  cudaStream_t stream) {
  if (n == 0) return;
  CAMPO_CUDA_DISPATCH_FLOAT(src_type, "the widening copy of Conv2DBackpropFilter", [&] {
    widen_kernel<T>
        <<<grid_for(n, multiprocessors), kThreads, 0, stream>>>(static_cast<const T*>(src), dst, n);
    check_launch("widen_kernel");
  });
}

}  // namespace campo::cuda
