// FP8 and MX GEMM operand formats through the command line (--precision-policy rules with a
// "format" of fp8, mxfp8, mxfp4, ... and a "recipe"; runtime/gemm_quant.h, docs/formats.md):
// LeNet trains with every GEMM quantized (delayed and current scaling, MXFP8, MXFP4, stochastic
// rounding) and its losses fall; a resumed run continues the amax histories bit for bit; plan
// shows the format, recipe and quantized elements; every malformed file is one error line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "graph/checkpoint.h"
#include "ops/kernel.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::CliResult;
using testing::expect_error;
using testing::json_event;
using testing::read_json_lines;
using testing::run_cli;

// LeNet on synthetic data, batch 16, 960 samples: 60 steps an epoch, logged every 6.
std::vector<std::string> lenet_train(const testing::TempDir& dir, const std::string& policy,
                                     const std::string& steps,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train",
                                "--model",
                                "lenet",
                                "--dataset",
                                "synthetic",
                                "--batch",
                                "16",
                                "--limit-train",
                                "960",
                                "--limit-test",
                                "32",
                                "--steps",
                                steps,
                                "--progress",
                                "none",
                                "--precision",
                                "amp",
                                "--precision-policy",
                                policy,
                                "--metrics",
                                dir.file("m.jsonl")};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Every GEMM of LeNet in `format` with `recipe` (may be empty).
std::string every_gemm(const std::string& format, const std::string& recipe,
                       const std::string& more = "") {
  return R"({"rules": [{"name": "*", "format": ")" + format + "\"" +
         (recipe.empty() ? "" : ", \"recipe\": " + recipe) + more + "}]}";
}

TEST(Fp8PolicyCliTest, LeNetTrainsWithEveryGemmQuantized) {
  const std::pair<const char*, std::string> cases[] = {
      {"fp8 delayed", every_gemm("fp8", R"({"scaling": "delayed", "history": 16})")},
      {"fp8 current", every_gemm("fp8", R"({"scaling": "current"})")},
      {"mxfp8", every_gemm("mxfp8", "")},
      {"mxfp4 stochastic", every_gemm("mxfp4", "", R"(, "rounding": "stochastic")")},
      {"mxfp6_e3m2", every_gemm("mxfp6_e3m2", "")},
  };
  for (const auto& [name, text] : cases) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    const std::string policy = dir.write("policy.json", text);
    const CliResult r = run_cli(lenet_train(dir, policy, "60"));
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    // The quantized operands' state is in the memory report (as quantization_state_mib).
    EXPECT_GT(json_event(r.out)["memory"].value("quantization_state_mib", 0.0), 0.0);
    std::vector<double> losses;
    for (const auto& j : read_json_lines(dir.file("m.jsonl")))
      if (j["event"] == "train") losses.push_back(j["loss"].get<double>());
    ASSERT_GE(losses.size(), 5u);
    for (double l : losses) EXPECT_TRUE(std::isfinite(l)) << l;
    // The logged loss is the mean of the steps so far: it falls as the model learns.
    std::string curve;
    for (double l : losses) curve += std::to_string(l) + " ";
    EXPECT_LT(losses.back(), 0.75 * losses.front()) << curve;
  }
}

// 8 steps straight and 4 + --resume + 4 end with the same weights, optimizer state and
// quantization state (scales, step counts, amax histories), bit for bit. (A constant learning
// rate: the cosine schedule follows --steps, which the first half sets to 4.)
TEST(Fp8PolicyCliTest, AResumedRunContinuesTheAmaxHistory) {
  testing::TempDir dir;
  const std::string policy = dir.write(
      "policy.json",
      every_gemm("fp8", R"({"scaling": "delayed", "history": 4, "amax": "max", "margin": 1})",
                 R"(, "rounding": "stochastic")"));
  const std::string straight = dir.file("straight.safetensors");
  const std::string half = dir.file("half.safetensors"), resumed = dir.file("resumed.safetensors");
  const std::vector<std::string> constant = {"--lr-schedule", "constant"};
  auto with = [&](std::vector<std::string> a) {
    a.insert(a.end(), constant.begin(), constant.end());
    return a;
  };
  CliResult r = run_cli(lenet_train(dir, policy, "8", with({"--save", straight})));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli(lenet_train(dir, policy, "4", with({"--save", half})));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli(lenet_train(dir, policy, "8", with({"--resume", half, "--save", resumed})));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto a = read_safetensors(straight), b = read_safetensors(resumed);
  ASSERT_EQ(a.size(), b.size());
  int quantization = 0;
  for (const auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    const Tensor& u = b.at(name);
    ASSERT_EQ(t.nbytes(), u.nbytes()) << name;
    EXPECT_EQ(std::memcmp(t.data(), u.data(), t.nbytes()), 0) << name;
    if (name.starts_with(kQuantizationStatePrefix)) {
      ++quantization;
      EXPECT_EQ(t.data_as<float>()[1], 8.0f) << name;  // steps quantized
      EXPECT_GT(t.data_as<float>()[2], 0.0f) << name;  // the latest amax
    }
  }
  // LeNet: 5 forward GEMMs, 4 data gradients and 5 weight gradients, two operands each.
  EXPECT_EQ(quantization, 2 * 14);
}

