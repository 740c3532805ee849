// Numerics telemetry through the command line (campo train --numerics, campo plan --numerics;
// runtime/numerics.h, docs/mixed-precision.md): LeNet with every GEMM in FP8 or MXFP4 writes
// one record per quantized operand at every N-th step and the last, with plausible values
// (unit scaling flushes small weights and gradients to zero; MX block scales clamp block maxima
// in e2m1); --numerics all adds the bf16 casts; TensorBoard gets the scalars; plan marks the
// nodes that lose most; every bad option or file is one error line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::CliResult;
using testing::expect_error;
using testing::run_cli;

std::vector<nlohmann::json> numerics_records(const std::string& path) {
  std::vector<nlohmann::json> records;
  for (nlohmann::json& j : testing::read_json_lines(path))
    if (j["event"] == "numerics") records.push_back(std::move(j));
  return records;
}

// LeNet on synthetic data, batch 16: 25 steps, recording (with --numerics-every 10) at steps
// 10, 20 and 25.
std::vector<std::string> lenet_train(const testing::TempDir& dir, std::vector<std::string> extra,
                                     const std::string& precision = "amp") {
  std::vector<std::string> a = {
      "train", "--model",       "lenet", "--dataset",    "synthetic", "--batch",
      "16",    "--limit-train", "960",   "--limit-test", "32",        "--steps",
      "25",    "--progress",    "none",  "--precision",  precision};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::string every_gemm(const std::string& format, const std::string& recipe) {
  return R"({"rules": [{"name": "*", "format": ")" + format + "\"" +
         (recipe.empty() ? "" : ", \"recipe\": " + recipe) + "}]}";
}

