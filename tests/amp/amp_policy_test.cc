// The `amp` policy (TensorFlow's list-based rewrite) on small hand-built graphs with
// exactly known colourings and cast counts.
#include <gtest/gtest.h>

#include "amp/policy.h"
#include "graph/builder.h"

namespace campo {
namespace {

DType dtype_of_node(const Graph& g, ValueId v) { return g.node(g.value(v).producer).dtype; }

int count_casts(const Graph& g) { return int(g.nodes_of_kind(OpKind::Cast).size()); }

struct Fixture {
  Graph g;
  VariableStore vars{0, default_cpu_backend()};
  Builder b{g, vars};
  ValueId var(const std::string& name, Shape s) {
    return b.variable_exact(name, s, Init::ones(), VariableKind::parameter);
  }
};

TEST(AmpPolicyTest, ClearOpBetweenTwoAllowOpsIsPainted) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m1 = f.b.matmul(x, f.var("w1", {8, 8}));
  ValueId r = f.b.relu(m1);
  ValueId m2 = f.b.matmul(r, f.var("w2", {8, 8}));
  ValueId loss = f.b.sum(m2);
  PrecisionSummary s = apply_amp_policy(f.g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, m1), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, r), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, m2), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, loss), DType::f32);
  EXPECT_EQ(f.g.value(loss).dtype, DType::f32);
  // x, w1, w2 into bf16; m2 back to f32 for the deny-listed Sum.
  EXPECT_EQ(count_casts(f.g), 4);
  EXPECT_EQ(s.casts.casts, 4);
  EXPECT_EQ(s.casts.cast_elements, 4 * 8 + 8 * 8 + 8 * 8 + 4 * 8);
  EXPECT_EQ(s.low_nodes, 3);
}

// Casts that only feed dead code (never run by a step fetching the loss) are not counted
// when the summary is given the fetches.
TEST(AmpPolicyTest, SummaryWithFetchesSkipsDeadCasts) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m1 = f.b.matmul(x, f.var("w1", {8, 8}));
  ValueId loss = f.b.sum(m1);            // deny: m1 cast back to f32
  ValueId dead = f.b.mean(m1);           // deny, fetched by nobody: shares that cast
  ValueId dead2 = f.b.sum(f.b.relu(x));  // a branch that runs nowhere
  (void)dead;
  apply_amp_policy(f.g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
  const PrecisionSummary all = summarize_precision(f.g);
  const PrecisionSummary live = summarize_precision(f.g, {loss});
  EXPECT_EQ(all.casts.casts, live.casts.casts);  // the shared cast is live
  EXPECT_EQ(live.f32_nodes, 1);                  // Sum(m1) only
  EXPECT_EQ(all.f32_nodes, 4);                   // + Mean, Relu, Sum of the dead branch
  (void)dead2;
}

TEST(AmpPolicyTest, DenyPropagatesForwardThroughInferOps) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId a = f.b.matmul(x, f.var("w1", {8, 8}));
  ValueId mean = f.b.mean(a, {1});    // deny
  ValueId scaled = f.b.mul(a, mean);  // infer, downstream of deny: stays f32
  ValueId o = f.b.matmul(scaled, f.var("w2", {8, 8}));
  ValueId loss = f.b.sum(o);
  apply_amp_policy(f.g, AmpLists::defaults(Device::cpu, DType::bf16), DType::f16);
  EXPECT_EQ(dtype_of_node(f.g, a), DType::f16);
  EXPECT_EQ(dtype_of_node(f.g, mean), DType::f32);
  EXPECT_EQ(dtype_of_node(f.g, scaled), DType::f32);
  EXPECT_EQ(dtype_of_node(f.g, o), DType::f16);
  EXPECT_EQ(dtype_of_node(f.g, loss), DType::f32);
  // x, w1, w2 -> f16; a -> f32 once, shared by Mean and Mul; Mul's output -> f16; o -> f32.
  EXPECT_EQ(count_casts(f.g), 6);
}

TEST(AmpPolicyTest, InferOpBetweenAllowOpsWithoutDenyIsPainted) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId a = f.b.matmul(x, f.var("w1", {8, 8}));
  ValueId t = f.b.tanh(a);  // infer, between two allow ops
  ValueId o = f.b.matmul(t, f.var("w2", {8, 8}));
  ValueId tail = f.b.sigmoid(o);  // infer, downstream only: stays f32
  f.b.sum(tail);
  apply_amp_policy(f.g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, t), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, tail), DType::f32);
}

TEST(AmpPolicyTest, OneSharedCastForSeveralConsumers) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId w = f.var("w", {8, 8});
  ValueId a = f.b.matmul(x, w);
  ValueId c = f.b.matmul(x, w, false, true);
  f.b.sum(f.b.add(f.b.sum(a), f.b.sum(c)));
  apply_amp_policy(f.g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
  int casts_of_x = 0, casts_of_w = 0;
  for (NodeId id : f.g.nodes_of_kind(OpKind::Cast)) {
    ValueId in = f.g.node(id).inputs[0];
    casts_of_x += in == x;
    casts_of_w += in == w;
  }
  EXPECT_EQ(casts_of_x, 1);
  EXPECT_EQ(casts_of_w, 1);
  EXPECT_EQ(count_casts(f.g), 4);  // x, w, and each MatMul's output back to f32
}

TEST(AmpPolicyTest, ClearOpNotConnectedToAllowStaysF32) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId r = f.b.relu(x);
  f.b.sum(r);
  PrecisionSummary s = apply_amp_policy(f.g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, r), DType::f32);
  EXPECT_EQ(s.low_nodes, 0);
  EXPECT_EQ(count_casts(f.g), 0);
}

