// Precision policy files (--precision-policy, amp/precision_policy.h): the one-line error of
// every malformed file, the layers of LeNet's and ResNet-18's training graphs, how rules select
// and override, and the cost-aware search keeping the nodes rules pin (hand-written costs, as
// tests/amp/cost_aware_test.cc). Through the command line:
// tests/tools/precision_policy_cli_test.cc.
#include "amp/precision_policy.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "amp/cost_aware.h"
#include "amp/policy.h"
#include "amp/three_way.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "tests/error_of.h"
#include "tests/test_util.h"
#include "train/training_graph.h"

namespace campo {
namespace {

using testing::error_of;

void expect_one_line(const std::string& msg, const std::string& needle) {
  EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u) << msg;
}

void expect_refused(const std::string& text, const std::string& needle) {
  SCOPED_TRACE(text.substr(0, 200));
  const std::string msg = error_of([&] { parse_precision_policy(text, "p.json"); });
  expect_one_line(msg, needle);
  EXPECT_EQ(msg.rfind("precision policy file p.json", 0), 0u) << msg;
}

// A training graph before any policy (as apply_policy sees it).
struct TrainingGraph {
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
  explicit TrainingGraph(const std::string& model, int channels = 1, int size = 28) {
    TrainingGraphSpec spec;
    spec.model = model;
    spec.model_options.in_channels = channels;
    spec.model_options.image_size = size;
    spec.image_shape = {channels, size, size};
    spec.batch = 2;
    build_training_graph(g, vars, spec);
  }
  NodeId id(const std::string& name) const {
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (g.node(i).name == name) return i;
    ADD_FAILURE() << "no node " << name;
    return 0;
  }
};

TEST(PrecisionPolicyFileTest, WellFormedFileParses) {
  const PrecisionPolicy p = parse_precision_policy(R"({
    "description": "example",
    "rules": [
      {"name": "*", "format": "bf16"},
      {"op": ["Conv2D", "MatMul"], "name": ["conv*", "fc?.*"], "format": "fp16", "note": "n"},
      {"layers": {"first": 2, "last": 1}, "format": "fp32"},
      {"layers": {"last": 3}, "format": "float32"}
    ]})",
                                                   "p.json");
  EXPECT_EQ(p.description, "example");
  ASSERT_EQ(p.rules.size(), 4u);
  EXPECT_EQ(p.rules[0].index, 1);
  EXPECT_EQ(p.rules[0].format, DType::bf16);
  EXPECT_EQ(p.rules[1].ops, (std::vector<OpKind>{OpKind::Conv2D, OpKind::MatMul}));
  EXPECT_EQ(p.rules[1].names, (std::vector<std::string>{"conv*", "fc?.*"}));
  EXPECT_EQ(p.rules[1].format, DType::f16);
  EXPECT_EQ(p.rules[1].note, "n");
  EXPECT_EQ(p.rules[2].first_layers, 2);
  EXPECT_EQ(p.rules[2].last_layers, 1);
  EXPECT_EQ(p.rules[2].format, DType::f32);
  EXPECT_EQ(p.rules[3].last_layers, 3);
  EXPECT_TRUE(p.sets(DType::f16));
  EXPECT_EQ(p.rules[1].describe(), "op Conv2D,MatMul, name conv*,fc?.* -> f16");
  EXPECT_EQ(p.rules[2].describe(), "first 2 and last 1 layers -> f32");
  EXPECT_EQ(p.rules[3].describe(), "last 3 layers -> f32");
}

