// The recorded hardware-counter table (runtime/hardware_counters.h): written and read back
// unchanged, unread counters and unrecorded times left out, and every kind of bad input one
// error line naming the file, the line and what is wrong.
#include "runtime/hardware_counters.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::TempDir;

TEST(HardwareCounterTableTest, RoundTripsAndLeavesUnreadCountersOut) {
  TempDir dir;
  CounterTable t;
  t.device = "NVIDIA H200";
  NodeCounters a;
  a.node = "conv1";
  a.values = {1e6, 62.5, 40, 88, 12345};
  a.fp32_ms = 0.25;
  a.low_ms = 0.125;
  NodeCounters b;
  b.node = "relu \"1\"";  // quoted in JSON
  b.values[size_t(Counter::dram_bytes)] = 4096;
  t.nodes = {a, b};
  write_counter_table(dir.file("t.jsonl"), t);
  const CounterTable r = read_counter_table(dir.file("t.jsonl"));
  EXPECT_EQ(r.device, t.device);
  ASSERT_EQ(r.nodes.size(), 2u);
  EXPECT_EQ(r.nodes[0].node, "conv1");
  EXPECT_EQ(r.nodes[0].values, a.values);
  EXPECT_EQ(r.nodes[0].fp32_ms, 0.25);
  EXPECT_EQ(r.nodes[0].low_ms, 0.125);
  EXPECT_EQ(r.nodes[1].node, b.node);
  EXPECT_EQ(r.nodes[1].values[size_t(Counter::dram_bytes)], 4096);
  EXPECT_TRUE(std::isnan(r.nodes[1].values[size_t(Counter::instructions)]));
  EXPECT_FALSE(all_read(r.nodes[1].values));
  EXPECT_TRUE(all_read(r.nodes[0].values));
  EXPECT_EQ(r.nodes[1].fp32_ms, -1);
}

TEST(HardwareCounterTableTest, BadInputIsOneLineNamingThePlace) {
  TempDir dir;
  const std::string path = dir.file("t.jsonl");
  const std::string header =
      "{\"format\":\"campo-hardware-counters\",\"version\":1,\"device\":\"d\",\"nodes\":1}\n";
  const std::pair<std::string, std::string> cases[] = {
      {"", "t.jsonl is empty: no 'campo-hardware-counters' header"},
      {"{\"format\":\"x\"}\n", "t.jsonl: line 1: not a table header"},
      {"{\"format\":\"campo-hardware-counters\",\"version\":2,\"device\":\"d\",\"nodes\":0}\n",
       "line 1: version 2 is not one this campo reads (1)"},
      {header, "t.jsonl: truncated: the header announces 1 nodes, the file has 0"},
      {header + "{\"node\":\"a\",\"dram_bytes\":1", "line 2: truncated: the file ends inside"},
      {header + "{\"node\":\"a\",\"dram_bytes\":-1}\n", "line 2: 'dram_bytes' is -1, negative"},
      {header + "{\"node\":\"a\",\"l2_hit_rate\":\"high\"}\n",
       "line 2: 'l2_hit_rate' is string, not a number"},
      {header + "{\"node\":\"a\",\"fp32_ms\":0}\n", "line 2: 'fp32_ms' is 0, not a positive time"},
      {header + "{\"dram_bytes\":1}\n", "line 2: 'node' is missing"},
      {header + "{\"node\":\"a\"}\n{\"node\":\"a\"}\n", "line 3: node 'a' is listed twice"},
      {header + "{\"node\":\"a\"}\n{\"node\":\"b\"}\n",
       "t.jsonl: 2 nodes, more than the header announces (1)"},
  };
  for (const auto& [text, expected] : cases) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
    const std::string e = error_message([&] { read_counter_table(path); });
    EXPECT_TRUE(contains(e, "hardware counter table " + path)) << text;
    EXPECT_TRUE(contains(e, expected)) << text;
  }
  EXPECT_TRUE(
      contains(error_message([&] { read_counter_table(dir.file("none.jsonl")); }), "none.jsonl"));
}

}  // namespace
}  // namespace campo
