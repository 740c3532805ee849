#include "runtime/caching_allocator.h"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/check.h"

namespace campo {

// Everything a block needs to find its way home: shared by the allocator and every live
// block's deleter, so a block outliving the allocator still frees its memory (`closed`).
struct CachingAllocator::State {
  RawAlloc alloc;
  RawFree free;
  QueryMemory query;
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> bins;  // size class -> free blocks
  AllocatorStats stats;
  bool closed = false;

  // mutex held.
  void free_raw(void* p, size_t size) {
    free(p);
    stats.bytes_reserved -= size;
    ++stats.raw_frees;
  }
  void release_cache() {
    for (auto& [size, blocks] : bins)
      for (void* p : blocks) free_raw(p, size);
    bins.clear();
  }
};

struct CachingAllocator::ReturnToCache {
  std::shared_ptr<State> state;
  size_t size;
  void operator()(void* p) const noexcept {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->stats.bytes_in_use -= size;
    if (!state->closed) {
      try {
        state->bins[size].push_back(p);
        return;
      } catch (...) {
        // No room to remember the block (bad_alloc): give it back to the device instead.
      }
    }
    state->free_raw(p, size);
  }
};

namespace {

std::string mib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

CachingAllocator::CachingAllocator(RawAlloc alloc, RawFree free, QueryMemory query)
    : state_(std::make_shared<State>()) {
  CAMPO_CHECK(alloc && free, "internal: a caching allocator needs raw allocate and free functions");
  state_->alloc = std::move(alloc);
  state_->free = std::move(free);
  state_->query = std::move(query);
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->release_cache();
  state_->closed = true;
}

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes == 0) return kSmallGranularity;
  const size_t granularity = bytes <= kSmallLimit ? kSmallGranularity : kLargeGranularity;
  if (bytes > std::numeric_limits<size_t>::max() - granularity)
    return std::numeric_limits<size_t>::max() / granularity * granularity;  // fails to allocate
  return (bytes + granularity - 1) / granularity * granularity;
}

std::shared_ptr<void> CachingAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    AllocatorStats& stats = state_->stats;
    auto bin = state_->bins.find(size);
    if (bin != state_->bins.end() && !bin->second.empty()) {
      p = bin->second.back();
      bin->second.pop_back();
      ++stats.cache_hits;
    } else {
      p = state_->alloc(size);
      if (p == nullptr && stats.bytes_cached() > 0) {
        // The cache may hold the memory asked for, split over other size classes.
        state_->release_cache();
        p = state_->alloc(size);
      }
      if (p == nullptr) {
        std::string device = "free memory unknown";
        if (state_->query) {
          try {
            const MemoryInfo info = state_->query();
            device = mib(info.free_bytes) + " MiB free of " + mib(info.total_bytes) + " MiB";
          } catch (const std::exception&) {
            // Keep "unknown": the allocation failure is the error to report.
          }
        }
        CAMPO_FAIL("out of device memory: asked for ", mib(bytes), " MiB, ", device,
                   " (campo holds ", mib(stats.bytes_reserved), " MiB, ", mib(stats.bytes_cached()),
                   " MiB of it cached)");
      }
      if (reinterpret_cast<uintptr_t>(p) % kAlignment != 0) {
        state_->free(p);
        CAMPO_FAIL("internal: the raw device allocator returned ", p, ", not ", kAlignment,
                   "-byte aligned");
      }
      ++stats.raw_allocations;
      stats.bytes_reserved += size;
    }
    stats.bytes_in_use += size;
    if (stats.bytes_in_use > stats.peak_bytes_in_use) stats.peak_bytes_in_use = stats.bytes_in_use;
  }
  // Outside the lock: if the control block cannot be allocated, shared_ptr calls the deleter,
  // which takes the lock.
  return std::shared_ptr<void>(p, ReturnToCache{state_, size});
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->release_cache();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

}  // namespace campo
