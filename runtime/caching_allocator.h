// A caching allocator for device memory (the CUDA backend's; PyTorch's CUDACachingAllocator
// and llm.c's "allocate once" are the models). Device-neutral: it is given the device's raw
// allocate/free functions, so it compiles in every build and its tests run on the CPU.
//
// Invariants:
// - Raw memory comes in segments: a request up to kSmallLimit is served from the small pool,
//   whose segments are kSmallSegment bytes; a larger one from the large pool, whose segments
//   are kLargeSegment bytes for requests under kLargeSegmentLimit and the request rounded up
//   to kLargeGranularity beyond (segment_size). When that segment does not fit on the device
//   (even after the cache is released), a large request takes a segment of its own size
//   rounded to kLargeGranularity instead.
// - A segment is a chain of blocks, in address order, that tile it exactly. Every block size
//   and offset in its segment is a multiple of kBlockGranularity (size_class rounds each
//   request up to it), and segments are kAlignment aligned (the raw allocator's alignment,
//   cudaMalloc: 256 bytes; checked), so every block is kAlignment aligned.
// - A request takes the best-fitting free block of its pool (the smallest that is large
//   enough; the lowest address among equals). The block is split when the rest is worth
//   keeping: at least kBlockGranularity in the small pool, more than kSmallLimit in the large
//   one (a smaller rest stays part of the block, counted in use). No free block fits: a new
//   segment.
// - A freed block is merged with its free neighbours in the same segment, so no two free
//   blocks are ever adjacent; blocks of different segments are never merged (they are
//   separate raw allocations). A training loop that repeats its sequence of sizes therefore
//   stops calling the raw allocator after its first steps.
// - Stream-ordered reuse: all work of a backend is issued on one stream. When the host drops
//   the last owner of a block, kernels issued earlier may still be reading or writing it;
//   its bytes may nevertheless be handed out at once (whole, split or merged), because
//   whatever the new owner issues goes on the same stream, behind that earlier work, and so
//   runs after it. (A second stream, or host access to device memory, would need an event
//   per block; there is none.)
// - Raw memory is released a whole free segment at a time, never in part: by empty_cache(),
//   by a failed raw allocation (the free segments are released and the allocation retried),
//   by the allocator's destruction, and, for segments whose blocks outlive the allocator,
//   when the last of those blocks dies (the shared state they hold sees the allocator gone).
//   cudaFree waits for the device, so freeing raw memory never races with queued kernels.
// - Thread-safe: one mutex guards the pools and the statistics. Freeing a block allocates
//   nothing (each block carries the node it needs in its pool's free set).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace campo {

struct AllocatorStats {
  size_t bytes_in_use = 0;         // bytes of the blocks with a live owner (each at least its
                                   // request's size_class; more where a rest was not split off)
  size_t bytes_reserved = 0;       // raw bytes held in segments: in use plus cached
  size_t peak_bytes_in_use = 0;    // the largest bytes_in_use so far
  size_t peak_bytes_reserved = 0;  // the largest bytes_reserved so far
  size_t segments = 0;             // raw segments held now
  size_t raw_allocations = 0;      // successful calls of the raw allocate function
  size_t raw_frees = 0;            // calls of the raw free function
  size_t cache_hits = 0;           // requests served from a free block (no raw allocation)
  size_t splits = 0;               // free blocks split into a handed-out part and a free rest
  size_t merges = 0;               // freed blocks merged with a free neighbour
  size_t largest_free_block = 0;   // the largest request the cache can serve now
  // Reserved but not in use: the free blocks of all segments. How much of it one request can
  // use is largest_free_block; the rest is fragmentation across blocks and segments.
  size_t bytes_cached() const { return bytes_reserved - bytes_in_use; }
};

class CachingAllocator {
 public:
  // nullptr when the device has no memory left; throwing is for other errors.
  using RawAlloc = std::function<void*(size_t bytes)>;
  using RawFree = std::function<void(void* p)>;  // must not throw
  // The device's free and total bytes, for the out-of-memory message (cudaMemGetInfo).
  struct MemoryInfo {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
  };
  using QueryMemory = std::function<MemoryInfo()>;

  static constexpr size_t kAlignment = 256;
  static constexpr size_t kBlockGranularity = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;          // 1 MiB
  static constexpr size_t kSmallSegment = size_t(2) << 20;        // 2 MiB
  static constexpr size_t kLargeSegment = size_t(20) << 20;       // 20 MiB
  static constexpr size_t kLargeSegmentLimit = size_t(10) << 20;  // 10 MiB
  static constexpr size_t kLargeGranularity = size_t(2) << 20;    // 2 MiB

  // `query` may be empty (the message then says the free memory is unknown).
  CachingAllocator(RawAlloc alloc, RawFree free, QueryMemory query = {});
  // Frees the wholly free segments; the others are freed when their last block dies.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 gives a smallest block), kAlignment aligned, returned to
  // the cache when the last owner dies. Out of memory after releasing the cache: one error
  // line, "out of device memory: asked for X MiB, Y MiB free of Z MiB (campo holds R MiB,
  // C MiB of it cached)".
  std::shared_ptr<void> allocate(size_t bytes);
  // Frees every wholly free segment (segments holding a block in use stay, whole).
  void empty_cache();
  AllocatorStats stats() const;

  // The bytes a block for a request occupies: the request rounded up to kBlockGranularity.
  static size_t size_class(size_t bytes);
  // The raw segment allocated for a block of `block_bytes` (a size_class) when no free block
  // fits.
  static size_t segment_size(size_t block_bytes);

 private:
  struct Block;
  struct State;
  struct ReturnToCache;  // the deleter of the blocks handed out
  std::shared_ptr<State> state_;
};

// A backend whose device memory comes from a CachingAllocator (the CUDA backend). Lets code
// that sees only a Backend (tests, memory reports) reach the allocator's statistics with a
// dynamic_cast, without the device's headers.
class CachingAllocatorOwner {
 public:
  virtual CachingAllocator& allocator() = 0;

 protected:
  ~CachingAllocatorOwner() = default;
};

}  // namespace campo