TEST(PrecisionPolicyFileTest, MalformedFilesAreOneLineErrors) {
  expect_refused("{", "is not valid JSON");
  expect_refused("[]", "must hold a JSON object");
  expect_refused("{}", "holds no rule");
  expect_refused(R"({"rules": []})", "holds no rule");
  expect_refused(R"({"rules": {}})", "\"rules\" must be an array of rules");
  expect_refused(R"({"rules": [], "rulez": 1})", "unknown key \"rulez\"");
  expect_refused(R"({"description": 3, "rules": []})", "\"description\" must be a string");
  expect_refused(R"({"rules": [{"op": "MatMul", "format": "f32"}], "rules": []})",
                 "the key \"rules\" appears twice");
  expect_refused(R"({"rules": [3]})", "rule 1 must be an object");
  expect_refused(R"({"rules": [{"op": "MatMul", "fromat": "f32"}]})", "unknown key \"fromat\"");
  expect_refused(R"({"rules": [{"format": "f32"}]})", "rule 1 selects nothing");
  expect_refused(R"({"rules": [{"op": "MatMul"}]})", "rule 1 sets no \"format\"");
  expect_refused(
      R"({"rules": [{"op": "MatMul", "format": "f32"}, {"op": "Nope", "format": "f32"}]})",
      "rule 2: unknown op 'Nope'");
  expect_refused(R"({"rules": [{"op": "", "format": "f32"}]})", "an empty op name");
  expect_refused(R"({"rules": [{"op": [], "format": "f32"}]})",
                 "\"op\" must be a string or a non-empty array of strings");
  expect_refused(R"({"rules": [{"op": [1], "format": "f32"}]})", "\"op\" holds 1, not a string");
  expect_refused(R"({"rules": [{"op": "ApplyMomentum", "format": "bf16"}]})",
                 "ApplyMomentum always runs in f32; a rule cannot set its format");
  expect_refused(R"({"rules": [{"op": "Cast", "format": "bf16"}]})", "Cast always runs in f32");
  expect_refused(R"({"rules": [{"name": "", "format": "f32"}]})", "an empty \"name\" glob");
  expect_refused(R"({"rules": [{"layers": 1, "format": "f32"}]})",
                 "\"layers\" must be an object like {\"first\": 1}");
  expect_refused(R"({"rules": [{"layers": {}, "format": "f32"}]})", "\"layers\" must be an object");
  expect_refused(R"({"rules": [{"layers": {"middle": 1}, "format": "f32"}]})",
                 "\"layers\" takes \"first\" and \"last\", not \"middle\"");
  for (const char* count : {"0", "-1", "1.5", "\"1\"", "true", "99999999999"})
    expect_refused(
        std::string(R"({"rules": [{"layers": {"first": )") + count + R"(}, "format": "f32"}]})",
        "\"first\" must be a positive whole number of layers");
  expect_refused(R"({"rules": [{"op": "MatMul", "format": 16}]})",
                 "\"format\" must be a string (f32, bf16, f16, or a GEMM operand format");
  expect_refused(R"({"rules": [{"op": "MatMul", "format": "f64"}]})",
                 "unknown format \"f64\" (expected f32, bf16, f16, or a GEMM operand format");
  expect_refused(R"({"rules": [{"op": "MatMul", "format": "i32"}]})", "unknown format \"i32\"");
  expect_refused(R"({"rules": [{"op": "MatMul", "format": "f32", "note": 1}]})",
                 "\"note\" must be a string");
}

