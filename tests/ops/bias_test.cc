// BiasAdd and BiasAddGrad against plain loops, gradients against finite differences,
// shape errors.
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

// Reference (the family is too small for its own header): x viewed as [N, C, S].
int64_t inner_size(const Shape& s) { return shape_numel(s) / (s[0] * s[1]); }

// y[n, c, s] = x[n, c, s] + bias[c]
Tensor reference_bias_add(const Tensor& x, const Tensor& bias) {
  Tensor y = x.clone();
  float* yp = y.data_as<float>();
  const float* bp = bias.data_as<float>();
  const int64_t N = x.dim(0), C = x.dim(1), S = inner_size(x.shape());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) yp[(n * C + c) * S + s] += bp[c];
  return y;
}

// dbias[c] = sum_{n, s} dy[n, c, s]
Tensor reference_bias_add_grad(const Tensor& dy) {
  const int64_t N = dy.dim(0), C = dy.dim(1), S = inner_size(dy.shape());
  const float* p = dy.data_as<float>();
  Tensor db = Tensor::empty({C}, DType::f32);
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) sum += p[(n * C + c) * S + s];
    db.data_as<float>()[c] = float(sum);
  }
  return db;
}

class BiasOpTest : public ::testing::TestWithParam<Shape> {};

TEST_P(BiasOpTest, BiasAddMatchesReference) {
  const Shape& s = GetParam();
  Rng rng(1);
  Tensor x = random_tensor(s, rng), bias = random_tensor({s[1]}, rng);
  std::vector<Tensor> y = run_op(OpKind::BiasAdd, NoAttrs{}, {x, bias});
  ASSERT_EQ(y.size(), 1u);
  // One f32 addition, the same one in both: exact.
  EXPECT_TRUE(all_close(y[0], reference_bias_add(x, bias), 0, 0));
}

TEST_P(BiasOpTest, BiasAddGradMatchesReference) {
  const Shape& s = GetParam();
  Rng rng(2);
  Tensor dy = random_tensor(s, rng);
  std::vector<Tensor> db = run_op(OpKind::BiasAddGrad, NoAttrs{}, {dy});
  ASSERT_EQ(db.size(), 1u);
  EXPECT_EQ(db[0].shape(), (Shape{s[1]}));
  // The kernel sums each [n, c] row in f32 before accumulating in double; rows here are at
  // most a few hundred values in [-1, 1], so the difference stays within ~1e-5 absolute.
  const auto tol = testing::tolerance_for(DType::f32);
  EXPECT_TRUE(all_close(db[0], reference_bias_add_grad(dy), tol.rtol, tol.atol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BiasOpTest,
                         ::testing::Values(Shape{3, 5}, Shape{1, 1}, Shape{2, 3, 4, 5},
                                           Shape{5, 7, 1, 1}, Shape{4, 16, 9, 9}, Shape{300, 20}),
                         [](const auto& info) {
                           std::string name = "s";
                           for (int64_t d : info.param) name += "_" + std::to_string(d);
                           return name;
                         });

TEST(BiasGradTest, TwoD) {
  Rng rng(3);
  EXPECT_TRUE(check_gradients(OpKind::BiasAdd, NoAttrs{},
                              {random_tensor({4, 3}, rng), random_tensor({3}, rng)}));
}

TEST(BiasGradTest, FourD) {
  Rng rng(4);
  EXPECT_TRUE(check_gradients(OpKind::BiasAdd, NoAttrs{},
                              {random_tensor({2, 3, 4, 5}, rng), random_tensor({3}, rng)}));
}

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

TEST(BiasShapeTest, BiasMustMatchChannels) {
  Rng rng(5);
  Tensor x = random_tensor({2, 3, 4, 4}, rng), bias = random_tensor({4}, rng);
  expect_error(
      [&] {
        run_op(OpKind::BiasAdd, NoAttrs{}, {x, bias});
      },
      {"BiasAdd", "[4]", "[2, 3, 4, 4]"});
  Tensor bias2 = random_tensor({3, 1}, rng);
  expect_error([&] { run_op(OpKind::BiasAdd, NoAttrs{}, {x, bias2}); }, {"BiasAdd", "[3, 1]"});
}

TEST(BiasShapeTest, NeedsChannelAxis) {
  Rng rng(6);
  Tensor x = random_tensor({5}, rng), bias = random_tensor({5}, rng);
  expect_error([&] { run_op(OpKind::BiasAdd, NoAttrs{}, {x, bias}); }, {"BiasAdd", "[5]"});
  expect_error([&] { run_op(OpKind::BiasAddGrad, NoAttrs{}, {x}); }, {"BiasAddGrad", "[5]"});
}

}  // namespace
}  // namespace campo
