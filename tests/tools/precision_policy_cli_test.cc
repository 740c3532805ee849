// --precision-policy through the command a user runs (amp/precision_policy.h, docs/
// mixed-precision.md): a ResNet-18 policy that keeps the first and last layers in f32 and the
// rest in bf16 trains and plans with each node's rule shown; cost-aware keeps the pins and
// searches the rest; and every bad file or misuse is one error line before any work.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::CliResult;
using testing::expect_error;
using testing::json_event;
using testing::run_cli;

// The policy of the issue: ResNet-18's first and last layers in f32, everything else bf16.
constexpr const char* kFirstLastF32 = R"({
  "description": "first and last layers f32, the rest bf16",
  "rules": [
    {"name": "*", "format": "bf16", "note": "everything low"},
    {"layers": {"first": 1, "last": 1}, "format": "f32", "note": "stem and classifier"}
  ]
})";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// The plan's nodes by name.
std::map<std::string, nlohmann::json> plan_nodes(const nlohmann::json& plan) {
  std::map<std::string, nlohmann::json> nodes;
  for (const auto& n : plan["graphs"][0]["nodes"]) nodes[n["name"]] = n;
  return nodes;
}

const std::vector<std::string> kResnet18 = {"--model",    "resnet18", "--image-size", "32",
                                            "--channels", "3",        "--batch",      "4"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrecisionPolicyCliTest, ResNet18FirstAndLastLayersF32TrainsAndPlanShowsTheRules) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", kFirstLastF32);
  const CliResult t =
      run_cli(with(with({"train", "--dataset", "synthetic"}, kResnet18),
                   {"--steps", "3", "--limit-train", "32", "--limit-test", "8", "--progress",
                    "none", "--precision", "amp", "--precision-policy", policy}));
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("precision policy " + policy + ": 2 rules"), std::string::npos) << t.out;
  const nlohmann::json result = json_event(t.out);
  EXPECT_EQ(result.value("precision_policy", ""), policy);
  EXPECT_TRUE(std::isfinite(result.value("final_loss", NAN))) << t.out;

  const std::string json = dir.file("plan.json");
  const CliResult p =
      run_cli(with(with({"plan"}, kResnet18),
                   {"--precision", "amp", "--precision-policy", policy, "--json", json}));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("set by"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("rule 2: stem and classifier"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("rule 1: everything low"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find(": 21 layers"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("rule 2: first 1 and last 1 layers -> f32 (stem and classifier): sets"),
            std::string::npos)
      << p.out;
  const nlohmann::json plan = read_json(json);
  auto nodes = plan_nodes(plan);
  // The first layer (stem conv, its batch norm, its gradients) and the last (fc, the loss) f32.
  for (const char* name : {"conv1.Conv2D", "bn1.FusedBatchNorm", "fc.MatMul",
                           "conv1.Conv2D_grad.Conv2DBackpropFilter", "fc.MatMul_grad.MatMul"}) {
    ASSERT_TRUE(nodes.count(name)) << name;
    EXPECT_EQ(nodes[name]["dtype"], "f32") << name;
    EXPECT_EQ(nodes[name]["rule"], 2) << name;
    EXPECT_EQ(nodes[name]["set_by"], "rule 2") << name;
  }
  // The rest bf16 by rule 1, deny-list ops included.
  for (const char* name :
       {"layer1.0.conv1.Conv2D", "layer4.1.conv2.Conv2D", "layer2.0.downsample.0.Conv2D",
        "layer3.0.bn1.FusedBatchNorm", "layer4.1.conv2.Conv2D_grad.Conv2DBackpropFilter"}) {
    ASSERT_TRUE(nodes.count(name)) << name;
    EXPECT_EQ(nodes[name]["dtype"], "bf16") << name;
    EXPECT_EQ(nodes[name]["rule"], 1) << name;
  }
  // Where f32 meets bf16 the plan counts the casts: the stem's output is cast to bf16.
  EXPECT_GE(nodes["layer1.0.conv1.Conv2D"]["casts_in"].get<int>(), 1);
  const nlohmann::json& rules = plan["graphs"][0]["precision_policy"];
  EXPECT_EQ(rules["layers"], 21);
  ASSERT_EQ(rules["rules"].size(), 2u);
  EXPECT_EQ(rules["rules"][1]["format"], "f32");
  EXPECT_GT(rules["rules"][0]["nodes"].get<int>(), 100);
  EXPECT_GT(rules["rules"][1]["nodes"].get<int>(), 5);
}

// cost-aware: the rules' nodes are constraints; the search decides the rest.
TEST(PrecisionPolicyCliTest, CostAwareKeepsThePinsAndSearchesTheRest) {
  testing::TempDir dir;
  const std::string policy = dir.write("pins.json", R"({"rules": [
      {"layers": {"first": 1, "last": 1}, "format": "f32"},
      {"op": "Mean", "format": "bf16", "note": "a deny op, pinned low"}]})");
  const std::string json = dir.file("plan.json");
  const CliResult p =
      run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "cost-aware",
               "--calibration", "none", "--precision-policy", policy, "--json", json});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("amp and fp32 with the policy's rules"), std::string::npos) << p.out;
  auto nodes = plan_nodes(read_json(json));
  int pinned = 0, searched = 0;
  for (const auto& [name, n] : nodes) {
    if (n["rule"].is_null()) {
      if (n["set_by"] == "search") ++searched;
      continue;
    }
    ++pinned;
    EXPECT_EQ(n["decided_by"], "rule") << name;
    EXPECT_EQ(n["dtype"], n["rule"] == 1 ? "f32" : "bf16") << name;
  }
  EXPECT_EQ(nodes["Mean"]["dtype"], "bf16");
  EXPECT_EQ(nodes["conv1.Conv2D"]["dtype"], "f32");
  EXPECT_GT(pinned, 10);
  EXPECT_GT(searched, 10);
  // Trains with the guard, whose fp32 and amp plans keep the rules too.
  const CliResult t = run_cli({"train",      "--model",       "lenet", "--dataset",
                               "synthetic",  "--steps",       "3",     "--batch",
                               "8",          "--limit-train", "64",    "--limit-test",
                               "16",         "--progress",    "none",  "--precision",
                               "cost-aware", "--calibration", "none",  "--precision-policy",
                               policy});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("fp32 and amp with the --precision-policy rules"), std::string::npos)
      << t.out;
  EXPECT_TRUE(std::isfinite(json_event(t.out).value("final_loss", NAN))) << t.out;
}

