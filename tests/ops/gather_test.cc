// GatherV2 and UnsortedSegmentSum (ops/gather.cc, ops/cpu/gather.cc): shape inference and its
// one-line errors, CPU kernels against the naive references in tests/reference/gather.h
// (repeated indices, rank-2 indices, segments no id points to, sizes for the multithreaded
// path), bf16 / f16 against f32, the run-time index checks, gradients against finite
// differences, the builder, and a small embedding classifier training through autodiff in
// f32 and under the amp policy.
#include "tests/reference/gather.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
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

Tensor ints(const std::vector<int32_t>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

// `count` ids uniform in [0, limit), shaped `shape`.
Tensor random_ids(const Shape& shape, int32_t limit, Rng& rng) {
  std::vector<int32_t> v(size_t(shape_numel(shape)));
  for (auto& x : v) x = int32_t(rng.below(uint64_t(limit)));
  return Tensor::from_vector(v, shape);
}

// The same values, exactly representable in `low` (still f32).
Tensor rounded(const Tensor& t, DType low) {
  return Tensor::from_vector(testing::as_dtype(t, low).to_float_vector(), t.shape());
}

const GatherAttrs kAxis0{0};
UnsortedSegmentSumAttrs segments(int64_t n) { return UnsortedSegmentSumAttrs{n}; }

// ---- shape inference ----

TEST(GatherOpTest, OutputIsIndicesShapeThenRowShape) {
  Rng rng(1);
  const Tensor table = random_tensor({5, 3}, rng);
  EXPECT_EQ(
      run_op(OpKind::GatherV2, kAxis0, {table, ints({0, 1, 2, 3, 4, 0, 1, 2}, {2, 4})})[0].shape(),
      (Shape{2, 4, 3}));
  EXPECT_EQ(run_op(OpKind::GatherV2, kAxis0, {table, ints({4}, {})})[0].shape(), (Shape{3}));
  EXPECT_EQ(run_op(OpKind::GatherV2, kAxis0, {random_tensor({5, 2, 3}, rng), ints({1, 1}, {2})})[0]
                .shape(),
            (Shape{2, 2, 3}));
  EXPECT_EQ(
      run_op(OpKind::GatherV2, kAxis0, {random_tensor({5}, rng), ints({1, 2, 3}, {3})})[0].shape(),
      (Shape{3}));
}

TEST(GatherOpTest, SchemaErrorsAreOneLine) {
  Rng rng(2);
  const Tensor table = random_tensor({5, 3}, rng);
  const Tensor ids = ints({0, 1}, {2});
  std::string msg = error_message([&] { run_op(OpKind::GatherV2, GatherAttrs{1}, {table, ids}); });
  EXPECT_TRUE(contains(msg, "GatherV2 'op': axis 1 is not supported (only axis 0")) << msg;
  msg = error_message([&] { run_op(OpKind::GatherV2, kAxis0, {table, random_tensor({2}, rng)}); });
  EXPECT_TRUE(contains(msg, "indices must be i32, got f32")) << msg;
  msg = error_message([&] { run_op(OpKind::GatherV2, kAxis0, {ints({1, 2}, {2}), ids}); });
  EXPECT_TRUE(contains(msg, "params must be floating point (f32, bf16 or f16), got i32")) << msg;
  msg = error_message([&] { run_op(OpKind::GatherV2, kAxis0, {random_tensor({}, rng), ids}); });
  EXPECT_TRUE(contains(msg, "params is a scalar")) << msg;
}

TEST(UnsortedSegmentSumOpTest, OutputIsNumSegmentsThenRowShape) {
  Rng rng(3);
  EXPECT_EQ(run_op(OpKind::UnsortedSegmentSum, segments(7),
                   {random_tensor({2, 3, 4}, rng), random_ids({2, 3}, 7, rng)})[0]
                .shape(),
            (Shape{7, 4}));
  EXPECT_EQ(run_op(OpKind::UnsortedSegmentSum, segments(7),
                   {random_tensor({2, 3, 4}, rng), random_ids({2}, 7, rng)})[0]
                .shape(),
            (Shape{7, 3, 4}));
  EXPECT_EQ(run_op(OpKind::UnsortedSegmentSum, segments(4),
                   {random_tensor({6}, rng), random_ids({6}, 4, rng)})[0]
                .shape(),
            (Shape{4}));
}

TEST(UnsortedSegmentSumOpTest, SchemaErrorsAreOneLine) {
  Rng rng(4);
  const Tensor data = random_tensor({2, 3, 4}, rng);
  std::string msg = error_message([&] {
    run_op(OpKind::UnsortedSegmentSum, segments(5), {data, random_ids({3, 2}, 5, rng)});
  });
  EXPECT_TRUE(contains(msg,
                       "segment_ids of shape [3, 2] must have the leading dims of data of "
                       "shape [2, 3, 4]"))
      << msg;
  msg = error_message([&] {
    run_op(OpKind::UnsortedSegmentSum, segments(5), {data, random_ids({2, 3, 4, 1}, 5, rng)});
  });
  EXPECT_TRUE(contains(msg, "must have the leading dims of data")) << msg;
  msg = error_message([&] {
    run_op(OpKind::UnsortedSegmentSum, segments(-1), {data, random_ids({2}, 5, rng)});
  });
  EXPECT_TRUE(contains(msg, "num_segments is -1 (must be >= 0)")) << msg;
  msg = error_message([&] {
    run_op(OpKind::UnsortedSegmentSum, segments(5), {data, random_tensor({2}, rng)});
  });
  EXPECT_TRUE(contains(msg, "segment_ids must be i32, got f32")) << msg;
}

// ---- forward values ----

struct GatherCase {
  std::string name;
  Shape params;
  Shape indices;
};

std::ostream& operator<<(std::ostream& os, const GatherCase& c) { return os << c.name; }

class GatherValues : public ::testing::TestWithParam<GatherCase> {};

// GatherV2 copies rows: bit for bit in every dtype. UnsortedSegmentSum of the gathered rows
// back by the same indices matches its reference: each row times how often it was read.
TEST_P(GatherValues, MatchReference) {
  const GatherCase& c = GetParam();
  Rng rng(5);
  const Tensor table = random_tensor(c.params, rng);
  const int32_t rows = int32_t(c.params[0]);
  // Every second index repeats an earlier one.
  Tensor ids = random_ids(c.indices, rows, rng);
  for (int64_t i = 2; i < ids.numel(); i += 2)
    ids.data_as<int32_t>()[i] = ids.data_as<int32_t>()[i / 2];
  const Tensor y = run_op(OpKind::GatherV2, kAxis0, {table, ids})[0];
  EXPECT_TRUE(all_close(y, reference::gather(table, ids), 0, 0));

  const Tensor dy = random_tensor(y.shape(), rng);
  const Tensor sums = run_op(OpKind::UnsortedSegmentSum, segments(rows), {dy, ids})[0];
  const Tensor expected = reference::unsorted_segment_sum(dy, ids, rows);
  // f32 sums in row order against the double reference: a few ulp of the largest partial sum.
  EXPECT_TRUE(all_close(sums, expected, 1e-5, 1e-5));

  for (DType low : {DType::bf16, DType::f16}) {
    const Tensor low_y =
        run_op(OpKind::GatherV2, kAxis0, {testing::as_dtype(table, low), ids}, low)[0];
    EXPECT_EQ(low_y.dtype(), low);
    EXPECT_TRUE(all_close(low_y, reference::gather(rounded(table, low), ids), 0, 0))
        << dtype_name(low);
    // Summed in f32 and rounded once: within the dtype's tolerance of the exact sum of the
    // rounded inputs.
    const Tensor low_sums = run_op(OpKind::UnsortedSegmentSum, segments(rows),
                                   {testing::as_dtype(dy, low), ids}, low)[0];
    EXPECT_EQ(low_sums.dtype(), low);
    const testing::Tolerance tol = testing::tolerance_for(low);
    EXPECT_TRUE(all_close(low_sums, reference::unsorted_segment_sum(rounded(dy, low), ids, rows),
                          tol.rtol, 1e-3))
        << dtype_name(low);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GatherValues,
                         ::testing::Values(GatherCase{"rank1_indices", {10, 4}, {6}},
                                           GatherCase{"rank2_indices", {7, 3}, {2, 5}},
                                           GatherCase{"rows_of_rank2", {6, 2, 3}, {4}},
                                           GatherCase{"one_column", {9}, {3, 3}},
                                           // Above the kernels' 256 KiB parallel threshold; rows
                                           // wider than the segment sum's 1024-column block.
                                           GatherCase{"parallel_embedding", {300, 200}, {8, 64}},
                                           GatherCase{"parallel_wide_rows", {50, 1500}, {2, 40}}),
                         [](const auto& info) { return info.param.name; });

// A segment no id points to is zeros; an id may point past the largest one used.
TEST(UnsortedSegmentSumOpTest, SegmentsWithoutIdsAreZero) {
  const Tensor data = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  const Tensor ids = ints({3, 0, 3, 3}, {4});
  const Tensor y = run_op(OpKind::UnsortedSegmentSum, segments(6), {data, ids})[0];
  EXPECT_TRUE(all_close(y.to_float_vector(), {3, 4, 0, 0, 0, 0, 13, 16, 0, 0, 0, 0}, 0, 0));
}

// Deterministic: each output element is the f32 sum of its rows in ascending row order, bit
// for bit, also where threads split the segments (the parallel size).
TEST(UnsortedSegmentSumOpTest, SumsInAscendingRowOrderBitForBit) {
  Rng rng(6);
  const int64_t n = 4096, D = 96, S = 40;
  const Tensor data = random_tensor({n, D}, rng, -10, 10);
  const Tensor ids = random_ids({n}, int32_t(S), rng);
  const Tensor y = run_op(OpKind::UnsortedSegmentSum, segments(S), {data, ids})[0];
  std::vector<float> expected(size_t(S * D), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d)
      expected[size_t(ids.data_as<int32_t>()[i] * D + d)] += data.data_as<float>()[i * D + d];
  EXPECT_TRUE(all_close(y.to_float_vector(), expected, 0, 0));
  const Tensor again = run_op(OpKind::UnsortedSegmentSum, segments(S), {data, ids})[0];
  EXPECT_TRUE(all_close(again, y, 0, 0));
}

// ---- run-time index checks ----

TEST(GatherOpTest, IndexOutsideTheTableNamesOpIndexAndV) {
  Rng rng(7);
  const Tensor table = random_tensor({5, 3}, rng);
  std::string msg = error_message([&] {
    run_op(OpKind::GatherV2, kAxis0, {table, ints({0, 1, 2, 7}, {2, 2})});
  });
  EXPECT_TRUE(contains(msg, "GatherV2 '")) << msg;
  EXPECT_TRUE(contains(msg, "index 7 at position [1, 1] is outside [0, 5) (params has V = 5)"))
      << msg;
  msg = error_message([&] { run_op(OpKind::GatherV2, kAxis0, {table, ints({-1, 0}, {2})}); });
  EXPECT_TRUE(contains(msg, "index -1 at position [0] is outside [0, 5)")) << msg;
  msg = error_message([&] {
    run_op(OpKind::GatherV2, kAxis0, {testing::as_dtype(table, DType::bf16), ints({5}, {1})},
           DType::bf16);
  });
  EXPECT_TRUE(contains(msg, "index 5 at position [0] is outside [0, 5)")) << msg;
}

TEST(UnsortedSegmentSumOpTest, IdOutsideTheSegmentsIsAnError) {
  Rng rng(8);
  const Tensor data = random_tensor({3, 2}, rng);
  std::string msg = error_message([&] {
    run_op(OpKind::UnsortedSegmentSum, segments(4), {data, ints({0, 4, 1}, {3})});
  });
  EXPECT_TRUE(contains(msg, "UnsortedSegmentSum '")) << msg;
  EXPECT_TRUE(contains(msg, "segment id 4 at position [1] is outside [0, 4) (num_segments 4)"))
      << msg;
  msg = error_message([&] {
    run_op(OpKind::UnsortedSegmentSum, segments(4), {data, ints({0, 1, -2}, {3})});
  });
  EXPECT_TRUE(contains(msg, "segment id -2 at position [2]")) << msg;
}

// ---- gradients ----

TEST(GatherGradTest, ParamsMatchFiniteDifferences) {
  Rng rng(9);
  // Repeated rows (2 read three times) and a row nobody reads (4): its gradient is zero.
  EXPECT_TRUE(check_gradients(OpKind::GatherV2, kAxis0,
                              {random_tensor({5, 3}, rng), ints({2, 0, 2, 1, 3, 2}, {2, 3})}));
  EXPECT_TRUE(check_gradients(OpKind::GatherV2, kAxis0,
                              {random_tensor({4, 2, 2}, rng), ints({3, 3, 0}, {3})}));
}

TEST(UnsortedSegmentSumGradTest, DataMatchesFiniteDifferences) {
  Rng rng(10);
  EXPECT_TRUE(check_gradients(OpKind::UnsortedSegmentSum, segments(5),
                              {random_tensor({2, 3, 4}, rng), ints({4, 0, 4, 1, 1, 4}, {2, 3})}));
  EXPECT_TRUE(check_gradients(OpKind::UnsortedSegmentSum, segments(3),
                              {random_tensor({4}, rng), ints({2, 2, 0, 1}, {4})}));
}

// The gradient of a lookup is one UnsortedSegmentSum into the table's rows; none flows to
// the indices.
TEST(GatherGradTest, IsOneUnsortedSegmentSumOverTheTablesRows) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId table = b.variable_exact("table", {11, 4}, Init::uniform(-1, 1), VariableKind::parameter);
  ValueId ids = b.placeholder("ids", {2, 3}, DType::i32);
  ValueId y = b.gather(table, ids);
  ValueId loss = b.sum(b.mul(y, y));
  std::vector<ValueId> grads = append_gradients(b, loss, b.placeholder("seed", {}), {table});
  ASSERT_EQ(g.nodes_of_kind(OpKind::UnsortedSegmentSum).size(), 1u);
  const Node& sum = g.node(g.nodes_of_kind(OpKind::UnsortedSegmentSum)[0]);
  EXPECT_EQ(attrs_as<UnsortedSegmentSumAttrs>(sum.attrs).num_segments, 11);
  EXPECT_EQ(sum.inputs[1], ids);
  EXPECT_EQ(grads[0], sum.outputs[0]);
  EXPECT_EQ(g.value(grads[0]).shape, (Shape{11, 4}));
}

// ---- builder ----

TEST(GatherBuilderTest, BuildsBothOpsAndPrintsTheirAttributes) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId table = b.placeholder("table", {30, 8});
  ValueId ids = b.placeholder("ids", {2, 5}, DType::i32);
  ValueId y = b.gather(table, ids);
  EXPECT_EQ(g.node(g.value(y).producer).kind, OpKind::GatherV2);
  EXPECT_EQ(g.value(y).shape, (Shape{2, 5, 8}));
  ValueId s = b.unsorted_segment_sum(y, ids, 30);
  EXPECT_EQ(g.node(g.value(s).producer).kind, OpKind::UnsortedSegmentSum);
  EXPECT_EQ(g.value(s).shape, (Shape{30, 8}));
  const std::string text = g.to_text();
  EXPECT_TRUE(contains(text, "GatherV2<f32>(v0, v1) axis=0 -> v2:f32[2, 5, 8]")) << text;
  EXPECT_TRUE(contains(text, "UnsortedSegmentSum<f32>(v2, v1) num_segments=30 -> v3:f32[30, 8]"))
      << text;
  const std::string msg = error_message([&] { b.gather(table, b.placeholder("f", {3})); });
  EXPECT_TRUE(contains(msg, "indices must be i32, got f32")) << msg;
}

