// Warp and block reductions shared by the row-wise CUDA kernels (reductions, losses, softmax,
// layer norm), and the upload of a kernel's constant host tables at construction (nvcc only).
//
// Determinism: every sum here is a fixed tree over a fixed assignment of elements to
// threads (decided by the shape and the compile-time block size, never by the device's
// multiprocessor count or by timing), and no float atomics are used, so a kernel gives the
// same bits on every run. The butterfly (xor) shuffles leave the same value in every lane:
// lanes i and i ^ k add the same two values, and a + b == b + a in IEEE arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <type_traits>
#include <vector>

#include "ops/cuda/context.h"

namespace campo::cuda {

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int k = 16; k > 0; k >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, k));
  return v;
}

// The sum of `v` over a block of kBlock threads (a multiple of 32), returned to every
// thread. `scratch` holds kBlock / 32 values; the block must reach this call together.
template <int kBlock, typename A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024);
  constexpr int kWarps = kBlock / 32;
  v = warp_sum(v);
  if constexpr (kWarps == 1) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : A(0);
  return warp_sum(v);
}

template <int kBlock>
__device__ __forceinline__ float block_max(float v, float* scratch) {
  constexpr int kWarps = kBlock / 32;
  v = warp_max(v);
  if constexpr (kWarps == 1) return v;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// The sum / maximum over the kGroup threads that share a row: a warp (kGroup 32) or the
// whole block.
template <int kGroup, typename A>
__device__ __forceinline__ A group_sum(A v, A* scratch) {
  if constexpr (kGroup == 32)
    return warp_sum(v);
  else
    return block_sum<kGroup>(v, scratch);
}
template <int kGroup>
__device__ __forceinline__ float group_max(float v, float* scratch) {
  if constexpr (kGroup == 32)
    return warp_max(v);
  else
    return block_max<kGroup>(v, scratch);
}

// Row-wise kernels (softmax, layer norm) over the last dim of a tensor: one warp per row up
// to kWarpRowMax columns, else one block.
inline constexpr int64_t kWarpRowMax = 1024;
struct Rows {
  int64_t rows = 0, cols = 0;
};
inline Rows rows_of(const Shape& shape) {
  Rows r;
  r.cols = shape.back();
  r.rows = r.cols == 0 ? 0 : shape_numel(shape) / r.cols;
  return r;
}
// Calls launch(std::integral_constant<int, kGroup>, blocks) with kGroup 32 (warp rows) or
// kThreads (block rows), then checks the launch.
template <typename Launch>
void launch_rows(const Rows& d, const char* what, Launch launch) {
  if (d.rows == 0) return;
  CAMPO_CHECK(d.rows < (int64_t(1) << 31), what,
              ": the CUDA kernel takes fewer than 2^31 rows, got ", d.rows);
  if (d.cols <= kWarpRowMax) {
    constexpr int kRowsPerBlock = kThreads / 32;
    launch(std::integral_constant<int, 32>{},
           unsigned((d.rows + kRowsPerBlock - 1) / kRowsPerBlock));
  } else {
    launch(std::integral_constant<int, kThreads>{}, unsigned(d.rows));
  }
  check_launch(what);
}

// A copy of `host` in device memory of the context's backend, made at kernel construction
// (a kernel's constant tables: offsets, pointer lists). Synchronizes the stream once, so the
// host vector may go away when this returns.
template <typename T>
std::shared_ptr<void> upload_table(ExecContext& ctx, const std::vector<T>& host) {
  CudaBackend& backend = cuda_backend(ctx);
  const size_t bytes = std::max<size_t>(1, host.size() * sizeof(T));
  std::shared_ptr<void> device = backend.allocate(bytes);
  if (!host.empty()) {
    CAMPO_CUDA_CHECK(cudaMemcpyAsync(device.get(), host.data(), host.size() * sizeof(T),
                                     cudaMemcpyHostToDevice, backend.stream()));
    CAMPO_CUDA_CHECK(cudaStreamSynchronize(backend.stream()));
  }
  return device;
}

}  // namespace campo::cuda
