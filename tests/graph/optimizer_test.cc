// append_optimizer (graph/optimizer.h): a model array's sliced updates, "lr" of shape
// [slices] and the per-slice attributes, their checks, and one step through the executor.
#include "graph/optimizer.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/executor.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::all_close;
using testing::error_message;

// A graph with parameter "w" of `shape` (all ones) and a gradient placeholder "grad".
struct OneParameter {
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
  Builder b{g, vars};
  ValueId grad;
  explicit OneParameter(const Shape& shape) {
    b.variable_exact("w", shape, Init::constant(1.0f), VariableKind::parameter);
    grad = b.placeholder("grad", shape);
  }
  void append(const OptimizerConfig& config) { append_optimizer(b, {"w"}, {grad}, config); }
  const Node& update(OpKind kind) const {
    return g.node(g.find_node(std::string("w/") + op_name(kind)));
  }
};

TEST(AppendOptimizerTest, SlicesMakeLrPerSliceAndFillTheAttrs) {
  OneParameter sgd({4, 3});
  OptimizerConfig c;
  c.slices = 3;
  c.slice_momentum = {0.9f, 0.5f, 0.0f};
  c.slice_weight_decay = {0.0f, 1e-2f, 1e-3f};
  sgd.append(c);
  EXPECT_EQ(sgd.g.value(sgd.g.node(sgd.g.find_node("lr")).outputs[0]).shape, Shape{3});
  const auto& m = attrs_as<MomentumAttrs>(sgd.update(OpKind::ApplyMomentum).attrs);
  EXPECT_EQ(m.slice_momentum, c.slice_momentum);
  EXPECT_EQ(m.slice_weight_decay, c.slice_weight_decay);

  OneParameter adam({12});
  c.kind = OptimizerConfig::Kind::adam;
  c.slice_momentum.clear();
  adam.append(c);
  EXPECT_EQ(adam.g.value(adam.g.node(adam.g.find_node("lr")).outputs[0]).shape, Shape{3});
  EXPECT_EQ(adam.g.value(adam.g.node(adam.g.find_node("step")).outputs[0]).shape, Shape{});
  EXPECT_EQ(attrs_as<AdamAttrs>(adam.update(OpKind::ApplyAdam).attrs).slice_weight_decay,
            c.slice_weight_decay);

  // One slice: lr stays a scalar, the vectors empty.
  OneParameter plain({12});
  plain.append(OptimizerConfig{});
  EXPECT_EQ(plain.g.value(plain.g.node(plain.g.find_node("lr")).outputs[0]).shape, Shape{});
  EXPECT_TRUE(
      attrs_as<MomentumAttrs>(plain.update(OpKind::ApplyMomentum).attrs).slice_momentum.empty());
}

TEST(AppendOptimizerTest, SlicedStepUpdatesEachSliceWithItsLr) {
  // momentum 0, no weight decay: w = 1 - lr[s] * grad in slice s.
  OneParameter p({6});
  OptimizerConfig c;
  c.momentum = 0.0f;
  c.slices = 3;
  p.append(c);
  Executable exe(p.g, p.vars, CompileOptions{});
  exe.input("grad").copy_from(Tensor::from_vector(std::vector<float>(6, 1.0f), {6}));
  exe.input("lr").copy_from(Tensor::from_vector(std::vector<float>{0.5f, 0.25f, 0.125f}, {3}));
  exe.run();
  EXPECT_TRUE(all_close(p.vars.at("w").to_float_vector(),
                        {0.5f, 0.5f, 0.75f, 0.75f, 0.875f, 0.875f}, 0, 0));
}