// ---- a small embedding classifier trains ----

// tokens [8, 6] -> embedding [20, 8] lookup -> flatten [8, 48] -> MatMul to 4 classes ->
// cross entropy with two rows' labels ignored (-100); SGD.
struct EmbeddingStep {
  Graph g;
  VariableStore vars{3, default_cpu_backend()};
  ValueId loss = kNoValue;
  std::unique_ptr<Executable> exe;

  explicit EmbeddingStep(bool amp) {
    Builder b(g, vars);
    const int64_t n = 8, t = 6, vocab = 20, width = 8;
    ValueId tokens = b.placeholder("tokens", {n, t}, DType::i32);
    ValueId labels = b.placeholder("labels", {n}, DType::i32);
    ValueId table = b.variable("embedding", {vocab, width}, Init::uniform(-1, 1));
    ValueId fc = b.variable("fc", {t * width, 4}, Init::kaiming_normal(t * width));
    ValueId logits = b.matmul(b.flatten(b.gather(table, tokens)), fc);
    loss = b.sum(b.sparse_softmax_cross_entropy(logits, labels, -100));
    auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (auto& name : params) pv.push_back(g.node(g.find_node(name)).outputs[0]);
    append_optimizer(b, params, append_gradients(b, loss, b.placeholder("loss_scale", {}), pv),
                     OptimizerConfig{});
    if (amp) apply_amp_policy(g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
    CompileOptions co;
    co.fetches = {loss};
    exe = std::make_unique<Executable>(g, vars, co);
    Rng rng(11);
    Tensor& x = exe->input("tokens");
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(vocab)));
    Tensor& y = exe->input("labels");
    for (int64_t i = 0; i < y.numel(); ++i) y.data_as<int32_t>()[i] = int32_t(rng.below(4));
    y.data_as<int32_t>()[1] = y.data_as<int32_t>()[5] = -100;
    exe->input("loss_scale").data_as<float>()[0] = 1.0f;
    exe->input("lr").data_as<float>()[0] = 0.05f;
  }
  float step() {
    exe->run();
    return exe->output(loss).data_as<float>()[0];
  }
};

