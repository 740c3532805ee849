// The caching allocator over a fake device: size classes and segments, best fit, splitting,
// merging (never across segments), alignment, empty_cache, out-of-memory retries, steady
// state over repeated training steps, blocks that outlive the allocator, and a recorded
// ResNet-18 step (tests/runtime/data/) replayed against the exact-size-class policy the
// allocator had before. Runs on every build; the CUDA backend's own use of it is tested in
// tests/cuda/cuda_backend_test.cc.
#include "runtime/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

constexpr size_t kMiB = size_t(1) << 20;

// Raw memory of a pretend device: addresses handed out one after the other from a range no
// one else uses (so consecutive segments are adjacent), never dereferenced (the allocator
// never touches the memory it manages). Counts what is live; can be told to run out.
struct FakeDevice {
  std::map<uintptr_t, size_t> live;  // raw segment -> its size
  size_t total = 64 * kMiB;
  size_t used = 0;
  size_t limit = size_t(-1);  // raw allocations beyond this many bytes in use fail
  uintptr_t next = uintptr_t(1) << 40;

  CachingAllocator make() {
    return CachingAllocator(
        [this](size_t n) -> void* {
          if (used + n > limit) return nullptr;
          const uintptr_t p = next;
          next += (n + 255) / 256 * 256;
          live[p] = n;
          used += n;
          return reinterpret_cast<void*>(p);
        },
        [this](void* p) {
          used -= live.at(reinterpret_cast<uintptr_t>(p));
          live.erase(reinterpret_cast<uintptr_t>(p));
        },
        [this] {
          return CachingAllocator::MemoryInfo{total - used, total};
        });
  }
  bool holds(const void* p) const { return live.count(reinterpret_cast<uintptr_t>(p)) != 0; }
};

uintptr_t addr(const std::shared_ptr<void>& p) { return reinterpret_cast<uintptr_t>(p.get()); }

TEST(CachingAllocatorTest, SizeClassesAndSegments) {
  EXPECT_EQ(CachingAllocator::size_class(0), 512u);
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(kMiB + 1), kMiB + 512);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(CachingAllocator::segment_size(12 * kMiB + 512), 14 * kMiB);
  // A request no device holds keeps a size that fails to allocate instead of wrapping to 0.
  EXPECT_GT(CachingAllocator::size_class(size_t(-1) - 3), size_t(-1) / 2);
  EXPECT_GT(CachingAllocator::segment_size(size_t(-1) - 511), size_t(-1) / 2);
}

TEST(CachingAllocatorTest, FreedBlockIsReused) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  void* first = nullptr;
  {
    auto a = alloc.allocate(1000);
    first = a.get();
    EXPECT_EQ(alloc.stats().bytes_in_use, 1024u);
  }
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  EXPECT_EQ(alloc.stats().bytes_reserved, 2 * kMiB);  // one small segment
  auto b = alloc.allocate(1020);  // the freed block, merged back into the whole segment
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
  EXPECT_EQ(alloc.stats().cache_hits, 1u);
  // Another size: carved from the same segment (the old exact-class policy made a new raw
  // block here).
  auto c = alloc.allocate(3000);
  EXPECT_EQ(addr(c), addr(b) + 1024);
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
}

TEST(CachingAllocatorTest, SplitsAFreeBlockAndCountsTheSegment) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  auto a = alloc.allocate(1000);
  auto b = alloc.allocate(512);
  auto c = alloc.allocate(40000);
  EXPECT_EQ(addr(b), addr(a) + 1024);
  EXPECT_EQ(addr(c), addr(b) + 512);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.segments, 1u);
  EXPECT_EQ(s.splits, 3u);  // each took the front of the segment's free rest
  EXPECT_EQ(s.bytes_in_use, 1024u + 512u + 40448u);
  EXPECT_EQ(s.bytes_cached(), 2 * kMiB - s.bytes_in_use);
  EXPECT_EQ(s.largest_free_block, s.bytes_cached());
}

