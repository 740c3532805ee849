// Attribution of GPU activities to node slots and the recorded-table format
// (runtime/kernel_activity.h), on tables in tests/runtime/data/. The LeNet table is written by
// hand as CUPTI records a step (no GPU has recorded one yet; CAMPO_CUPTI_RECORD makes real
// ones, docs/gpu.md): a cuDNN convolution launching two kernels, a cuBLASLt GEMM launching
// one, a node that launches nothing, a memset inside a node, and activities of no node.
#include "runtime/kernel_activity.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::TempDir;

const std::string kLenet =
    std::string(CAMPO_SOURCE_DIR) + "/tests/runtime/data/cupti_lenet_step.jsonl";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(KernelActivityTest, LenetStepAttributesEveryKernelToItsNode) {
  const RecordedActivity r = read_activity_table(kLenet);
  EXPECT_TRUE(contains(r.device, "hand-written"));
  ASSERT_EQ(r.table.kernels.size(), 11u);
  ASSERT_EQ(r.table.correlations.size(), 11u);
  // Timestamps past 2^53 survive exactly (integers, never doubles).
  EXPECT_EQ(r.table.kernels[0].start_ns, 1754000000000000000ull);
  EXPECT_EQ(r.table.kernels[0].end_ns, 1754000000000001500ull);

  const NodeAttribution a = attribute_kernels(r.table, 8);
  // Conv2D: cuDNN's layout transform (4 us) and its implicit GEMM (22 us).
  // BiasAdd, Relu, MaxPool; Reshape launches nothing (an API call with its external id, no
  // kernel); MatMul: one cuBLASLt kernel; BiasAdd; the loss: its kernel and a memset.
  const std::vector<uint32_t> kernels = {2, 1, 1, 1, 0, 1, 1, 2};
  const std::vector<double> ms = {0.026, 0.003, 0.002, 0.006, 0.0, 0.012, 0.0015, 0.0053};
  EXPECT_EQ(a.kernels, kernels);
  ASSERT_EQ(a.ms.size(), ms.size());
  for (size_t i = 0; i < ms.size(); ++i) EXPECT_DOUBLE_EQ(a.ms[i], ms[i]) << "slot " << i;
  // A memset before the step (no external id) and a fill with external id 0.
  EXPECT_EQ(a.unattributed_kernels, 2u);
  EXPECT_DOUBLE_EQ(a.unattributed_ms, 0.0025);
}

TEST(KernelActivityTest, AttributionRefusesWhatNoStepRecords) {
  ActivityTable t;
  t.kernels = {{"k", 10, 20, 7}};
  t.correlations = {{7, 4}};
  EXPECT_EQ(attribute_kernels(t, 4).kernels, (std::vector<uint32_t>{0, 0, 0, 1}));
  EXPECT_TRUE(
      contains(error_message([&] { attribute_kernels(t, 3); }),
               "external id 4 (of correlation 7) names node slot 3, but the step has 3 slots"));
  t.correlations.push_back({7, 2});
  EXPECT_TRUE(contains(error_message([&] { attribute_kernels(t, 4); }),
                       "correlation 7 has two external ids, 4 and 2"));
  t.correlations.pop_back();
  t.kernels[0].end_ns = 5;
  EXPECT_TRUE(contains(error_message([&] { attribute_kernels(t, 4); }),
                       "'k' (correlation 7) ends at 5 ns, before it starts at 10 ns"));
  // No slots, no records: nothing to attribute, and no error.
  const NodeAttribution empty = attribute_kernels({}, 0);
  EXPECT_TRUE(empty.ms.empty());
  EXPECT_EQ(empty.unattributed_kernels, 0u);
}

TEST(KernelActivityTest, WriteThenReadGivesTheSameTableAndTheRecordedBytes) {
  const RecordedActivity r = read_activity_table(kLenet);
  TempDir dir;
  write_activity_table(dir.file("t.jsonl"), r.table, r.device);
  // The recorded file is the writer's own format, byte for byte.
  EXPECT_EQ(read_file(dir.file("t.jsonl")), read_file(kLenet));
  const RecordedActivity again = read_activity_table(dir.file("t.jsonl"));
  EXPECT_EQ(again.device, r.device);
  EXPECT_EQ(again.table, r.table);

  ActivityTable odd;  // a name that is not UTF-8 is written as U+FFFD, not refused
  odd.kernels = {{"bad\xff name \"quoted\"", 0, 0, 0}};
  write_activity_table(dir.file("odd.jsonl"), odd, "");
  EXPECT_EQ(read_activity_table(dir.file("odd.jsonl")).table.kernels[0].name,
            "bad\xef\xbf\xbd name \"quoted\"");
  write_activity_table(dir.file("empty.jsonl"), {}, "none");
  EXPECT_EQ(read_activity_table(dir.file("empty.jsonl")).table, ActivityTable{});
}

