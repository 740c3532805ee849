// What CUDA kernels reach through their ExecContext: the CUDA backend's stream, library
// handles and allocator (runtime/cuda/cuda_backend.h), and the launch arithmetic every
// element-wise kernel shares. Included by ops/cuda/ only (compiled with CAMPO_HAVE_CUDA).
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/kernel.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"

namespace campo {

inline cuda::CudaBackend& cuda_backend(ExecContext& ctx) {
  auto* backend = dynamic_cast<cuda::CudaBackend*>(&ctx.backend());
  CAMPO_CHECK(backend != nullptr, "internal: a CUDA kernel runs on the ",
              ctx.backend().device().str(), " backend");
  return *backend;
}
inline cudaStream_t cuda_stream(ExecContext& ctx) { return cuda_backend(ctx).stream(); }

namespace cuda {

// Threads per block of the element-wise kernels, and a grid that covers `n` items with a
// grid-stride loop: at most `blocks_per_sm` blocks per multiprocessor (enough to hide
// latency; more only adds scheduling).
inline constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n, int multiprocessors, int blocks_per_sm = 8) {
  const int64_t needed = (n + kThreads - 1) / kThreads;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(needed, int64_t(multiprocessors) * blocks_per_sm)));
}

// Throws with the launch's name when the last kernel launch failed (bad configuration);
// asynchronous faults surface at the next synchronizing call.
inline void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) fail_call(__FILE__, __LINE__, kernel, "CUDA", cudaGetErrorString(status));
}

// Copies `rows` rows of `row_elems` elements of `elem` bytes from `src` (a row every
// `src_stride` elements) to `dst` (a row every `dst_stride` elements), device to device on
// the context's stream: the padded operands of MatMul and of the convolutions (ops/
// conv_padding.h's CopyRowsFn).
inline void copy_rows(ExecContext& ctx, const void* src, int64_t src_stride, void* dst,
                      int64_t dst_stride, int64_t rows, int64_t row_elems, size_t elem) {
  if (rows == 0 || row_elems == 0) return;
  CAMPO_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_stride) * elem, src,
                                     size_t(src_stride) * elem, size_t(row_elems) * elem,
                                     size_t(rows), cudaMemcpyDeviceToDevice, cuda_stream(ctx)));
}

}  // namespace cuda
}  // namespace campo
