// Mean / Sum and their gradient ops MeanGrad / BroadcastTo: CPU kernels against the naive
// references in tests/reference/elementwise.h over many axis sets (all, leading, trailing,
// middle, alternating, negative, size-1 dims, keep_dims), large reductions that take the
// multithreaded paths, empty inputs, gradients against finite differences, bad axes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/gradcheck.h"
#include "tests/reference/elementwise.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::error_message;

using testing::all_close;
using testing::check_gradients;
using testing::random_tensor;
using testing::run_op;

// Both sides sum in double and round once; only the summation order differs, so results
// agree to about one f32 ulp: the table's f32 tolerance applies.
const testing::Tolerance kF32 = testing::tolerance_for(DType::f32);

struct ReduceCase {
  Shape shape;
  std::vector<int> axes;
};

std::string case_name(const ReduceCase& c) {
  std::string name;
  for (int64_t d : c.shape) name += std::to_string(d) + "x";
  name += "axes";
  for (int a : c.axes) name += a < 0 ? "_m" + std::to_string(-a) : "_" + std::to_string(a);
  if (c.axes.empty()) name += "_all";
  return name;
}

std::vector<ReduceCase> reduce_cases() {
  return {
      {{2, 3, 4, 5}, {}},
      {{2, 3, 4, 5}, {0}},
      {{2, 3, 4, 5}, {1}},
      {{2, 3, 4, 5}, {3}},
      {{2, 3, 4, 5}, {-1}},
      {{2, 3, 4, 5}, {0, 2}},
      {{2, 3, 4, 5}, {1, 3}},
      {{2, 3, 4, 5}, {1, 2}},
      {{2, 3, 4, 5}, {0, 2, 3}},
      {{2, 3, 4, 5}, {3, 0, 1, 2}},
      {{2, 3, 4, 5}, {-3, -2}},
      {{3, 1, 4}, {1}},
      {{3, 1, 4}, {0, 2}},
      {{1, 7, 1}, {2}},
      {{7}, {0}},
      {{}, {}},
      {{5, 3}, {0}},
      {{5, 3}, {1}},
      // Large: multithreaded paths, long runs (> 16384), many short runs, column sums.
      {{4, 100003}, {1}},
      {{4, 100003}, {0}},
      {{400003}, {}},
      {{2, 3, 70001}, {0, 2}},
      {{70001, 3}, {0}},
      {{3000, 40}, {1}},
  };
}

class ReduceOpTest : public ::testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceOpTest, MeanAndSumMatchReference) {
  Rng rng(1);
  const ReduceCase& c = GetParam();
  Tensor x = random_tensor(c.shape, rng);
  for (bool keep_dims : {false, true}) {
    ReduceAttrs a{c.axes, keep_dims, {}};
    for (bool mean : {false, true}) {
      std::vector<Tensor> out = run_op(mean ? OpKind::Mean : OpKind::Sum, a, {x});
      Tensor expected = reference::reduce(x, c.axes, keep_dims, mean);
      EXPECT_EQ(out[0].dtype(), DType::f32);
      EXPECT_TRUE(all_close(out[0], expected, kF32.rtol, kF32.atol))
          << (mean ? "Mean" : "Sum") << (keep_dims ? " keep_dims" : "");
    }
  }
}