TEST(CachingAllocatorTest, BestFitTakesTheSmallestFreeBlockThatHolds) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  // Holes of 4, 16 and 8 KiB, kept apart by blocks in use; then the segment's free rest.
  auto a = alloc.allocate(4096);
  auto keep1 = alloc.allocate(512);
  auto b = alloc.allocate(16384);
  auto keep2 = alloc.allocate(512);
  auto c = alloc.allocate(8192);
  auto keep3 = alloc.allocate(512);
  const uintptr_t at_a = addr(a), at_b = addr(b), at_c = addr(c);
  a.reset();
  b.reset();
  c.reset();
  EXPECT_EQ(alloc.stats().merges, 0u);
  auto x = alloc.allocate(6000);  // 6 KiB: the 8 KiB hole, split
  EXPECT_EQ(addr(x), at_c);
  auto y = alloc.allocate(2048);  // exactly the 2 KiB left of it
  EXPECT_EQ(addr(y), at_c + 6144);
  auto z = alloc.allocate(4000);  // the 4 KiB hole
  EXPECT_EQ(addr(z), at_a);
  auto w = alloc.allocate(9000);  // only the 16 KiB hole holds it among the holes
  EXPECT_EQ(addr(w), at_b);
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
}

TEST(CachingAllocatorTest, FreedBlockMergesWithBothNeighbours) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  auto x = alloc.allocate(4096);
  auto y = alloc.allocate(4096);
  auto z = alloc.allocate(4096);
  const uintptr_t base = addr(x);
  x.reset();  // its neighbour y is in use: no merge
  EXPECT_EQ(alloc.stats().merges, 0u);
  z.reset();  // merges with the segment's free rest after it
  EXPECT_EQ(alloc.stats().merges, 1u);
  EXPECT_EQ(alloc.stats().largest_free_block, 2 * kMiB - 8192);
  y.reset();  // merges with x before it and z's block after it: the whole segment again
  EXPECT_EQ(alloc.stats().merges, 3u);
  EXPECT_EQ(alloc.stats().largest_free_block, 2 * kMiB);
  auto whole = alloc.allocate(CachingAllocator::kSmallLimit);  // the largest small request
  EXPECT_EQ(addr(whole), base);
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
}

TEST(CachingAllocatorTest, BlocksOfAdjacentSegmentsAreNeverMerged) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  // Two 1 MiB blocks fill the first small segment; the third needs a second one, which the
  // fake device places right after the first.
  auto a1 = alloc.allocate(kMiB);
  auto a2 = alloc.allocate(kMiB);
  auto b1 = alloc.allocate(kMiB);
  ASSERT_EQ(alloc.stats().segments, 2u);
  ASSERT_EQ(addr(b1), addr(a2) + kMiB);  // adjacent in memory, separate raw allocations
  a2.reset();
  b1.reset();  // merges with its own segment's rest, not with a2 just before it
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.merges, 1u);
  EXPECT_EQ(s.largest_free_block, 2 * kMiB);
  EXPECT_EQ(s.bytes_cached(), 3 * kMiB);
  alloc.empty_cache();  // the second segment is wholly free, the first holds a1
  EXPECT_EQ(alloc.stats().segments, 1u);
  EXPECT_EQ(alloc.stats().largest_free_block, kMiB);
  EXPECT_TRUE(dev.holds(a1.get()));
}

TEST(CachingAllocatorTest, LargeRestIsSplitOffOnlyAboveOneMiB) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  auto a = alloc.allocate(3 * kMiB);  // a 20 MiB segment, split: 17 MiB free rest
  EXPECT_EQ(alloc.stats().bytes_reserved, 20 * kMiB);
  EXPECT_EQ(alloc.stats().largest_free_block, 17 * kMiB);
  auto b = alloc.allocate(16 * kMiB + 4096);  // leaves 1 MiB - 4 KiB: kept in the block
  EXPECT_EQ(addr(b), addr(a) + 3 * kMiB);
  EXPECT_EQ(alloc.stats().bytes_in_use, 20 * kMiB);
  EXPECT_EQ(alloc.stats().largest_free_block, 0u);
  EXPECT_EQ(alloc.stats().splits, 1u);
  // Small requests never take large-pool memory.
  auto c = alloc.allocate(100);
  EXPECT_EQ(alloc.stats().segments, 2u);
}