TEST(AppendOptimizerTest, SliceErrorsNameTheField) {
  OptimizerConfig c;
  c.slices = 3;
  c.slice_weight_decay = {0.1f, 0.2f};
  std::string msg = error_message([&] { OneParameter({6}).append(c); });
  EXPECT_NE(msg.find("slice_weight_decay has 2 values for 3 slices"), std::string::npos) << msg;

  c.slice_weight_decay.clear();
  c.slice_momentum = {0.1f};
  msg = error_message([&] { OneParameter({6}).append(c); });
  EXPECT_NE(msg.find("slice_momentum has 1 values for 3 slices"), std::string::npos) << msg;

  c.slice_momentum = {0.1f, 0.2f, 0.3f};
  c.kind = OptimizerConfig::Kind::adam;
  msg = error_message([&] { OneParameter({6}).append(c); });
  EXPECT_NE(msg.find("slice_momentum applies to sgd only"), std::string::npos) << msg;

  c = OptimizerConfig{};
  c.slices = 3;
  msg = error_message([&] { OneParameter({7}).append(c); });
  EXPECT_NE(msg.find("parameter 'w' of shape [7] cannot be cut into 3 equal slices"),
            std::string::npos)
      << msg;

  c.slices = 0;
  msg = error_message([&] { OneParameter({6}).append(c); });
  EXPECT_NE(msg.find("slices must be >= 1, got 0"), std::string::npos) << msg;

  // An "lr" already in the graph must have the slices' shape.
  c.slices = 3;
  msg = error_message([&] {
    OneParameter p({6});
    p.b.placeholder("lr", {});
    p.append(c);
  });
  EXPECT_NE(msg.find("the graph's \"lr\" has shape [] but 3 slices need [3]"), std::string::npos)
      << msg;
}

// ---- multi-tensor updates (OptimizerConfig::multi_tensor) ----

// Four parameters of different sizes (one above the CPU kernel's parallel threshold), each
// with a gradient placeholder; optionally the AllFinite flag as a placeholder "finite" and
// bf16 weight copies of `copied` parameters (Node::weight_copy, add_weight_copies). Runs
// `steps` steps of random gradients (the flag at 0 on step 2: a skipped update) and returns
// every variable, state and copy by name, and the graph's update nodes.
struct MultiTensorRun {
  std::map<std::string, std::vector<float>> values;
  int updates = 0;
};
MultiTensorRun run_updates(OptimizerConfig c, bool with_flag,
                           const std::vector<std::string>& copied, int steps = 4) {
  const std::vector<std::pair<std::string, Shape>> params = {
      {"a", {3, 5}}, {"b", {6}}, {"c", {96, 400}}, {"d", {3}}};
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
  Builder b{g, vars};
  std::vector<std::string> names;
  std::vector<ValueId> grads;
  for (const auto& [name, shape] : params) {
    b.variable_exact(name, shape, Init::uniform(-1.0f, 1.0f), VariableKind::parameter);
    names.push_back(name);
    grads.push_back(b.placeholder(name + ".grad", shape));
  }
  const ValueId finite = with_flag ? b.placeholder("finite", {}) : kNoValue;
  append_optimizer(b, names, grads, c, finite);
  std::vector<std::pair<ValueId, ValueId>> var_copies;
  std::map<std::string, ValueId> copies;
  for (const std::string& name : copied) {
    const ValueId var = g.node(g.find_node(name)).outputs[0];
    const NodeId cast = g.add_node(OpKind::Cast, {var}, CastAttrs{DType::bf16}, name + "/Cast",
                                   DType::f32, Phase::forward);
    g.node(cast).weight_copy = true;
    var_copies.emplace_back(var, g.node(cast).outputs[0]);
    copies[name] = g.node(cast).outputs[0];
  }
  add_weight_copies(g, var_copies);
  Executable exe(g, vars, CompileOptions{});
  Rng rng(7);
  const Shape lr_shape = c.slices > 1 ? Shape{c.slices} : Shape{};
  for (int step = 1; step <= steps; ++step) {
    for (const auto& [name, shape] : params) {
      std::vector<float> grad(size_t(shape_numel(shape)));
      for (float& x : grad) x = rng.normal();
      exe.feed(name + ".grad", Tensor::from_vector(grad, shape));
    }
    std::vector<float> lr(size_t(c.slices));
    for (size_t s = 0; s < lr.size(); ++s) lr[s] = 0.01f * float(s + 1);
    exe.feed("lr", Tensor::from_vector(lr, lr_shape));
    if (c.kind == OptimizerConfig::Kind::adam) exe.feed_scalar("step", float(step));
    if (with_flag) exe.feed_scalar("finite", step == 2 ? 0.0f : 1.0f);
    exe.run();
  }
  MultiTensorRun r;
  for (const std::string& name : vars.names()) r.values[name] = vars.at(name).to_float_vector();
  for (const auto& [name, v] : copies) r.values[name + "/copy"] = exe.buffer(v).to_float_vector();
  r.updates = int(g.nodes_of_kind(OpKind::ApplyMomentum).size() +
                  g.nodes_of_kind(OpKind::ApplyAdam).size());
  return r;
}

