// Const: a filled f32 tensor computed in the step, and a weight in a loss sum that scales
// the gradients flowing through it.
#include <gtest/gtest.h>

#include "graph/autodiff.h"
#include "graph/executor.h"
#include "tests/test_util.h"

namespace campo {
namespace {

TEST(ConstOpTest, FillsItsShapeAndScalesGradients) {
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  Builder b(g, vars);
  ValueId filled = b.constant(1.5f, {2, 3});
  ValueId w = b.variable("w", {3}, Init::constant(2.0f));
  ValueId x = b.placeholder("x", {3});
  // loss = 0.25 * sum(w * x): d loss / d w = 0.25 x.
  ValueId weight = b.constant(0.25f);
  ValueId loss = b.mul(b.sum(b.mul(w, x)), weight);
  ValueId seed = b.placeholder("seed", {});
  const std::vector<ValueId> grads = append_gradients(b, loss, seed, {w});
  EXPECT_EQ(g.value(weight).shape, Shape({}));
  EXPECT_NE(g.to_text().find("Const<f32>() value=0.25"), std::string::npos) << g.to_text();
  CompileOptions co;
  co.fetches = {filled, loss, grads[0]};
  Executable exe(g, vars, co);
  exe.feed("x", Tensor::from_vector(std::vector<float>{1, 2, 4}, {3}));
  exe.feed_scalar("seed", 1.0f);
  exe.run();
  EXPECT_EQ(exe.fetch(filled).to_float_vector(), std::vector<float>(6, 1.5f));
  EXPECT_FLOAT_EQ(exe.fetch_scalar(loss), 0.25f * 2 * (1 + 2 + 4));
  EXPECT_EQ(exe.fetch(grads[0]).to_float_vector(), (std::vector<float>{0.25f, 0.5f, 1.0f}));
}

}  // namespace
}  // namespace campo
