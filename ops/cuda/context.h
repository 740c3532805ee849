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

}  // namespace cuda
}  // namespace campo