// The GEMM operand formats parse into a quantized format with their element formats and
// default recipe; narrow formats named otherwise (element names alone, FP6/FP4 per tensor) are
// known by name and refused as formats campo does not compute in, never taken for unknown names.
TEST(PrecisionPolicyFileTest, GemmFormatsParseAndOtherNarrowFormatsAreRefused) {
  struct Case {
    const char* name;
    bool blocks;
    ElementFormat forward, gradient;
  };
  const Case formats[] = {{"fp8", false, ElementFormat::e4m3, ElementFormat::e5m2},
                          {"FP8_E4M3", false, ElementFormat::e4m3, ElementFormat::e4m3},
                          {"fp8_e5m2", false, ElementFormat::e5m2, ElementFormat::e5m2},
                          {"mxfp8", true, ElementFormat::e4m3, ElementFormat::e4m3},
                          {"mxfp8_e5m2", true, ElementFormat::e5m2, ElementFormat::e5m2},
                          {"mxfp6_e2m3", true, ElementFormat::e2m3, ElementFormat::e2m3},
                          {"mxfp6_e3m2", true, ElementFormat::e3m2, ElementFormat::e3m2},
                          {"mxfp4", true, ElementFormat::e2m1, ElementFormat::e2m1}};
  for (const Case& c : formats) {
    SCOPED_TRACE(c.name);
    const PrecisionPolicy p = parse_precision_policy(
        std::string(R"({"rules": [{"op": "MatMul", "format": ")") + c.name + "\"}]}", "p.json");
    const PrecisionRule& r = p.rules[0];
    EXPECT_TRUE(r.gemm.enabled);
    EXPECT_EQ(r.format, DType::f32);
    EXPECT_EQ(r.gemm.blocks, c.blocks);
    EXPECT_EQ(r.gemm.recipe.scaling, c.blocks ? Scaling::mx : Scaling::delayed);
    EXPECT_EQ(r.gemm.recipe.history, 1024);
    EXPECT_EQ(r.gemm.recipe.saturation, Saturation::saturating);
    EXPECT_EQ(r.forward_element, c.forward);
    EXPECT_EQ(r.gradient_element, c.gradient);
    EXPECT_TRUE(p.sets_gemm_format());
  }
  const std::pair<const char*, const char*> refused[] = {{"e5m2", "(FP8 E5M2)"},
                                                         {"float8_e4m3fn", "(FP8 E4M3)"},
                                                         {"mxfp6", "(MXFP6 blocks)"},
                                                         {"fp4_e2m1", "(FP4 E2M1)"}};
  for (const auto& [name, what] : refused)
    expect_refused(std::string(R"({"rules": [{"op": "MatMul", "format": ")") + name + "\"}]}",
                   std::string("format \"") + name + "\" " + what +
                       " is not a GEMM operand format campo computes in");
}

// The file's recipe is under each rule's; the rule's keys win, the others come through.
TEST(PrecisionPolicyFileTest, RecipesMergeFileThenRule) {
  const PrecisionPolicy p = parse_precision_policy(R"({
    "recipe": {"scaling": "delayed", "history": 16, "amax": "most_recent", "margin": 2},
    "rules": [{"op": "MatMul", "format": "fp8"},
              {"op": "Conv2D", "format": "fp8_e5m2", "rounding": "stochastic",
               "recipe": {"history": 4, "forward": "e4m3", "saturate": false}}]})",
                                                   "p.json");
  const ScalingRecipe& a = p.rules[0].gemm.recipe;
  EXPECT_EQ(a.history, 16);
  EXPECT_EQ(a.amax, AmaxReduction::most_recent);
  EXPECT_EQ(a.margin, 2);
  EXPECT_EQ(p.rules[0].gemm.rounding, Rounding::nearest_even);
  const PrecisionRule& b = p.rules[1];
  EXPECT_EQ(b.gemm.recipe.history, 4);
  EXPECT_EQ(b.gemm.recipe.margin, 2);
  EXPECT_EQ(b.gemm.recipe.saturation, Saturation::non_saturating);
  EXPECT_EQ(b.gemm.rounding, Rounding::stochastic);
  EXPECT_EQ(b.forward_element, ElementFormat::e4m3);
  EXPECT_EQ(b.gradient_element, ElementFormat::e5m2);
  EXPECT_EQ(b.describe(),
            "op Conv2D -> fp8_e5m2 (e4m3/e5m2, delayed (history 4, most_recent, margin 2), "
            "non-saturating, stochastic)");
}

TEST(PrecisionPolicyFileTest, FileErrorsNameTheFile) {
  testing::TempDir dir;
  expect_one_line(error_of([&] { read_precision_policy(dir.file("missing.json")); }),
                  "precision policy file " + dir.file("missing.json") + ": no such file");
  expect_one_line(error_of([&] { read_precision_policy(dir.str()); }), "precision policy file");
  const std::string path = dir.file("p.json");
  std::ofstream(path) << R"({"rules": [{"op": "MatMul", "format": "bf16"}]})";
  EXPECT_EQ(read_precision_policy(path).rules.size(), 1u);
  EXPECT_EQ(read_precision_policy(path).path, path);
}

