// The element-wise map kernel family shared by the CUDA element-wise, bias and dropout
// kernels: out[i] = f(in_0[i], ..., in_{K-1}[i], i) for K same-shaped inputs, loaded as f32,
// one rounding on store. When every pointer is 16-byte aligned, the body runs on 16-byte
// packs (4 f32 or 8 f16 / bf16 per load and store) with a scalar tail; otherwise (views at
// odd offsets) it runs one element at a time. The channel map below is the same with a second
// operand indexed by channel (a bias, a broadcast factor). nvcc only.
#pragma once

#include <cstdint>

#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo::cuda {

// Elements of T in one 16-byte load.
template <typename T>
inline constexpr int kPack = 16 / int(sizeof(T));

template <typename T>
struct alignas(16) Pack {
  T v[kPack<T>];
};

template <typename T, int K>
struct Inputs {
  const T* p[K > 0 ? K : 1];
};

// f is a functor with `__device__ float operator()(const float (&v)[K], int64_t i) const`.
template <typename T, int K, typename F>
__global__ void map_packed_kernel(Inputs<T, K> in, T* __restrict__ out, int64_t n, F f) {
  constexpr int V = kPack<T>;
  const int64_t packs = n / V;
  CAMPO_CUDA_FOR(p, packs) {
    Pack<T> a[K];
#pragma unroll
    for (int k = 0; k < K; ++k) a[k] = reinterpret_cast<const Pack<T>*>(in.p[k])[p];
    Pack<T> r;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = to_float(a[k].v[j]);
      r.v[j] = from_float<T>(f(v, p * V + j));
    }
    reinterpret_cast<Pack<T>*>(out)[p] = r;
  }
  // The tail (fewer than V elements), on the first threads of the grid.
  const int64_t i = packs * V + int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = to_float(in.p[k][i]);
    out[i] = from_float<T>(f(v, i));
  }
}

template <typename T, int K, typename F>
__global__ void map_scalar_kernel(Inputs<T, K> in, T* __restrict__ out, int64_t n, F f) {
  CAMPO_CUDA_FOR(i, n) {
    float v[K];
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = to_float(in.p[k][i]);
    out[i] = from_float<T>(f(v, i));
  }
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Launches the map on `stream`; `what` names the op in a launch error.
template <typename T, int K, typename F>
void launch_map(const char* what, cudaStream_t stream, int multiprocessors, Inputs<T, K> in, T* out,
                int64_t n, F f) {
  if (n == 0) return;
  bool packed = aligned16(out);
  for (int k = 0; k < K; ++k) packed = packed && aligned16(in.p[k]);
  if (packed) {
    const int64_t packs = n / kPack<T>;
    // At least one block, so the tail (< kPack elements) is covered when packs == 0.
    map_packed_kernel<T, K, F>
        <<<grid_for(packs, multiprocessors), kThreads, 0, stream>>>(in, out, n, f);
  } else {
    map_scalar_kernel<T, K, F>
        <<<grid_for(n, multiprocessors), kThreads, 0, stream>>>(in, out, n, f);
  }
  check_launch(what);
}

// ---- a per-channel operand ----

// out[i] = f(x[i], b[(i / inner) % channels]): x seen as [outer, channels, inner] with b of
// [channels] (BiasAdd), or as [channels, inner] (Mul's b broadcast along x's trailing dims).
// f is a functor with `__device__ float operator()(float x, float b) const`. In the packed
// kernel the channel of each element follows from its predecessor's: one 64-bit division per
// pack instead of two per element (which would make the kernel compute bound).
template <typename T, typename F>
__global__ void channel_map_packed_kernel(const T* __restrict__ x, const T* __restrict__ b,
                                          T* __restrict__ out, int64_t n, int64_t inner,
                                          int64_t channels, F f) {
  constexpr int V = kPack<T>;
  const int64_t packs = n / V;
  CAMPO_CUDA_FOR(p, packs) {
    const int64_t first = p * V, row = first / inner;
    int64_t col = first - row * inner, c = row % channels;
    float bc = to_float(b[c]);
    const Pack<T> a = reinterpret_cast<const Pack<T>*>(x)[p];
    Pack<T> r;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      r.v[j] = from_float<T>(f(to_float(a.v[j]), bc));
      if (++col == inner) {  // the next element starts the next channel's run
        col = 0;
        if (++c == channels) c = 0;
        bc = to_float(b[c]);
      }
    }
    reinterpret_cast<Pack<T>*>(out)[p] = r;
  }
  const int64_t i = packs * V + int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_float<T>(f(to_float(x[i]), to_float(b[(i / inner) % channels])));
}

template <typename T, typename F>
__global__ void channel_map_scalar_kernel(const T* __restrict__ x, const T* __restrict__ b,
                                          T* __restrict__ out, int64_t n, int64_t inner,
                                          int64_t channels, F f) {
  CAMPO_CUDA_FOR(i, n) {
    out[i] = from_float<T>(f(to_float(x[i]), to_float(b[(i / inner) % channels])));
  }
}

// Launches the per-channel map on `stream` (inner >= 1, channels >= 1); `what` names the op
// in a launch error.
template <typename T, typename F>
void launch_channel_map(const char* what, cudaStream_t stream, int multiprocessors, const T* x,
                        const T* b, T* out, int64_t n, int64_t inner, int64_t channels, F f) {
  if (n == 0) return;
  if (aligned16(x) && aligned16(out)) {
    channel_map_packed_kernel<T, F>
        <<<grid_for(n / kPack<T>, multiprocessors), kThreads, 0, stream>>>(x, b, out, n, inner,
                                                                           channels, f);
  } else {
    channel_map_scalar_kernel<T, F>
        <<<grid_for(n, multiprocessors), kThreads, 0, stream>>>(x, b, out, n, inner, channels, f);
  }
  check_launch(what);
}

}  // namespace campo::cuda
