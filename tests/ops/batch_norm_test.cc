// FusedBatchNorm / FusedBatchNormGrad: forward and backward kernels against the naive
// reference, the running-statistics update against PyTorch's formula (by hand and through
// the executor), gradients against finite differences, and shape errors.
#include "tests/reference/batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "graph/builder.h"
#include "graph/executor.h"
#include "ops/kernel.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

struct BnInputs {
  Tensor x, scale, offset, running_mean, running_var;
  std::vector<Tensor> all() const { return {x, scale, offset, running_mean, running_var}; }
};

// x has a channel mean far from 0 so that a one-pass variance would cancel.
BnInputs random_bn_inputs(const Shape& x_shape, uint64_t seed) {
  Rng rng(seed);
  const int64_t c = x_shape[1];
  return {random_tensor(x_shape, rng, 2.0f, 5.0f), random_tensor({c}, rng, 0.5f, 1.5f),
          random_tensor({c}, rng, -0.5f, 0.5f), random_tensor({c}, rng, -1.0f, 1.0f),
          random_tensor({c}, rng, 0.5f, 2.0f)};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<TensorDesc> bn_output_descs(const Shape& x) {
  return {{x, DType::f32}, {{x[1]}, DType::f32}, {{x[1]}, DType::f32}};
}

const Tolerance kF32 = tolerance_for(DType::f32);

class BatchNormForward : public ::testing::TestWithParam<Shape> {};

TEST_P(BatchNormForward, TrainingMatchesReference) {
  const BnInputs in = random_bn_inputs(GetParam(), 1);
  BatchNormAttrs attrs{1e-5f, 0.1f, true};
  auto out = run_op(OpKind::FusedBatchNorm, attrs, in.all());
  auto ref = reference::batch_norm_forward(in.x, in.scale, in.offset, in.running_mean,
                                           in.running_var, attrs.epsilon, true);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(all_close(out[0], ref.y, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(out[1], ref.mean, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(out[2], ref.inv_std, kF32.rtol, kF32.atol));
}

TEST_P(BatchNormForward, InferenceUsesRunningStats) {
  const BnInputs in = random_bn_inputs(GetParam(), 2);
  BatchNormAttrs attrs{1e-3f, 0.1f, false};
  // run_op_eager hands our tensors to the kernel, so we see that nothing is written.
  ExecContext ctx;
  const Tensor rm = in.running_mean.clone(), rv = in.running_var.clone();
  auto out = run_op_eager(OpKind::FusedBatchNorm, attrs, DType::f32, in.all(),
                          bn_output_descs(in.x.shape()), ctx);
  auto ref = reference::batch_norm_forward(in.x, in.scale, in.offset, in.running_mean,
                                           in.running_var, attrs.epsilon, false);
  EXPECT_TRUE(all_close(out[0], ref.y, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(out[1], rm, 0, 0));  // outputs 1 and 2 report the running stats
  std::vector<float> inv_std;
  for (float v : rv.to_float_vector()) inv_std.push_back(float(1.0 / std::sqrt(v + 1e-3)));
  EXPECT_TRUE(all_close(out[2].to_float_vector(), inv_std, kF32.rtol, kF32.atol));
  EXPECT_TRUE(all_close(in.running_mean, rm, 0, 0));
  EXPECT_TRUE(all_close(in.running_var, rv, 0, 0));
}

TEST_P(BatchNormForward, BackwardMatchesReference) {
  const BnInputs in = random_bn_inputs(GetParam(), 3);
  Rng rng(4);
  const Tensor dy = random_tensor(in.x.shape(), rng);
  for (bool is_training : {true, false}) {
    SCOPED_TRACE(is_training ? "training" : "inference");
    BatchNormAttrs attrs{1e-5f, 0.1f, is_training};
    auto fwd = run_op(OpKind::FusedBatchNorm, attrs, in.all());
    auto out = run_op(OpKind::FusedBatchNormGrad, attrs, {dy, in.x, in.scale, fwd[1], fwd[2]});
    auto ref = reference::batch_norm_backward(dy, in.x, in.scale, fwd[1], fwd[2], is_training);
    ASSERT_EQ(out.size(), 3u);
    // dx subtracts per-channel means of dy from dy: the f32 sums over M values leave an
    // absolute error of a few ulp of |dy| ~ 1, hence atol 1e-5 and a looser rtol.
    EXPECT_TRUE(all_close(out[0], ref.dx, 1e-5, kF32.atol));
    // dscale, doffset are sums of M products: f32 lanes summed in double, rtol ~ M ulp.
    EXPECT_TRUE(all_close(out[1], ref.dscale, 1e-5, 1e-4));
    EXPECT_TRUE(all_close(out[2], ref.doffset, 1e-5, 1e-4));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormForward,
                         ::testing::Values(Shape{2, 3, 5, 7}, Shape{1, 4, 3, 3},
                                           Shape{3, 16, 14, 14}, Shape{8, 6}, Shape{5, 130},
                                           Shape{1, 5, 1, 2}, Shape{4, 8, 28, 28}));

// PyTorch: running = (1 - momentum) * running + momentum * batch, with the unbiased batch
// variance. One channel by hand, momentum 0.1, running stats start at (0, 1):
//   step 1, x = 1 2 3 4: mean 2.5, unbiased var 5/3
//     rm = 0.1 * 2.5 = 0.25,  rv = 0.9 * 1 + 0.1 * 5/3 = 1.0666667
//   step 2, x = 2 4 6 8: mean 5, unbiased var 20/3
//     rm = 0.9 * 0.25 + 0.1 * 5 = 0.725,  rv = 0.9 * 1.0666667 + 0.1 * 20/3 = 1.6266667
// The second channel is constant (var 0) and starts from (1, 2).
TEST(BatchNormRunningStats, OneAndTwoStepsMatchPyTorchFormula) {
  BatchNormAttrs attrs{1e-5f, 0.1f, true};
  using F = std::vector<float>;
  Tensor scale = Tensor::from_vector(F{1, 1}, {2}), offset = Tensor::from_vector(F{0, 0}, {2});
  Tensor rm = Tensor::from_vector(F{0, 1}, {2}), rv = Tensor::from_vector(F{1, 2}, {2});
  ExecContext ctx;
  // [N=4, C=2], row-major: channel 0 then channel 1 in each row.
  Tensor x1 = Tensor::from_vector(F{1, 3, 2, 3, 3, 3, 4, 3}, {4, 2});
  auto out1 = run_op_eager(OpKind::FusedBatchNorm, attrs, DType::f32, {x1, scale, offset, rm, rv},
                           bn_output_descs({4, 2}), ctx);
  EXPECT_TRUE(all_close(rm.to_float_vector(), {0.25f, 1.2f}, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(rv.to_float_vector(), {1.0666667f, 1.8f}, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(out1[1].to_float_vector(), {2.5f, 3.0f}, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(out1[2].to_float_vector(),
                        {float(1 / std::sqrt(1.25 + 1e-5)), float(1 / std::sqrt(1e-5))}, 1e-6, 0));
  Tensor x2 = Tensor::from_vector(F{2, 3, 4, 3, 6, 3, 8, 3}, {4, 2});
  run_op_eager(OpKind::FusedBatchNorm, attrs, DType::f32, {x2, scale, offset, rm, rv},
               bn_output_descs({4, 2}), ctx);
  EXPECT_TRUE(all_close(rm.to_float_vector(), {0.725f, 0.9f * 1.2f + 0.3f}, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(rv.to_float_vector(), {1.6266667f, 0.9f * 1.8f}, 1e-6, 1e-7));
}

// The same update through Builder + Executable on 4-D data: the running statistics are
// variables (buffers) that the node writes in place, two steps in a row.
TEST(BatchNormRunningStats, ExecutorUpdatesVariablesInPlace) {
  const Shape xs{3, 4, 5, 6};
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", xs);
  ValueId scale = b.variable("bn.weight", {4}, Init::ones());
  ValueId offset = b.variable("bn.bias", {4}, Init::zeros());
  ValueId rm = b.variable("bn.running_mean", {4}, Init::zeros(), VariableKind::buffer);
  ValueId rv = b.variable("bn.running_var", {4}, Init::ones(), VariableKind::buffer);
  const float momentum = 0.25f;
  ValueId y = b.batch_norm(x, scale, offset, rm, rv, 1e-5f, momentum);
  CompileOptions co;
  co.fetches = {y};
  Executable exe(g, vars, co);

  std::vector<double> expect_rm(4, 0.0), expect_rv(4, 1.0);
  Rng rng(7);
  for (int step = 0; step < 2; ++step) {
    Tensor xin = random_tensor(xs, rng, -2.0f, 3.0f);
    exe.input("x").copy_from(xin);
    exe.run();
    auto ref = reference::batch_norm_forward(xin, vars.at("bn.weight"), vars.at("bn.bias"),
                                             vars.at("bn.running_mean"), vars.at("bn.running_var"),
                                             1e-5, true);
    auto mean = ref.mean.to_float_vector(), var = ref.unbiased_var.to_float_vector();
    for (int c = 0; c < 4; ++c) {
      expect_rm[c] = (1 - momentum) * expect_rm[c] + momentum * mean[c];
      expect_rv[c] = (1 - momentum) * expect_rv[c] + momentum * var[c];
    }
    EXPECT_TRUE(all_close(exe.output(y), ref.y, kF32.rtol, kF32.atol)) << "step " << step;
    EXPECT_TRUE(all_close(vars.at("bn.running_mean").to_float_vector(),
                          std::vector<float>(expect_rm.begin(), expect_rm.end()), 1e-6, 1e-7))
        << "step " << step;
    EXPECT_TRUE(all_close(vars.at("bn.running_var").to_float_vector(),
                          std::vector<float>(expect_rv.begin(), expect_rv.end()), 1e-6, 1e-7))
        << "step " << step;
  }
}

// Loss only through y; the statistics depend on x, which the finite differences see.
TEST(BatchNormGradients, Training4D) {
  const BnInputs in = random_bn_inputs({2, 3, 3, 4}, 11);
  GradCheckOptions opts;
  opts.check_inputs = {0, 1, 2};
  opts.loss_outputs = {0};
  EXPECT_TRUE(
      check_gradients(OpKind::FusedBatchNorm, BatchNormAttrs{1e-5f, 0.1f, true}, in.all(), opts));
}

TEST(BatchNormGradients, Training2D) {
  const BnInputs in = random_bn_inputs({6, 5}, 12);
  GradCheckOptions opts;
  opts.check_inputs = {0, 1, 2};
  EXPECT_TRUE(
      check_gradients(OpKind::FusedBatchNorm, BatchNormAttrs{1e-5f, 0.1f, true}, in.all(), opts));
}

TEST(BatchNormGradients, InferenceTreatsStatsAsConstants) {
  const BnInputs in = random_bn_inputs({2, 3, 2, 3}, 13);
  GradCheckOptions opts;
  opts.check_inputs = {0, 1, 2};
  EXPECT_TRUE(
      check_gradients(OpKind::FusedBatchNorm, BatchNormAttrs{1e-5f, 0.1f, false}, in.all(), opts));
}

TEST(BatchNormSchema, StatisticsStayF32AndOpIsInferList) {
  const OpSchema& s = op_schema(OpKind::FusedBatchNorm);
  EXPECT_EQ(s.amp_list, AmpList::infer);
  EXPECT_EQ(s.fp32_inputs, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_TRUE(s.has_side_effects);
  const OpSchema& gs = op_schema(OpKind::FusedBatchNormGrad);
  EXPECT_EQ(gs.amp_list, AmpList::infer);
  EXPECT_EQ(gs.fp32_inputs, (std::vector<int>{2, 3, 4}));
}

TEST(BatchNormSchema, BadShapesThrowNamingTheOp) {
  BnInputs in = random_bn_inputs({2, 3, 4, 4}, 5);
  BatchNormAttrs attrs;
  Rng rng(1);

  BnInputs bad_scale = in;
  bad_scale.scale = random_tensor({4}, rng);
  std::string msg = error_of([&] { run_op(OpKind::FusedBatchNorm, attrs, bad_scale.all()); });
  EXPECT_NE(msg.find("FusedBatchNorm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("scale"), std::string::npos) << msg;

  BnInputs bad_var = in;
  bad_var.running_var = random_tensor({3, 1}, rng);
  msg = error_of([&] { run_op(OpKind::FusedBatchNorm, attrs, bad_var.all()); });
  EXPECT_NE(msg.find("running_var"), std::string::npos) << msg;

  BnInputs rank3 = in;
  rank3.x = random_tensor({2, 3, 4}, rng);
  msg = error_of([&] { run_op(OpKind::FusedBatchNorm, attrs, rank3.all()); });
  EXPECT_NE(msg.find("FusedBatchNorm"), std::string::npos) << msg;

  // One value per channel: no unbiased variance (PyTorch refuses too).
  BnInputs single = in;
  single.x = random_tensor({1, 3}, rng);
  msg = error_of([&] { run_op(OpKind::FusedBatchNorm, attrs, single.all()); });
  EXPECT_NE(msg.find("more than one value per channel"), std::string::npos) << msg;
  // ... which inference mode accepts.
  EXPECT_NO_THROW(run_op(OpKind::FusedBatchNorm, BatchNormAttrs{1e-5f, 0.1f, false}, single.all()));

  Tensor dy = random_tensor({2, 3, 4, 5}, rng);
  msg = error_of([&] {
    run_op(OpKind::FusedBatchNormGrad, attrs,
           {dy, in.x, in.scale, in.running_mean, in.running_var});
  });
  EXPECT_NE(msg.find("FusedBatchNormGrad"), std::string::npos) << msg;
}

}  // namespace
}  // namespace campo::testing