// LeNet: conv1, conv2, fc1, fc2, fc3. Each layer holds its GEMM, what follows it up to the next
// layer, and their gradients; the loss is the last layer's; updates belong to none.
TEST(ModelLayersTest, LenetLayersAndTheirNodes) {
  TrainingGraph t("lenet");
  const ModelLayers l = model_layers(t.g);
  ASSERT_EQ(l.count(), 5);
  const char* gemms[] = {"conv1.Conv2D", "conv2.Conv2D", "fc1.MatMul", "fc2.MatMul", "fc3.MatMul"};
  for (int k = 0; k < 5; ++k) EXPECT_EQ(t.g.node(l.gemms[size_t(k)]).name, gemms[k]);
  auto layer = [&](const std::string& name) { return l.layer_of[size_t(t.id(name))]; };
  for (const char* n :
       {"conv1.Conv2D", "conv1.BiasAdd", "Relu", "MaxPool",
        "conv1.Conv2D_grad.Conv2DBackpropFilter", "conv1.Conv2D_grad.Conv2DBackpropInput",
        "conv1.BiasAdd_grad.BiasAddGrad", "Relu_grad.ReluGrad", "MaxPool_grad.MaxPoolGrad"})
    EXPECT_EQ(layer(n), 1) << n;
  for (const char* n : {"conv2.Conv2D", "MaxPool.1", "Reshape", "Reshape_grad.Reshape"})
    EXPECT_EQ(layer(n), 2) << n;
  for (const char* n : {"fc3.MatMul", "fc3.BiasAdd", "SparseSoftmaxCrossEntropyWithLogits", "Mean",
                        "Mean_grad.MeanGrad", "fc3.MatMul_grad.MatMul", "fc3.MatMul_grad.MatMul.1"})
    EXPECT_EQ(layer(n), 5) << n;
  for (NodeId i = 0; i < t.g.num_nodes(); ++i)
    if (!rule_may_set(t.g.node(i))) EXPECT_EQ(l.layer_of[size_t(i)], 0) << t.g.node(i).name;
}

// ResNet-18: the stem convolution, 16 block convolutions, 3 downsampling ones and fc. Every GEMM
// of the backward pass belongs to the layer of the GEMM it differentiates.
TEST(ModelLayersTest, ResNet18HasTwentyOneLayers) {
  TrainingGraph t("resnet18", 3, 32);
  const ModelLayers l = model_layers(t.g);
  ASSERT_EQ(l.count(), 21);
  EXPECT_EQ(t.g.node(l.gemms.front()).name, "conv1.Conv2D");
  EXPECT_EQ(t.g.node(l.gemms.back()).name, "fc.MatMul");
  EXPECT_EQ(l.layer_of[size_t(t.id("bn1.FusedBatchNorm"))], 1);
  const std::vector<NodeId> source = gradient_sources(t.g);
  for (NodeId i = 0; i < t.g.num_nodes(); ++i) {
    const Node& n = t.g.node(i);
    if (n.phase != Phase::backward) continue;
    if (n.kind == OpKind::Conv2DBackpropFilter || n.kind == OpKind::Conv2DBackpropInput ||
        n.kind == OpKind::MatMul) {
      ASSERT_GE(source[size_t(i)], 0) << n.name;
      EXPECT_EQ(l.layer_of[size_t(i)], l.layer_of[size_t(source[size_t(i)])]) << n.name;
      EXPECT_GT(l.layer_of[size_t(i)], 0) << n.name;
    }
  }
}

TEST(GradientSourcesTest, EveryGradientNodeMapsToItsForwardNode) {
  TrainingGraph t("lenet");
  const std::vector<NodeId> source = gradient_sources(t.g);
  EXPECT_EQ(source[size_t(t.id("conv1.Conv2D_grad.Conv2DBackpropFilter"))], t.id("conv1.Conv2D"));
  EXPECT_EQ(source[size_t(t.id("fc3.MatMul_grad.MatMul.1"))], t.id("fc3.MatMul"));
  EXPECT_EQ(source[size_t(t.id("conv1.Conv2D"))], -1);  // forward
  for (NodeId i = 0; i < t.g.num_nodes(); ++i)
    if (t.g.node(i).phase == Phase::backward)
      EXPECT_GE(source[size_t(i)], 0) << t.g.node(i).name;  // LeNet's has no unscaling
}

