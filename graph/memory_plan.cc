#include "graph/memory_plan.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace campo {

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    const BufferRequest& r = requests[idx];
    const size_t size = align64(r.bytes);
    plan.naive_bytes += size;
    // Occupied ranges of already-placed buffers alive at the same time, sorted by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed) {
      const BufferRequest& q = requests[p];
      if (q.last < r.first || r.last < q.first) continue;
      busy.push_back({plan.offsets[p], plan.offsets[p] + align64(q.bytes)});
    }
    std::sort(busy.begin(), busy.end());
    // Best fit: the smallest gap that holds `size`; else the end.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [begin, end] : busy) {
      if (begin > cursor && begin - cursor >= size && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
      }
      cursor = std::max(cursor, end);
    }
    if (best == SIZE_MAX) best = cursor;
    plan.offsets[idx] = best;
    plan.arena_bytes = std::max(plan.arena_bytes, best + size);
    placed.push_back(idx);
  }
  // Bytes live at each position: +bytes from first, -bytes after last.
  std::vector<std::pair<int, int64_t>> events;
  for (const BufferRequest& r : requests) {
    events.push_back({r.first, int64_t(r.bytes)});
    events.push_back({r.last + 1, -int64_t(r.bytes)});
  }
  std::sort(events.begin(), events.end());  // at one position, releases before allocations
  int64_t live = 0;
  for (const auto& [position, delta] : events) {
    live += delta;
    plan.live_peak_bytes = std::max(plan.live_peak_bytes, size_t(live));
  }
  return plan;
}

bool plan_is_valid(const std::vector<BufferRequest>& requests, const MemoryPlan& plan) {
  for (size_t i = 0; i < requests.size(); ++i)
    for (size_t j = i + 1; j < requests.size(); ++j) {
      const auto &a = requests[i], &b = requests[j];
      if (a.bytes == 0 || b.bytes == 0) continue;
      bool time_overlap = !(a.last < b.first || b.last < a.first);
      bool mem_overlap = plan.offsets[i] < plan.offsets[j] + b.bytes &&
                         plan.offsets[j] < plan.offsets[i] + a.bytes;
      if (time_overlap && mem_overlap) return false;
    }
  return true;
}

std::string allocation_trace(const std::vector<size_t>& persistent,
                             const std::vector<BufferRequest>& requests) {
  std::string out;
  for (size_t i = 0; i < persistent.size(); ++i)
    out += "a " + std::to_string(i) + " " + std::to_string(persistent[i]) + "\n";
  // (time, is_alloc, request): a request lives over [first, last], so it is freed at
  // last + 1, before what is allocated then.
  struct Event {
    int64_t time;
    bool is_alloc;
    size_t request;
  };
  std::vector<Event> events;
  events.reserve(2 * requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    events.push_back({int64_t(requests[i].first), true, i});
    events.push_back({int64_t(requests[i].last) + 1, false, i});
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.time != b.time ? a.time < b.time : a.is_alloc < b.is_alloc;
  });
  for (const Event& e : events) {
    const std::string id = std::to_string(persistent.size() + e.request);
    out += e.is_alloc ? "a " + id + " " + std::to_string(requests[e.request].bytes) + "\n"
                      : "f " + id + "\n";
  }
  return out;
}

}  // namespace campo
