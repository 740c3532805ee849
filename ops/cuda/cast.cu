// CUDA kernel of Cast between f32, f16 and bf16 (ops/cpu/cast.cc and runtime/dtype.cc are the
// specification: round to nearest even, subnormals kept, NaN kept quiet with its sign and
// top payload bits). Registered under every source dtype, since a Cast node's compute dtype
// is its source dtype (ops/cast.cc); the conversion is driven by the input and output types.
//
// Each thread converts a chunk of 16 / min(sizeof(From), sizeof(To)) elements (8 for every
// pair here) with 16-byte loads and stores: f32 -> f16 reads two 16-byte words and writes
// one. A scalar tail covers the rest, and views that are not 16-byte aligned run one
// element per thread. The same dtype on both sides is a device-to-device copy.
#include <type_traits>

#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

// Conversions with the CPU's bits, NaN included (the hardware conversions return a
// canonical NaN instead of keeping the payload). The primary template, the same type on
// both sides, is only instantiated, never run (Cast to the same type is a copy).
template <typename From, typename To>
__device__ __forceinline__ To cast_value(From x) {
  static_assert(std::is_same_v<From, To>);
  return x;
}

template <>
__device__ __forceinline__ __half cast_value<float, __half>(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return __ushort_as_half(uint16_t(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x7fffffu) >> 13)));
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ float cast_value<__half, float>(__half x) {
  const uint16_t h = __half_as_ushort(x);
  if ((h & 0x7fffu) > 0x7c00u)
    return __uint_as_float((uint32_t(h & 0x8000u) << 16) | 0x7f800000u |
                           (uint32_t(h & 0x3ffu) << 13));
  return __half2float(x);
}
// bf16 is integer arithmetic: round to nearest even on the bits (runtime/dtype.cc).
template <>
__device__ __forceinline__ __nv_bfloat16 cast_value<float, __nv_bfloat16>(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint32_t bits =
      (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return __ushort_as_bfloat16(uint16_t(bits));
}
template <>
__device__ __forceinline__ float cast_value<__nv_bfloat16, float>(__nv_bfloat16 x) {
  return __uint_as_float(uint32_t(__bfloat16_as_ushort(x)) << 16);
}
// f16 <-> bf16 through f32 (exact widening, one rounding), as the CPU.
template <>
__device__ __forceinline__ __nv_bfloat16 cast_value<__half, __nv_bfloat16>(__half x) {
  return cast_value<float, __nv_bfloat16>(cast_value<__half, float>(x));
}
template <>
__device__ __forceinline__ __half cast_value<__nv_bfloat16, __half>(__nv_bfloat16 x) {
  return cast_value<float, __half>(cast_value<__nv_bfloat16, float>(x));
}

template <typename From, typename To>
inline constexpr int kChunk = 16 / int(sizeof(From) < sizeof(To) ? sizeof(From) : sizeof(To));

template <typename T, int N>
struct alignas(16) Chunk {
  T v[N];
};

template <typename From, typename To>
__global__ void cast_chunked_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  constexpr int E = kChunk<From, To>;
  const int64_t chunks = n / E;
  CAMPO_CUDA_FOR(c, chunks) {
    const Chunk<From, E> a = reinterpret_cast<const Chunk<From, E>*>(x)[c];
    Chunk<To, E> r;
#pragma unroll
    for (int j = 0; j < E; ++j) r.v[j] = cast_value<From, To>(a.v[j]);
    reinterpret_cast<Chunk<To, E>*>(y)[c] = r;
  }
  const int64_t i = chunks * E + int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = cast_value<From, To>(x[i]);
}

template <typename From, typename To>
__global__ void cast_scalar_kernel(const From* __restrict__ x, To* __restrict__ y, int64_t n) {
  CAMPO_CUDA_FOR(i, n) y[i] = cast_value<From, To>(x[i]);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename From, typename To>
void launch_cast(const void* x, void* y, int64_t n, cudaStream_t stream, int sms) {
  const auto* xs = static_cast<const From*>(x);
  auto* ys = static_cast<To*>(y);
  if (aligned16(x) && aligned16(y)) {
    // The 8 blocks per multiprocessor of the element-wise kernels, with the grid-stride loop.
    cast_chunked_kernel<From, To>
        <<<cuda::grid_for(n / kChunk<From, To>, sms), cuda::kThreads, 0, stream>>>(xs, ys, n);
  } else {
    cast_scalar_kernel<From, To><<<cuda::grid_for(n, sms), cuda::kThreads, 0, stream>>>(xs, ys, n);
  }
  cuda::check_launch("Cast");
}

template <typename From>
void launch_from(DType to, const void* x, void* y, int64_t n, cudaStream_t stream, int sms) {
  switch (to) {
    case DType::f32:
      return launch_cast<From, float>(x, y, n, stream, sms);
    case DType::f16:
      return launch_cast<From, __half>(x, y, n, stream, sms);
    case DType::bf16:
      return launch_cast<From, __nv_bfloat16>(x, y, n, stream, sms);
    default:
      CAMPO_FAIL("internal: Cast to ", dtype_name(to));
  }
}

class CastKernel : public Kernel {
 public:
  explicit CastKernel(const KernelSpec& spec)
      : from_(spec.inputs[0].dtype), to_(spec.outputs[0].dtype) {
    CAMPO_CHECK(is_floating(from_) && is_floating(to_), "Cast '", spec.node_name,
                "': ", dtype_name(from_), " -> ", dtype_name(to_),
                " has no CUDA kernel (only f32, f16 and bf16)");
    CAMPO_CHECK(spec.inputs[0].layout == spec.outputs[0].layout, "Cast '", spec.node_name,
                "': ", layout_name(spec.inputs[0].layout), " in, ",
                layout_name(spec.outputs[0].layout), " out");
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const int64_t n = in[0].numel();
    if (n == 0) return;
    cudaStream_t stream = cuda_stream(ctx);
    const void* x = in[0].device_data();
    void* y = out[0].device_data();
    if (from_ == to_) {
      CAMPO_CUDA_CHECK(
          cudaMemcpyAsync(y, x, size_t(n) * dtype_size(from_), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    const int sms = cuda_backend(ctx).multiprocessors();
    switch (from_) {
      case DType::f32:
        return launch_from<float>(to_, x, y, n, stream, sms);
      case DType::f16:
        return launch_from<__half>(to_, x, y, n, stream, sms);
      case DType::bf16:
        return launch_from<__nv_bfloat16>(to_, x, y, n, stream, sms);
      default:
        CAMPO_FAIL("internal: Cast from ", dtype_name(from_));
    }
  }

 private:
  DType from_, to_;
};

std::unique_ptr<Kernel> make_cast(const KernelSpec& spec, ExecContext&) {
  return std::make_unique<CastKernel>(spec);
}

KernelRegistrar cast_f32(OpKind::Cast, Device::cuda, DType::f32, make_cast);
KernelRegistrar cast_f16(OpKind::Cast, Device::cuda, DType::f16, make_cast);
KernelRegistrar cast_bf16(OpKind::Cast, Device::cuda, DType::bf16, make_cast);

}  // namespace
}  // namespace campo
