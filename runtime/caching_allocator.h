// A caching allocator for device memory (the CUDA backend's; PyTorch's CUDACachingAllocator
// and llm.c's "allocate once" are the models). Device-neutral: it is given the device's raw
// allocate/free functions, so it compiles in every build and its tests run on the CPU with
// malloc.
//
// Invariants:
// - Every request is rounded up to a size class: 512 bytes for small blocks (up to
//   kSmallLimit), 2 MiB for large ones. A block is one whole raw allocation of its class's
//   size, so it keeps the raw allocator's alignment (cudaMalloc: 256 bytes; checked).
// - A block whose last shared_ptr owner dies goes back to its class's bin and is handed out
//   again for the next request of that class, so a training loop that repeats the same
//   sequence of sizes stops calling the raw allocator after its first step.
// - Stream-ordered reuse: all work of a backend is issued on one stream. When the host drops
//   the last owner of a block, kernels issued earlier may still be reading or writing it;
//   the block may nevertheless be handed out at once, because whatever the new owner issues
//   goes on the same stream, behind that earlier work, and so runs after it. (A second
//   stream, or host access to device memory, would need an event per block; there is none.)
// - Raw memory is released only by empty_cache(), by a failed raw allocation (the cache is
//   emptied and the allocation retried once), by the allocator's destruction (its cache),
//   and for blocks that outlive the allocator, when their last owner dies (the shared state
//   they hold sees the allocator gone and frees them raw). cudaFree waits for the device,
//   so freeing raw memory never races with queued kernels.
// - Thread-safe: one mutex guards the bins and the statistics.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace campo {

struct AllocatorStats {
  size_t bytes_in_use = 0;       // size-class bytes of blocks with a live owner
  size_t bytes_reserved = 0;     // raw bytes held: in use plus cached
  size_t peak_bytes_in_use = 0;  // the largest bytes_in_use so far
  size_t raw_allocations = 0;    // successful calls of the raw allocate function
  size_t raw_frees = 0;          // calls of the raw free function
  size_t cache_hits = 0;         // requests served from a bin
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
  static constexpr size_t kSmallGranularity = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;        // 1 MiB
  static constexpr size_t kLargeGranularity = size_t(2) << 20;  // 2 MiB

  // `query` may be empty (the message then says the free memory is unknown).
  CachingAllocator(RawAlloc alloc, RawFree free, QueryMemory query = {});
  // Frees the cache; blocks still owned are freed raw when their last owner dies.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 gives a smallest block), kAlignment aligned, returned to
  // the cache when the last owner dies. Out of memory after emptying the cache: one error
  // line, "out of device memory: asked for X MiB, Y MiB free of Z MiB (campo holds R MiB,
  // C MiB of it cached)".
  std::shared_ptr<void> allocate(size_t bytes);
  // Frees every cached block (blocks in use stay).
  void empty_cache();
  AllocatorStats stats() const;

  // The size class of a request: what a block for it occupies.
  static size_t size_class(size_t bytes);

 private:
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
