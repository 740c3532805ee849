#include "runtime/caching_allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <utility>

#include "runtime/check.h"

namespace campo {

// A piece of a segment: handed out (in_use) or free (in its pool's free set).
struct CachingAllocator::Block {
  // A pool's free blocks, best fit first: by size, then by address.
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      if (a->size != b->size) return a->size < b->size;
      return std::less<const char*>()(a->ptr, b->ptr);
    }
  };
  using FreeSet = std::set<Block*, BySizeThenAddress>;

  char* ptr = nullptr;
  size_t size = 0;
  bool is_small = false;  // which pool its segment belongs to
  bool in_use = false;
  Block* prev = nullptr;  // its neighbours in the segment, in address order
  Block* next = nullptr;
  // The block's node of its pool's free set: in the set while the block is free, here while
  // it is in use, so that freeing a block allocates nothing.
  FreeSet::node_type node;

  bool is_whole_segment() const { return prev == nullptr && next == nullptr; }

  // A free-set node holding `b`, made apart from any pool (it allocates, and may throw).
  static FreeSet::node_type make_node(Block* b) {
    FreeSet one;
    one.insert(b);
    return one.extract(one.begin());
  }
};

namespace {

// `n` rounded up to a multiple of `granularity`; the largest multiple where that overflows
// (a size no device has, so its allocation fails and says so).
size_t round_up(size_t n, size_t granularity) {
  if (n > std::numeric_limits<size_t>::max() - granularity)
    return std::numeric_limits<size_t>::max() / granularity * granularity;
  return (n + granularity - 1) / granularity * granularity;
}

std::string mib(size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f", double(bytes) / double(1 << 20));
  return buf;
}

}  // namespace

// Everything a block needs to find its way home: shared by the allocator and every live
// block's deleter, so a block outliving the allocator still frees its segment (`closed`).
struct CachingAllocator::State {
  using FreeSet = Block::FreeSet;

  RawAlloc alloc;
  RawFree free;
  QueryMemory query;
  std::mutex mutex;
  FreeSet small_pool, large_pool;
  AllocatorStats stats;
  bool closed = false;

  // All below: mutex held.
  FreeSet& pool_of(bool is_small) { return is_small ? small_pool : large_pool; }

  // The smallest free block of the pool holding `size` bytes (lowest address among equals),
  // left in its set; nullptr when none is large enough.
  Block* best_fit(size_t size, bool is_small) {
    Block probe;
    probe.size = size;  // and ptr nullptr: before every block of that size
    FreeSet& pool = pool_of(is_small);
    const auto it = pool.lower_bound(&probe);
    return it == pool.end() ? nullptr : *it;
  }

  // A new raw segment for a block of `size` bytes (a request of `bytes`), put in its pool as
  // one free block. Tries the preferred segment, then (large pool) the smallest that holds
  // the block; then releases the free segments and tries both again; then fails with the
  // out-of-memory line.
  Block* add_segment(size_t bytes, size_t size, bool is_small) {
    const size_t preferred = segment_size(size);
    const size_t smallest = is_small ? preferred : round_up(size, kLargeGranularity);
    size_t segment = 0;
    auto try_raw = [&]() -> void* {
      segment = preferred;
      if (void* p = alloc(preferred)) return p;
      if (smallest == preferred) return nullptr;
      segment = smallest;
      return alloc(smallest);
    };
    void* p = try_raw();
    if (p == nullptr && release_free_segments() > 0) p = try_raw();
    if (p == nullptr) {
      std::string device = "free memory unknown";
      if (query) {
        try {
          const MemoryInfo info = query();
          device = mib(info.free_bytes) + " MiB free of " + mib(info.total_bytes) + " MiB";
        } catch (const std::exception&) {
          // Keep "unknown": the allocation failure is the error to report.
        }
      }
      CAMPO_FAIL("out of device memory: asked for ", mib(bytes), " MiB, ", device, " (campo holds ",
                 mib(stats.bytes_reserved), " MiB, ", mib(stats.bytes_cached()),
                 " MiB of it cached)");
    }
    if (reinterpret_cast<uintptr_t>(p) % kAlignment != 0) {
      free(p);
      CAMPO_FAIL("internal: the raw device allocator returned ", p, ", not ", kAlignment,
                 "-byte aligned");
    }
    Block* block = nullptr;
    try {
      block = new Block;
      block->ptr = static_cast<char*>(p);
      block->size = segment;
      block->is_small = is_small;
      pool_of(is_small).insert(block);
    } catch (...) {
      delete block;
      free(p);
      throw;
    }
    ++stats.raw_allocations;
    ++stats.segments;
    stats.bytes_reserved += segment;
    stats.peak_bytes_reserved = std::max(stats.peak_bytes_reserved, stats.bytes_reserved);
    return block;
  }