TEST(Fp8PolicyCliTest, PlanShowsFormatRecipeAndQuantizedElements) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", R"({
    "recipe": {"scaling": "current", "margin": 1},
    "rules": [{"name": "*", "format": "fp8"},
              {"layers": {"last": 1}, "format": "mxfp4", "note": "classifier"}]})");
  const std::string json = dir.file("plan.json");
  const CliResult p = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "amp",
                               "--precision-policy", policy, "--json", json});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("[fp8 e4m3 x e5m2, current (margin 1); quantizes 2 operands"),
            std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("[mxfp4 e2m1, mx; quantizes 2 operands"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("quantized GEMMs: 14 nodes"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("rule 1: name * -> fp8 (e4m3/e5m2, current (margin 1))"), std::string::npos)
      << p.out;
  std::ifstream f(json);
  const nlohmann::json plan = nlohmann::json::parse(f);
  const nlohmann::json& g = plan["graphs"][0];
  EXPECT_EQ(g["quantized_gemms"], 14);
  int fp8 = 0, mx = 0;
  for (const auto& n : g["nodes"]) {
    if (n["quant"].is_null()) continue;
    EXPECT_EQ(n["dtype"], "f32");
    (n["quant"]["format"] == "fp8" ? fp8 : mx) += 1;
    if (n["name"] == "fc1.MatMul") EXPECT_EQ(n["quant"]["elements"][0], "e4m3");
  }
  EXPECT_EQ(mx, 3);  // the last layer's: fc3's forward GEMM and its two gradients
  EXPECT_EQ(fp8 + mx, 14);
}

// The example file of docs/mixed-precision.md plans: the file's delayed recipe for the fp8
// rule, the MX rule's own blocks.
TEST(Fp8PolicyCliTest, TheExamplePolicyPlans) {
  const CliResult p = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "amp",
                               "--precision-policy", CAMPO_SOURCE_DIR "/examples/fp8-policy.json"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("[fp8 e4m3, delayed (history 1024, max, margin 0); quantizes 2 operands"),
            std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("[mxfp4 e2m1, mx, stochastic; quantizes 2 operands"), std::string::npos)
      << p.out;
}

TEST(Fp8PolicyCliTest, CostAwarePinsQuantizedGemms) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("fp8", ""));
  const CliResult p = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision",
                               "cost-aware", "--calibration", "none", "--precision-policy", policy,
                               "--json", dir.file("plan.json")});
  ASSERT_EQ(p.code, 0) << p.err;
  std::ifstream f(dir.file("plan.json"));
  const nlohmann::json plan = nlohmann::json::parse(f);
  int pinned = 0;
  for (const auto& n : plan["graphs"][0]["nodes"])
    if (!n["quant"].is_null()) {
      EXPECT_EQ(n["dtype"], "f32") << n["name"];
      EXPECT_EQ(n["decided_by"], "rule") << n["name"];
      ++pinned;
    }
  EXPECT_EQ(pinned, 14);
}

