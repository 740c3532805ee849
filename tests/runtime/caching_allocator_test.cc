// The caching allocator over a fake device (aligned host memory): reuse, steady state over
// repeated training steps, the out-of-memory message, empty_cache, alignment, and blocks that
// outlive the allocator. Runs on every build; the CUDA backend's own use of it is tested in
// tests/cuda/cuda_backend_test.cc.
#include "runtime/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

// Raw memory of a pretend device: counts what is live, can be told to run out.
struct FakeDevice {
  std::map<void*, size_t> live;  // raw block -> its size
  size_t total = size_t(64) << 20;
  size_t used = 0;
  size_t limit = size_t(-1);  // raw allocations beyond this many bytes in use fail

  CachingAllocator make() {
    return CachingAllocator(
        [this](size_t n) -> void* {
          if (used + n > limit) return nullptr;
          void* p = std::aligned_alloc(CachingAllocator::kAlignment, n);
          if (p) {
            live[p] = n;
            used += n;
          }
          return p;
        },
        [this](void* p) {
          used -= live.at(p);
          live.erase(p);
          std::free(p);
        },
        [this] {
          return CachingAllocator::MemoryInfo{total - used, total};
        });
  }
};

TEST(CachingAllocatorTest, SizeClasses) {
  EXPECT_EQ(CachingAllocator::size_class(0), 512u);
  EXPECT_EQ(CachingAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingAllocator::size_class(1 << 20), size_t(1) << 20);
  EXPECT_EQ(CachingAllocator::size_class((1 << 20) + 1), size_t(2) << 20);
  EXPECT_EQ(CachingAllocator::size_class((5 << 20) + 3), size_t(6) << 20);
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
  EXPECT_EQ(alloc.stats().bytes_reserved, 1024u);
  auto b = alloc.allocate(1020);  // same size class
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
  EXPECT_EQ(alloc.stats().cache_hits, 1u);
  // Another class is a new raw block.
  auto c = alloc.allocate(3000);
  EXPECT_NE(c.get(), first);
  EXPECT_EQ(alloc.stats().raw_allocations, 2u);
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
}

TEST(CachingAllocatorTest, OutOfMemoryMessageNamesTheSizes) {
  FakeDevice dev;
  dev.limit = size_t(10) << 20;
  CachingAllocator alloc = dev.make();
  auto held = alloc.allocate(size_t(4) << 20);
  const std::string msg = error_message([&] { alloc.allocate(size_t(8) << 20); });
  EXPECT_TRUE(contains(msg,
                       "out of device memory: asked for 8.0 MiB, 60.0 MiB free of 64.0 MiB "
                       "(campo holds 4.0 MiB, 0.0 MiB of it cached)"));
  EXPECT_EQ(alloc.stats().raw_allocations, 1u);
  EXPECT_EQ(alloc.stats().bytes_in_use, size_t(4) << 20);
}

TEST(CachingAllocatorTest, OutOfMemoryEmptiesTheCacheAndRetries) {
  FakeDevice dev;
  dev.limit = size_t(10) << 20;
  CachingAllocator alloc = dev.make();
  alloc.allocate(size_t(4) << 20).reset();  // cached, in a class that will not be asked again
  alloc.allocate(size_t(2) << 20).reset();
  EXPECT_EQ(alloc.stats().bytes_reserved, size_t(6) << 20);
  auto big = alloc.allocate(size_t(8) << 20);  // fits only once the cache is released
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(alloc.stats().bytes_reserved, size_t(8) << 20);
  EXPECT_EQ(alloc.stats().raw_frees, 2u);
  EXPECT_EQ(dev.live.size(), 1u);
}

TEST(CachingAllocatorTest, OutOfMemoryWithoutQuerySaysUnknown) {
  CachingAllocator alloc([](size_t) -> void* { return nullptr; }, [](void*) {});
  const std::string msg = error_message([&] { alloc.allocate(3 << 20); });
  EXPECT_TRUE(contains(msg, "out of device memory: asked for 3.0 MiB, free memory unknown"));
}

TEST(CachingAllocatorTest, EmptyCacheReleasesOnlyFreeBlocks) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  auto kept = alloc.allocate(700);
  alloc.allocate(5000).reset();
  alloc.allocate(3 << 20).reset();
  EXPECT_EQ(dev.live.size(), 3u);
  alloc.empty_cache();
  EXPECT_EQ(dev.live.size(), 1u);
  EXPECT_EQ(dev.live.count(kept.get()), 1u);
  EXPECT_EQ(alloc.stats().bytes_reserved, 1024u);
  EXPECT_EQ(alloc.stats().bytes_in_use, 1024u);
  EXPECT_EQ(alloc.stats().raw_frees, 2u);
}

TEST(CachingAllocatorTest, BlocksAreAligned) {
  FakeDevice dev;
  CachingAllocator alloc = dev.make();
  std::vector<std::shared_ptr<void>> blocks;
  for (size_t n : {size_t(1), size_t(3), size_t(513), size_t(100000), size_t(3) << 20})
    blocks.push_back(alloc.allocate(n));
  for (const auto& b : blocks) EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 256, 0u) << b.get();
}

TEST(CachingAllocatorTest, UnalignedRawMemoryIsRefused) {
  alignas(256) static char arena[4096];
  CachingAllocator alloc([](size_t) -> void* { return arena + 16; }, [](void*) {});
  EXPECT_TRUE(contains(error_message([&] { alloc.allocate(10); }), "not 256-byte aligned"));
}

TEST(CachingAllocatorTest, BlocksOutlivingTheAllocatorAreFreed) {
  FakeDevice dev;
  std::shared_ptr<void> survivor;
  {
    CachingAllocator alloc = dev.make();
    survivor = alloc.allocate(2048);
    alloc.allocate(4096).reset();
    EXPECT_EQ(dev.live.size(), 2u);
  }
  EXPECT_EQ(dev.live.size(), 1u);  // the cache went with the allocator
  survivor.reset();
  EXPECT_TRUE(dev.live.empty());
}

}  // namespace
}  // namespace campo
