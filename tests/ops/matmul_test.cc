// MatMul: the oneDNN kernel against the naive reference (tests/reference/matmul.h) for all
// four transpose combinations, gradients against finite differences, shape errors.
#include "tests/reference/matmul.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::all_close;
using testing::check_gradients;
using testing::random_tensor;
using testing::run_op;

// oneDNN's GEMM sums the K products in blocks, in another order than the reference: the
// f32 error grows with K and the magnitude of the terms, not with |C|, so the table's
// 1.3e-6 / 1e-5 is loosened to 1e-5 / 1e-4 (K up to a few hundred, entries in [-1, 1]).
constexpr double kRtol = 1e-5, kAtol = 1e-4;

struct MatMulCase {
  int64_t M, K, N;
  bool transpose_a, transpose_b;
};

std::string case_name(const MatMulCase& c) {
  return std::to_string(c.M) + "x" + std::to_string(c.K) + "x" + std::to_string(c.N) +
         (c.transpose_a ? "_ta" : "") + (c.transpose_b ? "_tb" : "");
}

std::vector<MatMulCase> matmul_cases() {
  std::vector<MatMulCase> cases;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back({7, 5, 3, ta, tb});
      cases.push_back({1, 9, 1, ta, tb});
      cases.push_back({33, 257, 17, ta, tb});
    }
  return cases;
}

Tensor operand(int64_t rows, int64_t cols, bool transposed, Rng& rng) {
  return transposed ? random_tensor({cols, rows}, rng) : random_tensor({rows, cols}, rng);
}

class MatMulOpTest : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(MatMulOpTest, ForwardMatchesReference) {
  const MatMulCase& c = GetParam();
  Rng rng(1);
  Tensor a = operand(c.M, c.K, c.transpose_a, rng);
  Tensor b = operand(c.K, c.N, c.transpose_b, rng);
  std::vector<Tensor> out =
      run_op(OpKind::MatMul, MatMulAttrs{c.transpose_a, c.transpose_b}, {a, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (Shape{c.M, c.N}));
  EXPECT_TRUE(
      all_close(out[0], reference::matmul(a, b, c.transpose_a, c.transpose_b), kRtol, kAtol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatMulOpTest, ::testing::ValuesIn(matmul_cases()),
                         [](const auto& info) { return case_name(info.param); });

class MatMulGradTest : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(MatMulGradTest, MatchesFiniteDifferences) {
  const auto [ta, tb] = GetParam();
  Rng rng(2);
  Tensor a = operand(7, 5, ta, rng), b = operand(5, 3, tb, rng);
  EXPECT_TRUE(check_gradients(OpKind::MatMul, MatMulAttrs{ta, tb}, {a, b}));
}

INSTANTIATE_TEST_SUITE_P(Transposes, MatMulGradTest,
                         ::testing::Values(std::pair{false, false}, std::pair{true, false},
                                           std::pair{false, true}, std::pair{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.first ? "ta" : "a") +
                                  (info.param.second ? "_tb" : "_b");
                         });

template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected campo::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "message '" << msg << "' lacks '" << p << "'";
  }
}

TEST(MatMulShapeTest, InnerDimensionMismatch) {
  Rng rng(3);
  Tensor a = random_tensor({7, 5}, rng), b = random_tensor({4, 3}, rng);
  expect_error(
      [&] {
        run_op(OpKind::MatMul, MatMulAttrs{}, {a, b});
      },
      {"MatMul", "inner", "[7, 5]", "[4, 3]"});
  // Transposing a makes its inner dimension 7.
  Tensor b5 = random_tensor({5, 3}, rng);
  expect_error(
      [&] {
        run_op(OpKind::MatMul, MatMulAttrs{true, false}, {a, b5});
      },
      {"MatMul", "[7, 5] (transposed)", "[5, 3]"});
}

TEST(MatMulShapeTest, NotTwoDimensional) {
  Rng rng(4);
  Tensor a = random_tensor({2, 7, 5}, rng), b = random_tensor({5, 3}, rng);
  expect_error(
      [&] {
        run_op(OpKind::MatMul, MatMulAttrs{}, {a, b});
      },
      {"MatMul", "2-D", "[2, 7, 5]"});
}

}  // namespace
}  // namespace campo