TEST_P(ReduceOpTest, MeanGradAndBroadcastToMatchReference) {
  Rng rng(2);
  const ReduceCase& c = GetParam();
  for (bool keep_dims : {false, true}) {
    ReduceAttrs a{c.axes, keep_dims, c.shape};
    Tensor dy = random_tensor(reference::reduce_shape(c.shape, c.axes, keep_dims), rng);
    for (bool mean : {false, true}) {
      std::vector<Tensor> out = run_op(mean ? OpKind::MeanGrad : OpKind::BroadcastTo, a, {dy});
      EXPECT_TRUE(all_close(out[0], reference::broadcast_back(dy, c.shape, c.axes, mean), kF32.rtol,
                            kF32.atol))
          << (mean ? "MeanGrad" : "BroadcastTo") << (keep_dims ? " keep_dims" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Axes, ReduceOpTest, ::testing::ValuesIn(reduce_cases()),
                         [](const auto& info) { return case_name(info.param); });

TEST(ReduceOpTest, LargeMeanDoesNotDrift) {
  // 2^22 copies of 0.1f: a float running sum would stall far below the true value
  // (float(0.1) * 2^22 = 419430.4); double accumulation keeps the mean at float(0.1).
  const int64_t n = int64_t(1) << 22;
  Tensor x = Tensor::empty({n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) x.data_as<float>()[i] = 0.1f;
  EXPECT_EQ(run_op(OpKind::Mean, ReduceAttrs{}, {x})[0].data_as<float>()[0], 0.1f);
  EXPECT_NEAR(run_op(OpKind::Sum, ReduceAttrs{}, {x})[0].data_as<float>()[0],
              double(0.1f) * double(n), 0.05);
}

TEST(ReduceOpTest, ResultDoesNotDependOnThreadCountOrRun) {
  Rng rng(3);
  Tensor x = random_tensor({3, 200001}, rng, -1e3f, 1e3f);
  std::vector<float> first =
      run_op(OpKind::Sum, ReduceAttrs{{1}, false, {}}, {x})[0].to_float_vector();
  std::vector<float> again =
      run_op(OpKind::Sum, ReduceAttrs{{1}, false, {}}, {x})[0].to_float_vector();
  EXPECT_EQ(first, again);
}

TEST(ReduceOpTest, EmptyInput) {
  Tensor x = Tensor::empty({0, 3}, DType::f32);
  EXPECT_EQ(run_op(OpKind::Sum, ReduceAttrs{{0}, false, {}}, {x})[0].to_float_vector(),
            (std::vector<float>{0, 0, 0}));
  std::vector<float> m =
      run_op(OpKind::Mean, ReduceAttrs{{0}, false, {}}, {x})[0].to_float_vector();
  ASSERT_EQ(m.size(), 3u);
  for (float v : m) EXPECT_TRUE(std::isnan(v)) << "the mean of nothing is 0/0";
  EXPECT_EQ(run_op(OpKind::Sum, ReduceAttrs{{1}, true, {}}, {x})[0].shape(), (Shape{0, 1}));
}

TEST(ReduceOpTest, OutputShapes) {
  Rng rng(4);
  Tensor x = random_tensor({2, 3, 4}, rng);
  EXPECT_EQ(run_op(OpKind::Sum, ReduceAttrs{}, {x})[0].shape(), Shape{});
  EXPECT_EQ(run_op(OpKind::Sum, ReduceAttrs{{}, true, {}}, {x})[0].shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(run_op(OpKind::Mean, ReduceAttrs{{-1, 0}, false, {}}, {x})[0].shape(), (Shape{3}));
  EXPECT_EQ(run_op(OpKind::Mean, ReduceAttrs{{1}, true, {}}, {x})[0].shape(), (Shape{2, 1, 4}));
}

TEST(ReduceOpTest, BadAxesAreRejected) {
  Rng rng(5);
  Tensor x = random_tensor({2, 3}, rng);
  std::string msg = error_message([&] { run_op(OpKind::Sum, ReduceAttrs{{2}, false, {}}, {x}); });
  EXPECT_NE(msg.find("axis 2 is out of range for a tensor of shape [2, 3]"), std::string::npos)
      << msg;
  msg = error_message([&] { run_op(OpKind::Mean, ReduceAttrs{{-3}, false, {}}, {x}); });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  msg = error_message([&] { run_op(OpKind::Mean, ReduceAttrs{{1, -1}, false, {}}, {x}); });
  EXPECT_NE(msg.find("listed twice"), std::string::npos) << msg;
  msg = error_message([&] {
    run_op(OpKind::MeanGrad, ReduceAttrs{{1}, false, {2, 3}}, {random_tensor({3}, rng)});
  });
  EXPECT_NE(msg.find("dY has shape [3] but reducing [2, 3] gives [2]"), std::string::npos) << msg;
  msg = error_message([&] {
    run_op(OpKind::Sum, ReduceAttrs{}, {Tensor::from_vector(std::vector<int32_t>{1, 2}, {2})});
  });
  EXPECT_NE(msg.find("floating point"), std::string::npos) << msg;
}

TEST(ReduceGradTest, MatchesFiniteDifferences) {
  Rng rng(6);
  Tensor x = random_tensor({2, 3, 4}, rng);
  for (const std::vector<int>& axes : {std::vector<int>{}, {0}, {1}, {2}, {0, 2}, {-1, 1}}) {
    for (bool keep_dims : {false, true}) {
      ReduceAttrs a{axes, keep_dims, {}};
      EXPECT_TRUE(check_gradients(OpKind::Mean, a, {x})) << "Mean " << case_name({{}, axes});
      EXPECT_TRUE(check_gradients(OpKind::Sum, a, {x})) << "Sum " << case_name({{}, axes});
    }
  }
}

}  // namespace
}  // namespace campo