TEST(ResolvePolicyTest, LaterRulesOverrideEarlierOnes) {
  TrainingGraph t("lenet");
  const PrecisionPolicy p = parse_precision_policy(R"({"rules": [
      {"name": "*", "format": "bf16"},
      {"layers": {"first": 1, "last": 1}, "format": "f32"},
      {"op": "MatMul", "name": "fc3.*", "format": "f16"},
      {"op": ["Tanh", "Relu"], "layers": {"first": 1}, "format": "bf16"}]})",
                                                   "p.json");
  const PolicyAssignment a = resolve_precision_policy(t.g, p);
  EXPECT_EQ(a.layers, 5);
  auto rule = [&](const std::string& n) { return a.rule[size_t(t.id(n))]; };
  auto dtype = [&](const std::string& n) { return a.dtype[size_t(t.id(n))]; };
  EXPECT_EQ(rule("conv2.Conv2D"), 1);
  EXPECT_EQ(dtype("conv2.Conv2D"), DType::bf16);
  EXPECT_EQ(rule("conv1.Conv2D"), 2);
  EXPECT_EQ(dtype("conv1.Conv2D"), DType::f32);
  EXPECT_EQ(rule("fc3.BiasAdd"), 2);
  EXPECT_EQ(rule("fc3.MatMul"), 3);  // fc3.* holds its gradient MatMuls too
  EXPECT_EQ(dtype("fc3.MatMul"), DType::f16);
  EXPECT_EQ(rule("fc3.MatMul_grad.MatMul"), 3);
  EXPECT_EQ(rule("Relu"), 4);  // Tanh: none in LeNet, fine within a list
  EXPECT_EQ(dtype("Relu"), DType::bf16);
  EXPECT_EQ(rule("Relu.1"), 1);
  // Leaves and updates: never set.
  EXPECT_EQ(rule("conv1.weight"), 0);
  EXPECT_EQ(a.rule[size_t(t.g.nodes_of_kind(OpKind::ApplyMomentum)[0])], 0);
  int total = 0;
  for (int n : a.nodes_set) total += n;
  EXPECT_EQ(total, int(std::count_if(a.rule.begin(), a.rule.end(), [](int r) { return r > 0; })));
  EXPECT_EQ(a.nodes_set[3], 1);  // Relu
}

TEST(ResolvePolicyTest, RulesThatSelectNothingAreOneLineErrors) {
  TrainingGraph t("lenet");
  auto refused = [&](const std::string& rules, const std::string& needle) {
    const PrecisionPolicy p = parse_precision_policy(R"({"rules": [)" + rules + "]}", "p.json");
    expect_one_line(error_of([&] { resolve_precision_policy(t.g, p); }), needle);
  };
  refused(R"({"name": "layer9.*", "format": "f32"})",
          "rule 1 (name layer9.* -> f32): the glob \"layer9.*\" matches no node");
  refused(R"({"name": ["conv1.*", "typo*"], "format": "f32"})",
          "the glob \"typo*\" matches no node");
  refused(R"({"layers": {"first": 6}, "format": "f32"})",
          "\"layers\": {\"first\": 6} goes beyond the model's 5 layers");
  refused(R"({"layers": {"last": 9}, "format": "f32"})", "{\"last\": 9} goes beyond");
  refused(R"({"op": "Tanh", "format": "f32"})",
          "rule 1 (op Tanh -> f32) selects no node of the model's training graph (the model has "
          "none of these ops)");
  refused(R"({"op": "Conv2D", "name": "fc*", "format": "f32"})",
          "(its selectors match no node together)");
  // Leaves are never selected: a glob that only names variables matches nothing.
  refused(R"({"name": "conv1.weight", "format": "f32"})", "matches no node");
}