// --low-precision auto: a rule may set f16 beside the search's bf16, and turns loss scaling on.
TEST(PrecisionPolicyCliTest, AutoTakesAnF16Rule) {
  testing::TempDir dir;
  const std::string policy =
      dir.write("f16.json", R"({"rules": [{"name": "fc2.*", "format": "f16"}]})");
  const std::string json = dir.file("plan.json");
  const CliResult p = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision",
                               "cost-aware", "--low-precision", "auto", "--calibration", "none",
                               "--precision-policy", policy, "--json", json});
  ASSERT_EQ(p.code, 0) << p.err;
  auto nodes = plan_nodes(read_json(json));
  EXPECT_EQ(nodes["fc2.MatMul"]["dtype"], "f16");
  EXPECT_EQ(nodes["fc2.BiasAdd"]["dtype"], "f16");
  EXPECT_NE(p.out.find("dynamic loss scaling on"), std::string::npos) << p.out;
  // amp paints bf16 and takes the rule's f16 over it.
  const CliResult a = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "amp",
                               "--precision-policy", policy, "--json", json});
  ASSERT_EQ(a.code, 0) << a.err;
  nodes = plan_nodes(read_json(json));
  EXPECT_EQ(nodes["fc2.MatMul"]["dtype"], "f16");
  EXPECT_EQ(nodes["fc1.MatMul"]["dtype"], "bf16");
  EXPECT_EQ(nodes["fc1.MatMul"]["set_by"], "lists");
}

// A model array's graph holds each layer once for all its models: the rules apply alike.
TEST(PrecisionPolicyCliTest, ModelArraysTakeAPolicy) {
  testing::TempDir dir;
  const std::string policy = dir.write("policy.json", kFirstLastF32);
  const CliResult t = run_cli({"train",     "--model",      "lenet", "--dataset",
                               "synthetic", "--array",      "2",     "--steps",
                               "2",         "--batch",      "8",     "--limit-train",
                               "32",        "--limit-test", "8",     "--progress",
                               "none",      "--precision",  "amp",   "--precision-policy",
                               policy});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("precision policy " + policy), std::string::npos) << t.out;
}