TEST(Fp8PolicyCliTest, MalformedRecipesAreOneErrorLine) {
  testing::TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {every_gemm("fp8", R"({"scaling": "later"})"), "unknown scaling \"later\""},
      {every_gemm("fp8", R"({"history": 0})"),
       "\"history\" must be a whole number in [1, 1048576]"},
      {every_gemm("fp8", R"({"amax": "mean"})"), "unknown amax \"mean\""},
      {every_gemm("fp8", R"({"margin": -1})"), "\"margin\" must be a whole number in [0, 64]"},
      {every_gemm("fp8", R"({"scaling": "current", "history": 8})"),
       "\"history\" is a setting of delayed scaling, not of \"current\""},
      {every_gemm("fp8", R"({"scaling": "mx"})"), "format fp8 scales per tensor"},
      {every_gemm("mxfp4", R"({"scaling": "delayed"})"),
       "format mxfp4 scales by 32-element blocks"},
      {every_gemm("mxfp8", R"({"saturate": false})"), "always saturates"},
      {every_gemm("fp8", R"({"forward": "e2m1"})"), "e2m1 is not an FP8 element format"},
      {every_gemm("fp8", R"({"forward": "e9m9"})"), "unknown element format \"e9m9\""},
      {every_gemm("fp8", R"({"colour": 1})"), "\"recipe\": unknown key \"colour\""},
      {every_gemm("fp8", R"([1])"), "\"recipe\" must be an object"},
      {every_gemm("fp8", "", R"(, "rounding": "down")"),
       "\"rounding\" must be \"nearest\" or \"stochastic\""},
      {every_gemm("bf16", R"({"scaling": "current"})"),
       "\"recipe\" applies to GEMM operand formats"},
      {R"({"rules": [{"op": "Relu", "format": "fp8"}]})", "Relu is not one"},
      {R"({"rules": [{"name": "Relu*", "format": "fp8"}]})", "selects no GEMM"},
      {R"({"recipe": {"scaling": "current"}, "rules": [{"name": "*", "format": "bf16"}]})",
       "and no rule sets one"},
      {R"({"recipe": {"scaling": "mx"}, "rules": [{"name": "*", "format": "mxfp8"}]})",
       "scaling \"mx\" is the MX formats' own"},
      {every_gemm("fp6", ""), "is not a GEMM operand format campo computes in"},
  };
  for (const auto& [text, needle] : cases) {
    SCOPED_TRACE(text);
    const std::string policy = dir.write("bad.json", text);
    expect_error(run_cli({"plan", "--model", "lenet", "--batch", "4", "--precision", "amp",
                          "--precision-policy", policy}),
                 needle);
  }
}

// --device cuda (ops/quantized_gemm_route.h): a build with CUDA plans every per-tensor FP8
// GEMM, each as a cuBLASLt FP8 GEMM or emulated with the reason on its line (the MLP at batch
// 16: fc1 and fc2 have dimensions that are multiples of 16, fc3's 10 classes do not); a build
// without CUDA has no kernel there and refuses with one line. Planning builds the graphs only,
// so this runs without a GPU.
TEST(Fp8PolicyCliTest, CudaPlansFp8GemmsAsCublasLtOrEmulated) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("fp8", ""));
  const std::vector<std::string> args = {"plan",
                                         "--model",
                                         "mlp",
                                         "--batch",
                                         "16",
                                         "--device",
                                         "cuda",
                                         "--precision",
                                         "amp",
                                         "--all-nodes",
                                         "--precision-policy",
                                         policy};
  if (!has_quantized_gemm_kernel(Device::cuda)) {
    expect_error(run_cli(args), "FP8 and MX emulation runs on the CPU only");
    return;
  }
  const CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("; cuda: cuBLASLt FP8]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; cuda: emulated, M=16 N=10 K=128 (cuBLASLt FP8 needs positive "
                       "multiples of 16)]"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" as cuBLASLt FP8 GEMMs, "), std::string::npos) << r.out;
}

// MX formats have no CUDA kernel: one line, in a build with CUDA or without.
TEST(Fp8PolicyCliTest, CudaRefusesMxFormats) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", every_gemm("mxfp8", ""));
  expect_error(run_cli({"plan", "--model", "lenet", "--batch", "4", "--device", "cuda",
                        "--precision", "amp", "--precision-policy", policy}),
               has_quantized_gemm_kernel(Device::cuda)
                   ? "MX formats run on the CPU only"
                   : "FP8 and MX emulation runs on the CPU only");
}

}  // namespace
}  // namespace campo
