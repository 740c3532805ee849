// Autodiff on small graphs with known structure.
#include "graph/autodiff.h"

#include <gtest/gtest.h>

#include <cmath>

#include "graph/executor.h"
#include "tests/test_util.h"

namespace campo {
namespace {

int count_kind(const Graph& g, OpKind k) { return int(g.nodes_of_kind(k).size()); }

TEST(AutodiffTest, FanOutSumsGradientsAndUnusedBranchesArePruned) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.variable_exact("x", {2, 3}, Init::uniform(-1, 1), VariableKind::parameter);
  ValueId unused_w = b.variable_exact("w", {2, 3}, Init::ones(), VariableKind::parameter);
  ValueId r = b.relu(x);
  ValueId t = b.tanh(x);
  ValueId s = b.sigmoid(x);  // not used by the loss: no SigmoidGrad may appear
  (void)s;
  ValueId loss = b.sum(b.add(r, t));
  ValueId seed = b.placeholder("seed", {});
  const int forward_nodes = g.num_nodes();
  auto grads = append_gradients(b, loss, seed, {x, unused_w});
  EXPECT_EQ(grads[1], kNoValue);
  ASSERT_NE(grads[0], kNoValue);
  EXPECT_EQ(count_kind(g, OpKind::SigmoidGrad), 0);
  EXPECT_EQ(count_kind(g, OpKind::ReluGrad), 1);
  EXPECT_EQ(count_kind(g, OpKind::TanhGrad), 1);
  // x has two consumers on the loss path: its gradient is one AddN of two terms.
  const Node& sum = g.node(g.value(grads[0]).producer);
  EXPECT_EQ(sum.kind, OpKind::AddN);
  EXPECT_EQ(sum.inputs.size(), 2u);
  for (NodeId id = forward_nodes; id < g.num_nodes(); ++id)
    EXPECT_EQ(g.node(id).phase, Phase::backward) << g.node(id).name;

  CompileOptions co;
  co.fetches = {loss, grads[0]};
  Executable exe(g, vars, co);
  exe.input("seed").data_as<float>()[0] = 1.0f;
  exe.run();
  std::vector<float> xv = vars.at("x").to_float_vector();
  std::vector<float> gv = exe.output(grads[0]).to_float_vector();
  for (size_t i = 0; i < xv.size(); ++i) {
    float th = std::tanh(xv[i]);
    float expected = (xv[i] > 0 ? 1.0f : 0.0f) + (1 - th * th);
    EXPECT_NEAR(gv[i], expected, 1e-5);
  }
  // The unused sigmoid is not computed either: dead-code elimination drops it.
  for (NodeId id : exe.schedule()) EXPECT_NE(g.node(id).kind, OpKind::Sigmoid);
}

TEST(AutodiffTest, SeedScalesEveryGradient) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.variable_exact("x", {4}, Init::uniform(-1, 1), VariableKind::parameter);
  ValueId loss = b.sum(b.mul(x, x));
  ValueId seed = b.placeholder("seed", {});
  auto grads = append_gradients(b, loss, seed, {x});
  CompileOptions co;
  co.fetches = {grads[0]};
  Executable exe(g, vars, co);
  exe.input("seed").data_as<float>()[0] = 8.0f;
  exe.run();
  std::vector<float> xv = vars.at("x").to_float_vector();
  std::vector<float> gv = exe.output(grads[0]).to_float_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(gv[i], 8.0f * 2.0f * xv[i], 1e-5);
}

TEST(AutodiffTest, SeedShapeMustMatchLoss) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.variable_exact("x", {4}, Init::ones(), VariableKind::parameter);
  ValueId loss = b.sum(x);
  ValueId seed = b.placeholder("seed", {4});
  EXPECT_THROW(append_gradients(b, loss, seed, {x}), Error);
}

TEST(GraphTest, DumpsTextAndDot) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3});
  b.relu(x);
  std::string text = g.to_text();
  EXPECT_NE(text.find("Relu<f32>"), std::string::npos) << text;
  EXPECT_NE(text.find("[2, 3]"), std::string::npos) << text;
  std::string dot = g.to_dot();
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("n0 -> n1"), std::string::npos) << dot;
}

TEST(GraphTest, WrongInputCountIsAClearError) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3});
  try {
    b.op(OpKind::Relu, {x, x});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Relu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("takes 1 inputs"), std::string::npos) << e.what();
  }
}

TEST(GraphTest, MissingKernelNamesOpDeviceAndDtype) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3}, DType::i32);
  NodeId id = g.add_node(OpKind::Relu, {x}, NoAttrs{}, "relu_i32", DType::i32);
  (void)id;
  CompileOptions co;
  co.fetches = {g.node(g.find_node("relu_i32")).outputs[0]};
  try {
    Executable exe(g, vars, co);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("Relu"), std::string::npos) << m;
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("i32"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace campo
