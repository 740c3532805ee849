#include "graph/memory_plan.h"

#include <gtest/gtest.h>

#include "runtime/rng.h"

namespace campo {
namespace {

TEST(MemoryPlanTest, ReusesBuffersOfDeadValues) {
  // A chain a -> b -> c -> d: each value dies when the next is computed, so two slots
  // suffice whatever the chain length.
  std::vector<BufferRequest> r;
  for (int i = 0; i < 10; ++i) r.push_back({1000, i, i + 1});
  MemoryPlan p = plan_memory(r);
  EXPECT_TRUE(plan_is_valid(r, p));
  EXPECT_EQ(p.arena_bytes, 2 * 1024u);
  EXPECT_EQ(p.naive_bytes, 10 * 1024u);
  EXPECT_EQ(p.live_peak_bytes, 2000u);  // two values live at each position, not three
}

TEST(MemoryPlanTest, LivePeakIsTheMostBytesLiveAtOnePosition) {
  // Live per position: 0: 100, 1: 100 + 30, 2: 30 + 500, 3: 500 + 7; a value ending at 1
  // and one starting at 2 do not overlap.
  std::vector<BufferRequest> r = {{100, 0, 1}, {30, 1, 2}, {500, 2, 3}, {7, 3, 3}};
  EXPECT_EQ(plan_memory(r).live_peak_bytes, 530u);
}

TEST(MemoryPlanTest, AllocationTraceFollowsLifetimes) {
  // Persistent 64 and 8 bytes; then lifetimes [0,1], [1,2], [2,3], [3,3]: a value whose last
  // reader ran at position p is freed before what position p + 1 allocates.
  const std::vector<BufferRequest> r = {{100, 0, 1}, {30, 1, 2}, {500, 2, 3}, {7, 3, 3}};
  EXPECT_EQ(allocation_trace({64, 8}, r),
            "a 0 64\n"
            "a 1 8\n"
            "a 2 100\n"
            "a 3 30\n"
            "f 2\n"
            "a 4 500\n"
            "f 3\n"
            "a 5 7\n"
            "f 4\n"
            "f 5\n");
}

TEST(MemoryPlanTest, NeverAliasesLiveValues) {
  Rng rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> r;
    for (int i = 0; i < 60; ++i) {
      int first = int(rng.below(40));
      r.push_back({size_t(1 + rng.below(5000)), first, first + int(rng.below(10))});
    }
    MemoryPlan p = plan_memory(r);
    ASSERT_TRUE(plan_is_valid(r, p));
    for (size_t off : p.offsets) EXPECT_EQ(off % 64, 0u);
    EXPECT_LE(p.arena_bytes, p.naive_bytes);
    // The values live at the busiest position overlap in time, so no plan is smaller.
    EXPECT_GE(p.arena_bytes, p.live_peak_bytes);
    size_t brute = 0;
    for (int pos = 0; pos < 50; ++pos) {
      size_t live = 0;
      for (const BufferRequest& q : r) live += q.first <= pos && pos <= q.last ? q.bytes : 0;
      brute = std::max(brute, live);
    }
    EXPECT_EQ(p.live_peak_bytes, brute);
  }
}

TEST(MemoryPlanTest, ValidityCheckCatchesOverlap) {
  std::vector<BufferRequest> r = {{128, 0, 2}, {128, 1, 3}};
  MemoryPlan bad;
  bad.offsets = {0, 64};
  EXPECT_FALSE(plan_is_valid(r, bad));
}

}  // namespace
}  // namespace campo