  // Takes the free block `b` out of its pool for a request of `size` bytes, splitting off the
  // rest as a free block when it is worth keeping. Throws (bad_alloc) before changing anything.
  void hand_out(Block* b, size_t size) {
    FreeSet& pool = pool_of(b->is_small);
    const size_t rest = b->size - size;
    const bool split = b->is_small ? rest >= kBlockGranularity : rest > kSmallLimit;
    Block* tail = nullptr;
    if (split) {
      tail = new Block;
      tail->ptr = b->ptr + size;
      tail->size = rest;
      tail->is_small = b->is_small;
      try {
        tail->node = Block::make_node(tail);
      } catch (...) {
        delete tail;
        throw;
      }
    }
    b->node = pool.extract(b);
    if (split) {
      b->size = size;
      // b was free, so its next neighbour is in use: the free tail is adjacent to no free block.
      tail->prev = b;
      tail->next = b->next;
      if (b->next) b->next->prev = tail;
      b->next = tail;
      pool.insert(std::move(tail->node));
      ++stats.splits;
    }
    b->in_use = true;
    stats.bytes_in_use += b->size;
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
  }

  // Puts the block `b`, just freed, back in its pool, merged with its free neighbours;
  // returns the merged block. Allocates nothing.
  Block* take_back(Block* b) {
    FreeSet& pool = pool_of(b->is_small);
    stats.bytes_in_use -= b->size;
    b->in_use = false;
    if (Block* prev = b->prev; prev != nullptr && !prev->in_use) {
      prev->node = pool.extract(prev);  // before its size (its key) changes
      prev->size += b->size;
      prev->next = b->next;
      if (b->next) b->next->prev = prev;
      delete b;
      b = prev;
      ++stats.merges;
    }
    if (Block* next = b->next; next != nullptr && !next->in_use) {
      pool.erase(next);
      b->size += next->size;
      b->next = next->next;
      if (next->next) next->next->prev = b;
      delete next;
      ++stats.merges;
    }
    pool.insert(std::move(b->node));
    return b;
  }

  // Frees the raw memory of a wholly free segment (its one block, in its pool).
  void release_segment(Block* b) {
    pool_of(b->is_small).erase(b);
    free(b->ptr);
    stats.bytes_reserved -= b->size;
    --stats.segments;
    ++stats.raw_frees;
    delete b;
  }

  // Frees every wholly free segment; returns how many.
  size_t release_free_segments() {
    size_t released = 0;
    for (FreeSet* pool : {&small_pool, &large_pool}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it++;  // release_segment erases b from the set
        if (!b->is_whole_segment()) continue;
        release_segment(b);
        ++released;
      }
    }
    return released;
  }
};

struct CachingAllocator::ReturnToCache {
  std::shared_ptr<State> state;
  Block* block;
  void operator()(void*) const noexcept {
    std::lock_guard<std::mutex> lock(state->mutex);
    Block* merged = state->take_back(block);
    if (state->closed && merged->is_whole_segment()) state->release_segment(merged);
  }
};

CachingAllocator::CachingAllocator(RawAlloc alloc, RawFree free, QueryMemory query)
    : state_(std::make_shared<State>()) {
  CAMPO_CHECK(alloc && free, "internal: a caching allocator needs raw allocate and free functions");
  state_->alloc = std::move(alloc);
  state_->free = std::move(free);
  state_->query = std::move(query);
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->release_free_segments();
  state_->closed = true;
}

size_t CachingAllocator::size_class(size_t bytes) {
  return bytes == 0 ? kBlockGranularity : round_up(bytes, kBlockGranularity);
}

size_t CachingAllocator::segment_size(size_t block_bytes) {
  if (block_bytes <= kSmallLimit) return kSmallSegment;
  if (block_bytes < kLargeSegmentLimit) return kLargeSegment;
  return round_up(block_bytes, kLargeGranularity);
}

std::shared_ptr<void> CachingAllocator::allocate(size_t bytes) {
  const size_t size = size_class(bytes);
  const bool is_small = size <= kSmallLimit;
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    block = state_->best_fit(size, is_small);
    const bool is_hit = block != nullptr;
    if (!is_hit) block = state_->add_segment(bytes, size, is_small);
    state_->hand_out(block, size);
    if (is_hit) ++state_->stats.cache_hits;
  }
  // Outside the lock: if the control block cannot be allocated, shared_ptr calls the deleter,
  // which takes the lock.
  return std::shared_ptr<void>(block->ptr, ReturnToCache{state_, block});
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->release_free_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  AllocatorStats s = state_->stats;
  for (const State::FreeSet* pool : {&state_->small_pool, &state_->large_pool})
    if (!pool->empty())
      s.largest_free_block = std::max(s.largest_free_block, (*pool->rbegin())->size);
  return s;
}

}  // namespace campo
