// Liveness-based memory planning: every intermediate value gets an offset in one arena;
// two values share bytes only when their lifetimes [first, last] (schedule positions,
// inclusive) do not overlap.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace campo {

struct BufferRequest {
  size_t bytes = 0;
  int first = 0;  // schedule index of the producer
  int last = 0;   // schedule index of the last reader (inclusive)
};

struct MemoryPlan {
  std::vector<size_t> offsets;  // one per request, 64-byte aligned
  size_t arena_bytes = 0;       // total size of the arena
  size_t naive_bytes = 0;       // what one buffer per value would take
  // The lower bound of any plan: the most bytes live at one schedule position (the plan's
  // quality is arena_bytes / live_peak_bytes).
  size_t live_peak_bytes = 0;
};

// Greedy best fit, largest buffers first (near-optimal for DNN training graphs).
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

// True when no two requests with overlapping lifetimes overlap in memory (used by tests
// and as a debug check by the compiler).
bool plan_is_valid(const std::vector<BufferRequest>& requests, const MemoryPlan& plan);

// What a runtime without a memory plan (one buffer per value, from a caching allocator, as
// an eager framework does) would ask its allocator for in one step: `persistent` buffers
// first (ids 0, 1, ...; never freed: variables, inputs), then every request allocated at its
// producer's position and freed once its last reader has run (ids following, by request),
// the frees of a position before its allocations. One event per line: "a ID BYTES" or
// "f ID" (tests/runtime/data/ replays such traces through the caching allocator).
std::string allocation_trace(const std::vector<size_t>& persistent,
                             const std::vector<BufferRequest>& requests);

}  // namespace campo