// The cost-aware search around pinned nodes: x -> MatMul(w) -> Sum, where low precision pays.
struct PinFixture {
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
  Builder b{g, vars};
  CostTable costs;
  NodeId matmul = 0, sum = 0;
  PinFixture() {
    ValueId x = b.placeholder("x", {4, 8});
    ValueId m = b.matmul(x, b.variable_exact("w", {8, 8}, Init::ones(), VariableKind::parameter));
    matmul = g.value(m).producer;
    sum = g.value(b.sum(m)).producer;
    costs.nodes.assign(size_t(g.num_nodes()), NodeCost{1.0, 1.0});
    costs.nodes[size_t(matmul)] = {1.0, 0.1};  // low saves 0.9 ms
    costs.cast = {0.01, 0.0};
  }
  CostAwarePlan plan(CostAwareSearch search, std::vector<int8_t> pins) const {
    CostAwareOptions o{search};
    o.pins = std::move(pins);
    return plan_cost_aware(g, AmpLists::defaults(Device::cpu, DType::bf16), costs, o);
  }
};

TEST(CostAwarePinsTest, PinnedNodesKeepTheirPrecision) {
  PinFixture f;
  for (CostAwareSearch search : {CostAwareSearch::traversals, CostAwareSearch::exact}) {
    SCOPED_TRACE(search_name(search));
    EXPECT_TRUE(f.plan(search, {}).low[size_t(f.matmul)]);  // the search's own choice
    std::vector<int8_t> pins(size_t(f.g.num_nodes()), kUnpinned);
    pins[size_t(f.matmul)] = kPinnedF32;
    CostAwarePlan p = f.plan(search, pins);
    EXPECT_FALSE(p.low[size_t(f.matmul)]);
    EXPECT_EQ(p.decided_by[size_t(f.matmul)], Traversal::rule);
    // A deny op (Sum) pinned low runs low, and its time and casts are priced so.
    pins[size_t(f.matmul)] = kUnpinned;
    pins[size_t(f.sum)] = kPinnedLow;
    p = f.plan(search, pins);
    EXPECT_TRUE(p.low[size_t(f.sum)]);
    EXPECT_TRUE(p.low[size_t(f.matmul)]);
    EXPECT_NEAR(p.predicted_ms, predict_step_ms(f.g, f.costs, p.low), 1e-12);
  }
}

// --low-precision auto: a node a rule sets keeps its type in the mixed plan and in the one-type
// plans beside it.
TEST(CostAwarePinsTest, AutoPlanKeepsARulesType) {
  TrainingGraph t("lenet");
  PrecisionConfig precision;
  precision.policy = Precision::cost_aware;
  precision.low_mode = LowPrecisionMode::automatic;
  CostTable bf16, f16;
  bf16.nodes.assign(size_t(t.g.num_nodes()), NodeCost{1.0, 0.5});  // bf16 wins everywhere
  f16.nodes.assign(size_t(t.g.num_nodes()), NodeCost{1.0, 0.9});
  bf16.cast = f16.cast = {0.001, 0.0};
  precision.f16_costs = std::make_shared<const CostTable>(f16);
  const PrecisionPolicy p = parse_precision_policy(
      R"({"rules": [{"name": "fc2.MatMul", "format": "f16"}, {"name": "conv1.Conv2D", "format": "f32"}]})",
      "p.json");
  const PolicyAssignment a = resolve_precision_policy(t.g, p);
  const AutoPlan plan = plan_automatic(t.g, precision, bf16, &a);
  EXPECT_EQ(plan.plan.dtype[size_t(t.id("fc2.MatMul"))], DType::f16);
  EXPECT_EQ(plan.plan.dtype[size_t(t.id("conv1.Conv2D"))], DType::f32);
  EXPECT_EQ(plan.plan.dtype[size_t(t.id("conv2.Conv2D"))], DType::bf16);
  EXPECT_EQ(plan.plan.decided_by[size_t(t.id("fc2.MatMul"))], Traversal::rule);
}

}  // namespace
}  // namespace campo