// Every error: one line, a non-zero exit, before a calibration, the profiling step or a step.
TEST(PrecisionPolicyCliTest, EveryErrorIsOneLineBeforeAnyWork) {
  testing::TempDir dir;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"rules": [{"op": "Tanhh", "format": "f32"}]})", "rule 1: unknown op 'Tanhh'"},
      {R"({"rules": [{"name": "layer9.*", "format": "f32"}]})",
       "the glob \"layer9.*\" matches no node"},
      {R"({"rules": [{"layers": {"last": 6}, "format": "f32"}]})",
       "\"layers\": {\"last\": 6} goes beyond the model's 5 layers"},
      {R"({"rules": [{"op": "MatMul", "format": "e4m3"}]})",
       "format \"e4m3\" (FP8 E4M3) is not a GEMM operand format campo computes in"},
      {R"({"rules": [{"op": "MatMul", "format": "fp4"}]})", "(FP4) is not a GEMM operand format"},
      {R"({"rules": [{"op": "MatMul", "format": "f64"}]})", "unknown format \"f64\""},
      {R"({"rules": [{"op": "MatMul", "format": "f32",]})", "is not valid JSON"},
      {R"({"rules": [{"op": "MatMul", "format": "f32", "pin": true}]})", "unknown key \"pin\""},
      {R"({"rules": [{"op": "MatMul", "format": "f32"}], "version": 2})",
       "unknown key \"version\""},
      {R"({"rules": [{"op": "Tanh", "format": "f32"}]})",
       "rule 1 (op Tanh -> f32) selects no node"},
  };
  int n = 0;
  for (const auto& [text, needle] : cases) {
    const std::string path = dir.write("p" + std::to_string(n++) + ".json", text);
    const std::vector<std::vector<std::string>> commands = {
        {"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "1", "--batch", "8",
         "--progress", "none", "--precision", "cost-aware", "--precision-policy", path},
        {"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "1", "--batch", "8",
         "--progress", "none", "--precision", "amp", "--precision-policy", path},
        {"plan", "--model", "lenet", "--precision", "cost-aware", "--precision-policy", path},
        {"bench", "--model", "lenet", "--precision", "fp32,amp", "--steps", "1",
         "--precision-policy", path}};
    for (const auto& command : commands) {
      std::string line;
      for (const std::string& a : command) line += a + " ";
      SCOPED_TRACE(line + ": " + text);
      const CliResult r = run_cli(command);
      expect_error(r, needle);
      // Nothing ran: no calibration looked for, no profiling, no guard, no training banner.
      for (const char* work : {"calibration", "guard", "campo: training", "samples/s"})
        EXPECT_EQ((r.out + r.err).find(work), std::string::npos) << work << ": " << r.out << r.err;
    }
  }
  const std::string ok = dir.write("ok.json", R"({"rules": [{"op": "MatMul", "format": "f16"}]})");
  expect_error(
      run_cli({"plan", "--model", "lenet", "--precision", "fp32", "--precision-policy", ok}),
      "--precision-policy has no effect with --precision fp32");
  expect_error(run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "1",
                        "--precision", "fp32", "--precision-policy", ok}),
               "--precision-policy has no effect with --precision fp32");
  expect_error(run_cli({"bench", "--model", "lenet", "--precision", "fp32", "--steps", "1",
                        "--precision-policy", ok}),
               "--precision-policy has no effect with --precision fp32");
  expect_error(run_cli({"plan", "--model", "lenet", "--precision", "cost-aware", "--low-precision",
                        "bf16", "--precision-policy", ok}),
               "rule 1 (op MatMul -> f16): cost-aware with --low-precision bf16 chooses between "
               "f32 and bf16 only");
  expect_error(run_cli({"plan", "--model", "dcgan", "--image-size", "32", "--precision", "amp",
                        "--precision-policy", ok}),
               "--precision-policy does not support dcgan yet");
  expect_error(run_cli({"plan", "--model", "lenet", "--precision", "amp", "--precision-policy",
                        dir.file("missing.json")}),
               "precision policy file " + dir.file("missing.json") + ": no such file");
  expect_error(
      run_cli({"plan", "--model", "lenet", "--precision", "amp", "--precision-policy", dir.str()}),
      "precision policy file " + dir.str());
}

}  // namespace
}  // namespace campo
