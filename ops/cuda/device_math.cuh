// Device-side element types and conversions shared by the CUDA kernels (nvcc only).
// Storage types: float (f32), __half (f16), __nv_bfloat16 (bf16); every kernel computes in
// f32 (load -> float, math, one rounding on store, as the CPU kernels do), so a CUDA kernel
// and the CPU kernel differ only by the order of floating-point sums.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <memory>

#include "ops/kernel.h"
#include "runtime/dtype.h"

namespace campo::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Grid-stride loop over [0, n).
#define CAMPO_CUDA_FOR(i, n)                                                          \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < int64_t(n);     \
       i += int64_t(blockDim.x) * gridDim.x)

// The factory of kernel class template K at storage type T (constructor (spec, ctx)).
template <template <typename> class K, typename T>
std::unique_ptr<Kernel> make_kernel(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<K<T>>(spec, ctx);
}

// Static registration of K<float>, K<__half>, K<__nv_bfloat16> as op `kind`'s CUDA kernels
// of f32, f16 and bf16:
//   cuda::FloatKernelRegistrar<SoftmaxKernel> softmax_kernels(OpKind::Softmax);
template <template <typename> class K>
struct FloatKernelRegistrar {
  explicit FloatKernelRegistrar(OpKind kind) {
    register_kernel(kind, Device::cuda, DType::f32, make_kernel<K, float>);
    register_kernel(kind, Device::cuda, DType::f16, make_kernel<K, __half>);
    register_kernel(kind, Device::cuda, DType::bf16, make_kernel<K, __nv_bfloat16>);
  }
};

}  // namespace campo::cuda

// Calls `body` with `using T = <storage type of dtype>` for a floating dtype (f32, f16,
// bf16); any other dtype is an error naming `what`. Usable from host code of .cu files.
#define CAMPO_CUDA_DISPATCH_FLOAT(dtype, what, ...)                                   \
  [&] {                                                                               \
    switch (dtype) {                                                                  \
      case ::campo::DType::f32: { using T = float; return __VA_ARGS__(); }            \
      case ::campo::DType::f16: { using T = __half; return __VA_ARGS__(); }           \
      case ::campo::DType::bf16: { using T = __nv_bfloat16; return __VA_ARGS__(); }   \
      default:                                                                        \
        CAMPO_FAIL(what, " has no CUDA kernel for ", ::campo::dtype_name(dtype));     \
    }                                                                                 \
  }()