TEST(KernelActivityTest, BadTablesAreOneLineNamingTheFileAndLine) {
  auto ln = [](const std::string& record) { return record + "\n"; };
  const std::string header = ln(
      R"({"format":"campo-cupti-activity","version":1,"device":"d","kernels":1,"external_correlations":1})");
  const std::string kernel =
      ln(R"({"kind":"kernel","name":"k","start_ns":10,"end_ns":20,"correlation_id":3})");
  const std::string correlation =
      ln(R"({"kind":"external_correlation","correlation_id":3,"external_id":1})");
  auto k_with = [&](const std::string& fields) {
    return R"({"kind":"kernel","name":"k",)" + fields + "}\n";
  };
  struct Case {
    std::string text, message;
  };
  const Case cases[] = {
      {"", "t.jsonl is empty: no 'campo-cupti-activity' header"},
      {"not json\n", "t.jsonl: line 1: not JSON at column 2 (syntax error while parsing value"},
      {"[1e999]\n", "line 1: not JSON (number overflow parsing '1e999')"},
      {"[1]\n", "line 1: a JSON array, not an object"},
      {kernel,
       "line 1: not a table header: the first line must have \"format\":\"campo-cupti-activity\""},
      {ln(R"({"format":"campo-cupti-activity","version":2,"device":"d","kernels":0,"external_correlations":0})"),
       "line 1: version 2 is not one this campo reads (1)"},
      {ln(R"({"format":"campo-cupti-activity","device":"d"})"), "line 1: 'version' is missing"},
      {ln(R"({"format":"campo-cupti-activity","version":1,"device":7,"kernels":0,"external_correlations":0})"),
       "line 1: 'device' is number, not a string"},
      {header + ln(R"({"kind":"memcpy","correlation_id":3})") + correlation,
       "line 2: unknown kind 'memcpy' (kernel or external_correlation)"},
      {header + ln(R"({"name":"k"})"), "line 2: 'kind' is missing"},
      {header + k_with(R"("end_ns":20,"correlation_id":3)") + correlation,
       "line 2: 'start_ns' is missing"},
      {header + k_with(R"("start_ns":-10,"end_ns":20,"correlation_id":3)") + correlation,
       "line 2: 'start_ns' is -10, negative"},
      {header + k_with(R"("start_ns":1.5,"end_ns":20,"correlation_id":3)") + correlation,
       "line 2: 'start_ns' is 1.5, not an integer"},
      {header + k_with(R"("start_ns":"10","end_ns":20,"correlation_id":3)") + correlation,
       "line 2: 'start_ns' is string, not a number"},
      {header + k_with(R"("start_ns":30,"end_ns":20,"correlation_id":3)") + correlation,
       "line 2: 'end_ns' 20 is before 'start_ns' 30"},
      {header + k_with(R"("start_ns":10,"end_ns":20,"correlation_id":4294967296)") + correlation,
       "line 2: 'correlation_id' is 4294967296, more than 4294967295"},
      {header +
           ln(R"({"kind":"kernel","name":null,"start_ns":10,"end_ns":20,"correlation_id":3})") +
           correlation,
       "line 2: 'name' is null, not a string"},
      {header + kernel + correlation + correlation,
       "line 4: correlation 3 already has an external id (line 3)"},
      {header + kernel + "\n" + correlation, "line 3: empty line"},
      {header + kernel + correlation.substr(0, 30),
       "line 3: truncated: the file ends inside this record"},
      {header + kernel,
       ": truncated: the header announces 1 + 1 records (kernels + external correlations), the "
       "file has 1 + 0"},
      {header + kernel + kernel + correlation,
       ": 2 + 1 records (kernels + external correlations), more than the header announces (1 + "
       "1)"},
  };
  TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    std::ofstream(dir.file("t.jsonl"), std::ios::binary | std::ios::trunc) << c.text;
    const std::string msg = error_message([&] { read_activity_table(dir.file("t.jsonl")); });
    EXPECT_TRUE(contains(msg, "CUPTI activity table " + dir.file("t.jsonl")));
    EXPECT_TRUE(contains(msg, c.message));
  }
  // The file itself: missing, or a directory.
  EXPECT_TRUE(contains(error_message([&] { read_activity_table(dir.file("none.jsonl")); }),
                       "CUPTI activity table " + dir.file("none.jsonl") + ": no such file"));
  EXPECT_TRUE(contains(error_message([&] { read_activity_table(dir.str()); }), "is a directory"));
  // The good lines of these cases, whole, read.
  std::ofstream(dir.file("t.jsonl"), std::ios::binary | std::ios::trunc)
      << header << kernel << correlation;
  EXPECT_EQ(attribute_kernels(read_activity_table(dir.file("t.jsonl")).table, 1).kernels[0], 1u);
}

}  // namespace
}  // namespace campo
