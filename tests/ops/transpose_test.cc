// Transpose (ops/transpose.cc, ops/cpu/transpose.cc): shape inference and its one-line
// errors (a perm of the wrong length, out of range, or naming a dim twice), the kernel
// against the naive reference (tests/reference/transpose.h) bit for bit for BERT's
// {0, 2, 1, 3}, perms that move the last axis, size-1 dims, mergeable dims, the identity,
// ranks 0 to 5, sizes for the multithreaded path, bf16 / f16 / i32 data; gradients against
// finite differences (the inverse perm), the builder and the graph dump.
#include "tests/reference/transpose.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/builder.h"
#include "ops/op.h"
#include "tests/gradcheck.h"
#include "tests/ops/low_precision_util.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

using testing::all_close;
using testing::check_gradients;
using testing::random_tensor;
using testing::run_op;

// Bytes of two tensors of one shape and type are equal.
::testing::AssertionResult same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure()
           << shape_str(a.shape()) << " " << dtype_name(a.dtype()) << " vs " << shape_str(b.shape())
           << " " << dtype_name(b.dtype());
  if (std::memcmp(a.data(), b.data(), a.nbytes()) != 0)
    return ::testing::AssertionFailure() << "the bytes differ";
  return ::testing::AssertionSuccess();
}

struct TransposeCase {
  std::string name;
  Shape shape;
  std::vector<int> perm;
};

std::ostream& operator<<(std::ostream& os, const TransposeCase& c) { return os << c.name; }

class TransposeValues : public ::testing::TestWithParam<TransposeCase> {};

TEST_P(TransposeValues, MatchReferenceInEveryType) {
  const TransposeCase& c = GetParam();
  Rng rng(1);
  const Tensor x = random_tensor(c.shape, rng);
  const TransposeAttrs a{c.perm};
  const Tensor y = run_op(OpKind::Transpose, a, {x})[0];
  EXPECT_TRUE(same_bytes(y, reference::transpose(x, c.perm)));
  // bf16 and f16 nodes: the same move of 2-byte elements.
  for (DType low : {DType::bf16, DType::f16}) {
    const Tensor xl = testing::as_dtype(x, low);
    const Tensor yl = run_op(OpKind::Transpose, a, {xl}, low)[0];
    EXPECT_EQ(yl.dtype(), low);
    EXPECT_TRUE(same_bytes(yl, reference::transpose(xl, c.perm))) << dtype_name(low);
  }
  // i32 data (an f32 node): keeps its type.
  std::vector<int32_t> ints(size_t(x.numel()));
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = int32_t(i * 7 + 1);
  const Tensor xi = Tensor::from_vector(ints, c.shape);
  const Tensor yi = run_op(OpKind::Transpose, a, {xi})[0];
  EXPECT_EQ(yi.dtype(), DType::i32);
  EXPECT_TRUE(same_bytes(yi, reference::transpose(xi, c.perm)));
}

INSTANTIATE_TEST_SUITE_P(
    Perms, TransposeValues,
    ::testing::Values(
        // BERT: [B, T, heads, d] <-> [B, heads, T, d]; the last axis stays (row copies).
        TransposeCase{"bert_heads", {2, 5, 3, 8}, {0, 2, 1, 3}},
        // Above the parallel threshold (256 KiB of f32): B = 4, T = 64, 4 heads, d = 64.
        TransposeCase{"bert_heads_parallel", {4, 64, 4, 64}, {0, 2, 1, 3}},
        // The last axis moves (strided gathers).
        TransposeCase{"matrix", {7, 5}, {1, 0}},
        TransposeCase{"last_two", {2, 3, 4, 5}, {0, 1, 3, 2}},
        TransposeCase{"rotate", {3, 4, 7}, {2, 0, 1}},
        TransposeCase{"reverse5", {2, 3, 1, 4, 2}, {4, 3, 2, 1, 0}},
        TransposeCase{"last_moves_parallel", {64, 40, 33}, {2, 1, 0}},
        // Size-1 dims in between, before and after; mergeable runs of dims.
        TransposeCase{"unit_dims", {1, 5, 1, 3, 1}, {3, 0, 4, 1, 2}},
        TransposeCase{"unit_between_merged", {4, 1, 3, 6}, {3, 0, 1, 2}},
        TransposeCase{"merged_front", {2, 3, 4, 5}, {2, 3, 0, 1}},
        // Nothing moves in memory.
        TransposeCase{"identity", {3, 4, 5}, {0, 1, 2}},
        TransposeCase{"only_unit_moves", {3, 1, 5}, {1, 0, 2}}, TransposeCase{"rank1", {9}, {0}},
        TransposeCase{"scalar", {}, {}}, TransposeCase{"empty", {2, 0, 3}, {2, 1, 0}}),
    [](const auto& info) { return info.param.name; });

