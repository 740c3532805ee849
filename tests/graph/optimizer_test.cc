// append_optimizer (graph/optimizer.h): a model array's sliced updates, "lr" of shape
// [slices] and the per-slice attributes, their checks, and one step through the executor.
#include "graph/optimizer.h"

#include <gtest/gtest.h>

#include <string>
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

}  // namespace
}  // namespace campo