TEST(CachingAllocatorTest, NoGrowthOverRepeatedTrainingSteps) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  // One "step": activations allocated in order, some freed early (in place of liveness),
  // a workspace and a large weight-gradient buffer; everything freed at the end of the step.
  const std::vector<size_t> sizes = {4096, 100, 3 << 20, 77777, 4096, 1, 12 << 20, 640};
  size_t raw_after_first = 0, reserved_after_first = 0;
  for (int step = 0; step < 100; ++step) {
    std::vector<std::shared_ptr<void>> live;
    for (size_t i = 0; i < sizes.size(); ++i) {
      live.push_back(alloc.allocate(sizes[i]));
      if (i % 3 == 2) live[i - 1].reset();
    }
    live.clear();
    if (step == 0) {
      raw_after_first = alloc.stats().raw_allocations;
      reserved_after_first = alloc.stats().bytes_reserved;
    }
    EXPECT_EQ(alloc.stats().raw_allocations, raw_after_first) << "step " << step;
    EXPECT_EQ(alloc.stats().bytes_reserved, reserved_after_first) << "step " << step;
    EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
  }
  EXPECT_GT(raw_after_first, 0u);
  EXPECT_LT(raw_after_first, sizes.size());  // the early frees were reused within step 0
  EXPECT_EQ(alloc.stats().cache_hits, 100 * sizes.size() - raw_after_first);
}

TEST(CachingAllocatorTest, PeakCountsLiveBlocks) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  auto a = alloc.allocate(512);
  auto b = alloc.allocate(1024);
  a.reset();
  auto c = alloc.allocate(512);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 1536u);
  EXPECT_EQ(alloc.stats().peak_bytes_reserved, 2 * kMiB);
}

TEST(CachingAllocatorTest, OutOfMemoryMessageNamesTheSizes) {
  FakeDevice dev;
  dev.limit = 10 * kMiB;
  CachingAllocator alloc = dev.make();
  // 20 MiB segments do not fit under the limit: the segment is the request's own size.
  auto held = alloc.allocate(4 * kMiB);
  EXPECT_EQ(alloc.stats().bytes_reserved, 4 * kMiB);
  const std::string msg = error_message([&] { alloc.allocate(8 * kMiB); });
  EXPECT_TRUE(contains(msg,
                       "out of device memory: asked for 8.0 MiB, 60.0 MiB free of 64.0 MiB "
                       "(campo holds 4.0 MiB, 0.0 MiB of it cached)"));
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
  EXPECT_EQ(alloc.stats().bytes_in_use, 4 * kMiB);
}

TEST(CachingAllocatorTest, OutOfMemoryReleasesFreeSegmentsAndRetries) {
  FakeDevice dev;
  dev.limit = 10 * kMiB;
  CachingAllocator alloc = dev.make();
  auto a = alloc.allocate(4 * kMiB);
  auto b = alloc.allocate(3 * kMiB);  // a segment of 4 MiB (2 MiB granularity)
  auto small = alloc.allocate(1000);
  a.reset();
  b.reset();
  ASSERT_EQ(alloc.stats().segments, 3u);
  EXPECT_EQ(alloc.stats().bytes_reserved, 10 * kMiB);
  // 8 MiB: no free block holds it (two free 4 MiB segments are not one block) and nothing
  // fits beside them; releasing the wholly free segments makes room.
  auto big = alloc.allocate(8 * kMiB);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(alloc.stats().bytes_reserved, 10 * kMiB);
  EXPECT_EQ(alloc.stats().raw_frees, 2u);
  EXPECT_EQ(dev.live.size(), 2u);  // the 8 MiB segment and the small one, still in use
  EXPECT_TRUE(dev.holds(big.get()));
}

TEST(CachingAllocatorTest, OutOfMemoryWithoutQuerySaysUnknown) {
  CachingAllocator alloc([](size_t) -> void* { return nullptr; }, [](void*) {});
  const std::string msg = error_message([&] { alloc.allocate(3 << 20); });
  EXPECT_TRUE(contains(msg, "out of device memory: asked for 3.0 MiB, free memory unknown"));
}

TEST(CachingAllocatorTest, EmptyCacheReleasesOnlyWhollyFreeSegments) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  auto kept = alloc.allocate(700);
  alloc.allocate(5000).reset();      // same small segment as `kept`: it stays
  alloc.allocate(3 << 20).reset();   // a 20 MiB large segment, wholly free
  alloc.allocate(24 << 20).reset();  // another: no free block holds it
  EXPECT_EQ(dev.live.size(), 3u);
  alloc.empty_cache();
  EXPECT_EQ(dev.live.size(), 1u);
  EXPECT_TRUE(dev.holds(kept.get()));
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_reserved, 2 * kMiB);
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.raw_frees, 2u);
  EXPECT_EQ(s.segments, 1u);
  auto again = alloc.allocate(5000);  // from the kept segment's free rest
  EXPECT_EQ(addr(again), addr(kept) + 1024);
}