// Every quantized operand of LeNet (14 GEMMs, two operands) at steps 10, 20 and 25: amax,
// scale 1 (unit scaling), fractions in [0, 1]; small weights and gradients flush to zero.
TEST(NumericsCliTest, Fp8RunRecordsEveryQuantizedOperand) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("fp8", R"({"scaling": "none"})"));
  const CliResult r =
      run_cli(lenet_train(dir, {"--precision-policy", policy, "--metrics", dir.file("m.jsonl"),
                                "--numerics", "--numerics-every", "10"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const std::vector<nlohmann::json> records = numerics_records(dir.file("m.jsonl"));
  ASSERT_EQ(records.size(), 3u * 28u);
  std::map<int64_t, int> per_step;
  std::set<std::string> formats, passes;
  double most_underflow = 0;
  for (const auto& j : records) {
    ++per_step[j["step"].get<int64_t>()];
    formats.insert(j["format"].get<std::string>());
    passes.insert(j["pass"].get<std::string>());
    EXPECT_TRUE(j["operand"] == "a" || j["operand"] == "b") << j;
    EXPECT_GT(j["elements"].get<int64_t>(), 0) << j;
    EXPECT_GT(j["amax"].get<double>(), 0.0) << j;
    EXPECT_EQ(j["scale"].get<double>(), 1.0) << j;
    for (const char* f : {"underflow", "saturated", "overflow"}) {
      EXPECT_GE(j[f].get<double>(), 0.0) << j;
      EXPECT_LE(j[f].get<double>(), 1.0) << j;
    }
    EXPECT_EQ(j["nan"], 0) << j;
    EXPECT_EQ(j["inf"], 0) << j;
    most_underflow = std::max(most_underflow, j["underflow"].get<double>());
  }
  EXPECT_EQ(per_step, (std::map<int64_t, int>{{10, 28}, {20, 28}, {25, 28}}));
  EXPECT_EQ(formats, (std::set<std::string>{"e4m3", "e5m2"}));
  EXPECT_EQ(passes, (std::set<std::string>{"forward", "backward"}));
  // e4m3 at scale 1 holds nothing below 2^-10: LeNet's small weights and gradients flush.
  EXPECT_GT(most_underflow, 0.0);
}

// MXFP4: a block's scale maps its amax into [4, 8) times it, and e2m1 holds at most 6, so the
// block maxima in (7, 8) times the scale clamp (past the midpoint 7 between 6 and 8):
// saturation > 0; no per-tensor scale (null).
TEST(NumericsCliTest, MxBlockScalesSaturate) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("mxfp4", ""));
  const CliResult r =
      run_cli(lenet_train(dir, {"--precision-policy", policy, "--metrics", dir.file("m.jsonl"),
                                "--numerics", "quantized", "--numerics-every", "25"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  double most_saturated = 0;
  const std::vector<nlohmann::json> records = numerics_records(dir.file("m.jsonl"));
  ASSERT_EQ(records.size(), 28u);
  for (const auto& j : records) {
    EXPECT_TRUE(j["scale"].is_null()) << j;
    EXPECT_EQ(j["format"], "e2m1") << j;
    most_saturated = std::max(most_saturated, j["saturated"].get<double>());
  }
  EXPECT_GT(most_saturated, 0.0);
}

// --numerics all under amp (bf16): also every Cast to bf16 (operand "x"); --tensorboard gets
// the scalars numerics/<node>/<operand>/<what>.
TEST(NumericsCliTest, AllAddsTheLowPrecisionCastsAndWritesTensorBoard) {
  testing::TempDir dir;
  const CliResult r = run_cli(lenet_train(dir, {"--metrics", dir.file("m.jsonl"), "--tensorboard",
                                                dir.file("tb"), "--numerics", "all"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const std::vector<nlohmann::json> records = numerics_records(dir.file("m.jsonl"));
  ASSERT_FALSE(records.empty());
  std::string node;
  for (const auto& j : records) {
    EXPECT_EQ(j["operand"], "x") << j;
    EXPECT_EQ(j["format"], "bf16") << j;
    EXPECT_TRUE(j["scale"].is_null()) << j;
    node = j["node"].get<std::string>();
  }
  std::string events;
  for (const auto& f : std::filesystem::directory_iterator(dir.file("tb"))) {
    std::ifstream in(f.path(), std::ios::binary);
    events += std::string(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(events.find("numerics/" + node + "/x/underflow"), std::string::npos);
  EXPECT_NE(events.find("numerics/" + node + "/x/amax"), std::string::npos);
}

TEST(NumericsCliTest, BadOptionsAreOneErrorLine) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("fp8", ""));
  const std::string m = dir.file("m.jsonl");
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--precision-policy", policy, "--numerics"}, "--numerics records into --metrics FILE"},
      {{"--metrics", m, "--numerics", "some"}, "--numerics must be quantized"},
      {{"--precision-policy", policy, "--metrics", m, "--numerics", "--numerics-every", "0"},
       "--numerics-every must be at least 1"},
      {{"--metrics", m, "--numerics-every", "5"}, "--numerics-every needs --numerics"},
      {{"--metrics", m, "--numerics"}, "this run's step quantizes no GEMM operand"},
  };
  for (const auto& [extra, needle] : cases) {
    SCOPED_TRACE(needle);
    expect_error(run_cli(lenet_train(dir, extra)), needle);
  }
  expect_error(run_cli(lenet_train(dir, {"--metrics", m, "--numerics", "all"}, "fp32")),
               "casts no tensor to f16 or bf16 and quantizes no GEMM operand");
  expect_error(run_cli({"train", "--model", "dcgan", "--dataset", "synthetic", "--steps", "1",
                        "--metrics", m, "--numerics", "all"}),
               "--numerics does not support dcgan yet");
}

// plan --numerics marks the quantized nodes with their worst operand's figures, ranks those
// that lose most, and puts the figures in --json.
TEST(NumericsCliTest, PlanMarksTheNodesThatLoseMost) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("fp8", R"({"scaling": "none"})"));
  const std::string m = dir.file("m.jsonl");
  ASSERT_EQ(run_cli(lenet_train(dir, {"--precision-policy", policy, "--metrics", m, "--numerics",
                                      "--numerics-every", "25"}))
                .code,
            0);
  const CliResult p =
      run_cli({"plan", "--model", "lenet", "--batch", "16", "--precision", "amp",
               "--precision-policy", policy, "--numerics", m, "--json", dir.file("plan.json")});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("numerics " + m + ": 28 records of steps 25..25, 14 of this plan's nodes"),
            std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("loses most:\n  1. "), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("; loses most #1}"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("underflow "), std::string::npos) << p.out;
  std::ifstream f(dir.file("plan.json"));
  const nlohmann::json plan = nlohmann::json::parse(f);
  int marked = 0;
  for (const auto& n : plan["graphs"][0]["nodes"]) {
    EXPECT_EQ(n["numerics"].is_null(), n["quant"].is_null()) << n["name"];
    if (!n["numerics"].is_null()) ++marked;
  }
  EXPECT_EQ(marked, 14);
}

TEST(NumericsCliTest, PlanRefusesBadNumericsFilesInOneLine) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("fp8", ""));
  const std::string record =
      R"({"event":"numerics","step":10,"node":"fc1.MatMul","operand":"a","pass":"forward",)"
      R"("format":"e4m3","elements":8,"amax":1,"scale":1,"underflow":0.5,"saturated":0,)"
      R"("overflow":0,"nan":0,"inf":0})";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"event":"train","step":1,"loss":2.3})"
       "\n",
       "holds no numerics records"},
      {"", "is empty: no numerics records"},
      {"{\"event\":\"numerics\",\n", "line 1: not JSON"},
      {R"({"event":"numerics","step":1})"
       "\n",
       "'node' is missing"},
      {std::string(record).replace(record.find("0.5"), 3, "2") + "\n", "not a fraction"},
      {std::string(record).replace(record.find("fc1.MatMul"), 10, "nope.MatMul") + "\n",
       "names none of this plan's nodes"},
  };
  for (const auto& [text, needle] : cases) {
    SCOPED_TRACE(needle);
    const std::string file = dir.write("bad.jsonl", text);
    expect_error(run_cli({"plan", "--model", "lenet", "--batch", "4", "--precision", "amp",
                          "--precision-policy", policy, "--numerics", file}),
                 needle);
  }
  expect_error(
      run_cli({"plan", "--model", "lenet", "--batch", "4", "--numerics", dir.file("absent.jsonl")}),
      "absent.jsonl");
}

}  // namespace
}  // namespace campo