TEST(AmpPolicyTest, EditedListsChangeThePlan) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId a = f.b.matmul(x, f.var("w", {8, 8}));
  f.b.sum(a);
  AmpLists lists = AmpLists::defaults(Device::cpu, DType::bf16);
  lists.edit("allow-=MatMul");
  EXPECT_EQ(lists.classify(OpKind::MatMul), AmpList::fp32);
  PrecisionSummary s = apply_amp_policy(f.g, lists, DType::bf16);
  EXPECT_EQ(s.low_nodes, 0);
  lists.edit("allow+=MatMul;clear+=Tanh");
  EXPECT_EQ(lists.classify(OpKind::Tanh), AmpList::clear);
  EXPECT_THROW(lists.edit("allow+=NoSuchOp"), Error);
  EXPECT_THROW(lists.edit("bogus+=MatMul"), Error);
  EXPECT_THROW(lists.edit("allow+=ApplyAdam"), Error);
}

TEST(AmpPolicyTest, DefaultListsMatchDesign) {
  AmpLists l = AmpLists::defaults(Device::cpu, DType::bf16);
  for (OpKind op : {OpKind::Conv2D, OpKind::Conv2DBackpropInput, OpKind::Conv2DBackpropFilter,
                    OpKind::MatMul, OpKind::BatchMatMulV2})
    EXPECT_EQ(l.classify(op), AmpList::allow) << op_name(op);
  for (OpKind op : {OpKind::Add, OpKind::AddN, OpKind::AvgPool, OpKind::BiasAdd,
                    OpKind::FusedBatchNorm, OpKind::FusedBatchNormGrad, OpKind::LeakyRelu,
                    OpKind::Mul, OpKind::Sigmoid, OpKind::Tanh, OpKind::TanhGrad, OpKind::Softmax})
    EXPECT_EQ(l.classify(op), AmpList::infer) << op_name(op);
  for (OpKind op : {OpKind::Mean, OpKind::Sum, OpKind::SparseSoftmaxCrossEntropyWithLogits})
    EXPECT_EQ(l.classify(op), AmpList::deny) << op_name(op);
  for (OpKind op : {OpKind::Relu, OpKind::ReluGrad, OpKind::MaxPool, OpKind::MaxPoolGrad,
                    OpKind::Reshape, OpKind::ConcatV2, OpKind::SplitV, OpKind::Transpose,
                    OpKind::GatherV2})
    EXPECT_EQ(l.classify(op), AmpList::clear) << op_name(op);
  for (OpKind op : {OpKind::ApplyMomentum, OpKind::ApplyAdam, OpKind::Cast, OpKind::Variable,
                    OpKind::UnsortedSegmentSum})
    EXPECT_EQ(l.classify(op), AmpList::fp32) << op_name(op);
}

}  // namespace
}  // namespace campo

namespace campo {
namespace {

// --low-precision auto's cast insertion (apply_precision with a type per node): a value made
// in f16 and read in bf16 and in f32 goes through one f32 copy shared by both readers, as
// amp/three_way.h prices it (f16 -> f32 + f32 -> bf16), never by a direct f16 -> bf16 Cast.
TEST(AmpPolicyTest, MixedLowTypesCastThroughOneSharedF32Copy) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId m1 = f.b.matmul(x, f.var("w1", {8, 8}));  // f16
  ValueId r = f.b.relu(m1);                         // bf16
  ValueId loss = f.b.sum(m1);                       // f32
  std::vector<DType> dtype(size_t(f.g.num_nodes()), DType::f32);
  dtype[size_t(f.g.value(m1).producer)] = DType::f16;
  dtype[size_t(f.g.value(r).producer)] = DType::bf16;
  const CastStats s = apply_precision(f.g, dtype);
  const Node& relu = f.g.node(f.g.value(r).producer);
  EXPECT_EQ(relu.dtype, DType::bf16);
  const Node& to_bf16 = f.g.node(f.g.value(relu.inputs[0]).producer);
  ASSERT_EQ(to_bf16.kind, OpKind::Cast);
  EXPECT_EQ(attrs_as<CastAttrs>(to_bf16.attrs).to, DType::bf16);
  const Node& to_f32 = f.g.node(f.g.value(to_bf16.inputs[0]).producer);
  ASSERT_EQ(to_f32.kind, OpKind::Cast);
  EXPECT_EQ(attrs_as<CastAttrs>(to_f32.attrs).to, DType::f32);
  EXPECT_EQ(to_f32.inputs[0], m1);
  // The f32 reader shares that copy: x and w1 into f16, m1 to f32, then to bf16.
  const Node& sum = f.g.node(f.g.value(loss).producer);
  EXPECT_EQ(sum.inputs[0], to_f32.outputs[0]);
  EXPECT_EQ(s.casts, 4);
  EXPECT_EQ(count_casts(f.g), 4);
  for (NodeId c : f.g.nodes_of_kind(OpKind::Cast)) {  // no cast between the two low types
    const DType from = f.g.value(f.g.node(c).inputs[0]).dtype;
    const DType to = attrs_as<CastAttrs>(f.g.node(c).attrs).to;
    EXPECT_FALSE(is_low_precision(from) && is_low_precision(to)) << f.g.node(c).name;
  }
  const PrecisionSummary summary = summarize_precision(f.g);
  EXPECT_EQ(summary.low_nodes, 2);
  EXPECT_EQ(summary.f16_nodes, 1);
}

}  // namespace
}  // namespace campo