// The same configuration with one update node and with one per parameter: every variable,
// state and copy bit for bit equal.
void expect_multi_tensor_matches_separate(OptimizerConfig c, bool with_flag,
                                          const std::vector<std::string>& copied,
                                          int multi_updates) {
  c.multi_tensor = true;
  const MultiTensorRun multi = run_updates(c, with_flag, copied);
  c.multi_tensor = false;
  const MultiTensorRun separate = run_updates(c, with_flag, copied);
  EXPECT_EQ(multi.updates, multi_updates);
  EXPECT_EQ(separate.updates, 4);
  ASSERT_EQ(multi.values.size(), separate.values.size());
  for (const auto& [name, values] : separate.values) {
    ASSERT_TRUE(multi.values.count(name)) << name;
    EXPECT_EQ(multi.values.at(name), values) << name;  // exact: the same bits
  }
  // The steps did update: var a moved from where a run without steps leaves it.
  EXPECT_NE(run_updates(c, with_flag, copied, 0).values.at("a"), separate.values.at("a"));
}

TEST(MultiTensorUpdateTest, MomentumMatchesSeparateUpdates) {
  OptimizerConfig c;
  expect_multi_tensor_matches_separate(c, false, {}, 1);
  c.nesterov = true;
  c.weight_decay = 1e-2f;
  expect_multi_tensor_matches_separate(c, true, {}, 1);
}

TEST(MultiTensorUpdateTest, AdamMatchesSeparateUpdates) {
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::adam;
  expect_multi_tensor_matches_separate(c, false, {}, 1);
  c.weight_decay = 1e-2f;
  expect_multi_tensor_matches_separate(c, true, {}, 1);
}

TEST(MultiTensorUpdateTest, SlicesMatchSeparateUpdates) {
  OptimizerConfig c;
  c.slices = 3;
  c.slice_momentum = {0.9f, 0.5f, 0.0f};
  c.slice_weight_decay = {0.0f, 1e-2f, 1e-3f};
  expect_multi_tensor_matches_separate(c, true, {}, 1);
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::adam;
  adam.slices = 3;
  adam.slice_weight_decay = {0.0f, 1e-2f, 1e-3f};
  expect_multi_tensor_matches_separate(adam, false, {}, 1);
}

// Weight copies for some variables split the group: those with a copy in a node of their
// own (with the copies), the others in the first; copies for all keep one node.
TEST(MultiTensorUpdateTest, WeightCopiesSplitTheGroup) {
  OptimizerConfig c;
  expect_multi_tensor_matches_separate(c, true, {"a", "c"}, 2);
  c.kind = OptimizerConfig::Kind::adam;
  expect_multi_tensor_matches_separate(c, false, {"a", "b", "c", "d"}, 1);
}

TEST(MultiTensorUpdateTest, OneNodeNamesAllItsVariables) {
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
  Builder b{g, vars};
  std::vector<ValueId> grads;
  for (const char* name : {"w1", "w2"}) {
    b.variable_exact(name, {4}, Init::zeros(), VariableKind::parameter);
    grads.push_back(b.placeholder(std::string(name) + ".grad", {4}));
  }
  append_optimizer(b, {"w1", "w2"}, grads, OptimizerConfig{});
  const std::vector<NodeId> updates = g.nodes_of_kind(OpKind::ApplyMomentum);
  ASSERT_EQ(updates.size(), 1u);
  const Node& n = g.node(updates[0]);
  EXPECT_EQ(n.name, "optimizer/ApplyMomentum");
  EXPECT_EQ(attrs_as<MomentumAttrs>(n.attrs).tensors, 2);
  // var_1, var_2, accum_1, accum_2, grad_1, grad_2, lr.
  ASSERT_EQ(n.inputs.size(), 7u);
  EXPECT_EQ(g.node(g.value(n.inputs[1]).producer).name, "w2");
  EXPECT_EQ(g.node(g.value(n.inputs[2]).producer).name, "w1.momentum_buffer");
  EXPECT_EQ(g.node(g.value(n.inputs[5]).producer).name, "w2.grad");
  for (const char* name : {"w1", "w2"})
    EXPECT_EQ(optimizer_update_of(g, g.node(g.find_node(name)).outputs[0]), updates[0]) << name;
}

}  // namespace
}  // namespace campo