TEST(CachingAllocatorTest, BlocksAreAligned) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  std::vector<std::shared_ptr<void>> blocks;
  for (size_t n : {size_t(1), size_t(3), size_t(513), size_t(100000), size_t(3) << 20, size_t(7),
                   (size_t(3) << 20) + 1, size_t(11) << 20})
    blocks.push_back(alloc.allocate(n));
  for (const auto& b : blocks) EXPECT_EQ(addr(b) % 256, 0u) << b.get();
}

TEST(CachingAllocatorTest, UnalignedRawMemoryIsRefused) {
  alignas(256) static char arena[4096];
  CachingAllocator alloc([](size_t) -> void* { return arena + 16; }, [](void*) {});
  EXPECT_TRUE(contains(error_message([&] { alloc.allocate(10); }), "not 256-byte aligned"));
}

TEST(CachingAllocatorTest, BlocksOutlivingTheAllocatorAreFreed) {
  FakeDevice dev;
  std::shared_ptr<void> survivor, neighbour;
  {
    CachingAllocator alloc = dev.make();
    survivor = alloc.allocate(2048);
    neighbour = alloc.allocate(4096);  // the same small segment
    alloc.allocate(3 << 20).reset();   // a large segment, wholly free
    EXPECT_EQ(dev.live.size(), 2u);
  }
  EXPECT_EQ(dev.live.size(), 1u);  // the free segment went with the allocator
  survivor.reset();
  EXPECT_EQ(dev.live.size(), 1u);  // its segment still holds `neighbour`
  neighbour.reset();
  EXPECT_TRUE(dev.live.empty());
}

TEST(CachingAllocatorTest, ThreadsShareTheAllocator) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  auto work = [&](size_t seed) {
    std::vector<std::shared_ptr<void>> held(8);
    for (size_t i = 0; i < 2000; ++i) {
      seed = seed * 6364136223846793005u + 1442695040888963407u;
      held[(seed >> 33) % 8] = alloc.allocate((seed >> 40) % (3 * kMiB));
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) threads.emplace_back(work, t + 1);
  for (std::thread& t : threads) t.join();
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.cache_hits + s.raw_allocations, 4 * 2000u);
  alloc.empty_cache();  // every segment is wholly free again: merging left no free block apart
  EXPECT_EQ(alloc.stats().segments, 0u);
  EXPECT_TRUE(dev.live.empty());
}

// --- A recorded step ----------------------------------------------------------------------

struct TraceEvent {
  bool is_alloc = false;
  size_t id = 0;
  size_t bytes = 0;
};

// Reads a trace: '#' comments, then "a ID BYTES" / "f ID", each id allocated once and freed
// at most once, after its allocation.
std::vector<TraceEvent> read_trace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<TraceEvent> events;
  std::unordered_map<size_t, int> state;  // 1 allocated, 2 freed
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    std::string op, extra;
    TraceEvent e;
    words >> op >> e.id;
    e.is_alloc = op == "a";
    if (e.is_alloc) words >> e.bytes;
    EXPECT_TRUE((op == "a" || op == "f") && !words.fail() && !(words >> extra))
        << path << ":" << line_no << ": " << line;
    int& s = state[e.id];
    EXPECT_EQ(s, e.is_alloc ? 0 : 1) << path << ":" << line_no << ": " << line;
    s = e.is_alloc ? 1 : 2;
    events.push_back(e);
  }
  return events;
}

// The policy before blocks were split and merged: each request rounded up to its class (512
// bytes up to 1 MiB, 2 MiB beyond), one raw allocation per block, a freed block reused only by
// a request of the same class. Returns the peak bytes reserved.
size_t exact_class_peak_reserved(const std::vector<TraceEvent>& events) {
  auto class_of = [](size_t bytes) {
    const size_t g = bytes <= kMiB ? 512 : 2 * kMiB;
    return std::max<size_t>(1, (bytes + g - 1) / g) * g;
  };
  std::map<size_t, size_t> cached;  // class -> free blocks
  std::unordered_map<size_t, size_t> class_of_id;
  size_t reserved = 0, peak = 0;
  for (const TraceEvent& e : events) {
    if (!e.is_alloc) {
      ++cached[class_of_id.at(e.id)];
      continue;
    }
    const size_t c = class_of(e.bytes);
    class_of_id[e.id] = c;
    if (cached[c] > 0) {
      --cached[c];
    } else {
      reserved += c;
      peak = std::max(peak, reserved);
    }
  }
  return peak;
}