TEST(GatherTrainingTest, EmbeddingClassifierLearnsAFixedBatch) {
  EmbeddingStep s(false);
  ASSERT_EQ(s.g.nodes_of_kind(OpKind::UnsortedSegmentSum).size(), 1u);
  const float first = s.step();
  float last = first;
  for (int i = 0; i < 30; ++i) last = s.step();
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_LT(last, first * 0.5f) << "overfitting one fixed batch must drive the loss down";
}

// Under amp (bf16) the lookup is a clear op feeding a MatMul through a Reshape: it runs in
// bf16; its gradient, on none of TensorFlow's lists, sums in f32 for the f32 table.
TEST(GatherTrainingTest, EmbeddingClassifierTrainsUnderAmp) {
  EmbeddingStep s(true);
  const Node& gather = s.g.node(s.g.nodes_of_kind(OpKind::GatherV2)[0]);
  const Node& sum = s.g.node(s.g.nodes_of_kind(OpKind::UnsortedSegmentSum)[0]);
  EXPECT_EQ(gather.dtype, DType::bf16);
  EXPECT_EQ(sum.dtype, DType::f32);
  EXPECT_EQ(s.g.value(sum.outputs[0]).dtype, DType::f32);
  const float first = s.step();
  float last = first;
  for (int i = 0; i < 30; ++i) last = s.step();
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_LT(last, first * 0.5f);
}

}  // namespace
}  // namespace campo