TEST(TransposeOpTest, BadPermsAreOneLineErrors) {
  Rng rng(2);
  const Tensor x = random_tensor({2, 3, 4}, rng);
  std::string msg = error_message([&] { run_op(OpKind::Transpose, TransposeAttrs{{0, 1}}, {x}); });
  EXPECT_TRUE(contains(msg, "Transpose")) << msg;
  EXPECT_TRUE(contains(msg, "perm [0, 1] has 2 entries but input 0 of shape [2, 3, 4] has rank 3"))
      << msg;
  msg = error_message([&] { run_op(OpKind::Transpose, TransposeAttrs{{0, 3, 1}}, {x}); });
  EXPECT_TRUE(contains(msg, "perm [0, 3, 1] has entry 3 at 1, out of range 0 .. 2")) << msg;
  msg = error_message([&] { run_op(OpKind::Transpose, TransposeAttrs{{0, -1, 1}}, {x}); });
  EXPECT_TRUE(contains(msg, "has entry -1 at 1")) << msg;
  msg = error_message([&] { run_op(OpKind::Transpose, TransposeAttrs{{1, 0, 1}}, {x}); });
  EXPECT_TRUE(contains(msg, "perm [1, 0, 1] names dim 1 twice")) << msg;
}

// ---- gradients ----

TEST(TransposeGradTest, MatchesFiniteDifferences) {
  Rng rng(3);
  EXPECT_TRUE(check_gradients(OpKind::Transpose, TransposeAttrs{{0, 2, 1, 3}},
                              {random_tensor({2, 3, 2, 4}, rng)}));
  EXPECT_TRUE(check_gradients(OpKind::Transpose, TransposeAttrs{{2, 0, 1}},
                              {random_tensor({3, 4, 2}, rng)}));
  EXPECT_TRUE(
      check_gradients(OpKind::Transpose, TransposeAttrs{{1, 0}}, {random_tensor({5, 3}, rng)}));
}

// dx = Transpose(dy, inverse perm): for {2, 0, 1} the inverse is {1, 2, 0}.
TEST(TransposeGradTest, IsTheTransposeByTheInversePerm) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.variable_exact("x", {3, 4, 2}, Init::uniform(-1, 1), VariableKind::parameter);
  const ValueId y = b.transpose(x, {2, 0, 1});
  EXPECT_EQ(g.value(y).shape, (Shape{2, 3, 4}));
  const ValueId loss = b.sum(b.mul(y, y));
  const std::vector<ValueId> grads = append_gradients(b, loss, b.placeholder("seed", {}), {x});
  ASSERT_EQ(g.nodes_of_kind(OpKind::Transpose).size(), 2u);
  const Node& back = g.node(g.value(grads[0]).producer);
  EXPECT_EQ(back.kind, OpKind::Transpose);
  EXPECT_EQ(attrs_as<TransposeAttrs>(back.attrs).perm, (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(g.value(grads[0]).shape, (Shape{3, 4, 2}));
}

// ---- builder, graph dump, lists ----

TEST(TransposeBuilderTest, EmitsTheNodeAndDumpsItsPerm) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {2, 8, 4, 16});
  const ValueId y = b.transpose(x, {0, 2, 1, 3});
  EXPECT_EQ(g.value(y).shape, (Shape{2, 4, 8, 16}));
  EXPECT_TRUE(contains(g.to_text(), "Transpose<f32>(v0) perm=[0, 2, 1, 3] -> v1:f32[2, 4, 8, 16]"))
      << g.to_text();
  const std::string msg = error_message([&] { b.transpose(x, {0, 1, 2}); });
  EXPECT_TRUE(contains(msg, "perm [0, 1, 2] has 3 entries")) << msg;
  EXPECT_EQ(parse_op_kind("Transpose"), OpKind::Transpose);
  EXPECT_EQ(op_schema(OpKind::Transpose).amp_list, AmpList::clear);
}

}  // namespace
}  // namespace campo