// Replays `events` (ids never freed skipped when `skip_persistent`), checking at every event
// that the live blocks are aligned, lie inside one live raw segment and overlap nothing.
void replay(CachingAllocator& alloc, const FakeDevice& dev, const std::vector<TraceEvent>& events,
            const std::unordered_map<size_t, bool>& is_freed, bool skip_persistent,
            std::unordered_map<size_t, std::shared_ptr<void>>& blocks,
            std::map<uintptr_t, uintptr_t>& live) {  // live block start -> end
  for (const TraceEvent& e : events) {
    if (skip_persistent && !is_freed.at(e.id)) continue;
    if (!e.is_alloc) {
      ASSERT_EQ(live.erase(addr(blocks.at(e.id))), 1u);
      blocks.erase(e.id);
      continue;
    }
    std::shared_ptr<void> b = alloc.allocate(e.bytes);
    const uintptr_t start = addr(b), end = start + std::max<size_t>(e.bytes, 1);
    ASSERT_EQ(start % CachingAllocator::kAlignment, 0u) << "id " << e.id;
    auto after = live.lower_bound(start);
    ASSERT_TRUE(after == live.end() || after->first >= end) << "id " << e.id << " overlaps";
    ASSERT_TRUE(after == live.begin() || std::prev(after)->second <= start)
        << "id " << e.id << " overlaps";
    auto segment = dev.live.upper_bound(start);
    ASSERT_NE(segment, dev.live.begin()) << "id " << e.id << " outside every segment";
    --segment;
    ASSERT_LE(end, segment->first + segment->second) << "id " << e.id << " crosses its segment";
    live.emplace(start, end);
    blocks.emplace(e.id, std::move(b));
  }
}

TEST(CachingAllocatorTest, RecordedResNet18StepReservesLessThanExactClasses) {
  const std::vector<TraceEvent> events =
      read_trace(std::string(CAMPO_SOURCE_DIR) + "/tests/runtime/data/alloc_trace_resnet18.txt");
  ASSERT_GT(events.size(), 500u);
  // Which ids the step frees (the others are variables and inputs), and the most bytes
  // live at once: what no allocator can reserve less than.
  std::unordered_map<size_t, bool> is_freed;
  std::unordered_map<size_t, size_t> bytes_of;
  size_t live_bytes = 0, live_peak = 0;
  for (const TraceEvent& e : events) {
    is_freed[e.id] = !e.is_alloc;
    if (e.is_alloc) {
      bytes_of[e.id] = e.bytes;
      live_bytes += e.bytes;
      live_peak = std::max(live_peak, live_bytes);
    } else {
      live_bytes -= bytes_of.at(e.id);
    }
  }
  FakeDevice dev;
  dev.total = size_t(64) << 30;
  CachingAllocator alloc = dev.make();
  std::unordered_map<size_t, std::shared_ptr<void>> blocks;
  std::map<uintptr_t, uintptr_t> live;
  replay(alloc, dev, events, is_freed, false, blocks, live);
  if (HasFatalFailure()) return;
  const AllocatorStats first = alloc.stats();
  const size_t old_peak = exact_class_peak_reserved(events);
  std::printf(
      "alloc trace resnet18: live peak %.1f MiB, peak reserved: splitting %.1f MiB "
      "(%zu segments, %zu splits, %zu merges), exact classes %.1f MiB\n",
      double(live_peak) / kMiB, double(first.peak_bytes_reserved) / kMiB, first.segments,
      first.splits, first.merges, double(old_peak) / kMiB);
  EXPECT_LT(first.peak_bytes_reserved, old_peak);
  EXPECT_GE(first.peak_bytes_reserved, live_peak);
  EXPECT_GT(first.splits, 0u);
  EXPECT_GT(first.merges, 0u);
  // The next step (the step's values again, the variables still held) reuses the cache.
  replay(alloc, dev, events, is_freed, true, blocks, live);
  if (HasFatalFailure()) return;
  EXPECT_EQ(alloc.stats().raw_allocations, first.raw_allocations);
  EXPECT_EQ(alloc.stats().peak_bytes_reserved, first.peak_bytes_reserved);
}

}  // namespace
}  // namespace campo
