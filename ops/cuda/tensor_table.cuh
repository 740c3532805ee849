// The chunk index of a multi-tensor launch (nvcc only): one kernel walks up to N tensors
// whose addresses travel in the kernel's parameter (a table within the 4 KiB every CUDA
// device takes for parameters; more tensors take more launches). Each tensor is cut into
// chunks of `chunk` elements, numbered across the table; a block takes chunks grid-stride
// and finds the tensor of chunk c by a binary search over first_chunk. A kernel's table is
// a struct holding its per-tensor arrays (addresses, formats) beside a ChunkIndex<N>.
// Users: AllFinite (ops/cuda/all_finite.cu), the optimizer updates (ops/cuda/optimizer.cu).
#pragma once

#include <algorithm>
#include <cstdint>

namespace campo::cuda {

// Kernel parameters may take 4 KiB on every device; a table leaves room for the others.
inline constexpr size_t kMaxTableBytes = 3840;

// A chunk of tensor t: elements [begin, end) of it.
struct TableChunk {
  int t;
  int64_t begin, end;
};

template <int N>
struct ChunkIndex {
  int64_t numel[N];
  int64_t first_chunk[N + 1];  // first_chunk[count] = chunks in all
  int count;

  // Host: appends a tensor of n elements (n > 0) and returns its slot.
  int add(int64_t n, int64_t chunk) {
    const int t = count++;
    numel[t] = n;
    first_chunk[t + 1] = first_chunk[t] + (n + chunk - 1) / chunk;
    return t;
  }
  bool full() const { return count == N; }
  __host__ __device__ int64_t chunks() const { return first_chunk[count]; }
  // Host: enough blocks to keep every multiprocessor busy; each walks chunks grid-stride.
  unsigned blocks(int multiprocessors) const {
    return unsigned(
        std::max<int64_t>(1, std::min<int64_t>(chunks(), int64_t(multiprocessors) * 8)));
  }

  // The tensor holding chunk c (< chunks()) and the chunk's element range in it.
  __device__ __forceinline__ TableChunk locate(int64_t c, int64_t chunk) const {
    int lo = 0, hi = count - 1;  // the last t with first_chunk[t] <= c
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (first_chunk[mid] <= c)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t begin = (c - first_chunk[lo]) * chunk;
    return {lo, begin, begin + chunk < numel[lo] ? begin + chunk : numel[lo]};
  }
};

}  // namespace campo::cuda
