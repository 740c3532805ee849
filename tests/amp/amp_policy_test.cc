// The `amp` policy (TensorFlow's list-based rewrite) on small hand-built graphs with
// exactly known colourings and cast counts.
#include <gtest/gtest.h>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "tests/test_util.h"
#include "train/training_graph.h"

namespace campo {
namespace {

DType dtype_of_node(const Graph& g, ValueId v) { return g.node(g.value(v).producer).dtype; }

int count_casts(const Graph& g) { return int(g.nodes_of_kind(OpKind::Cast).size()); }

struct Fixture {
  Graph g;
  VariableStore vars;
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
  PrecisionSummary s = apply_amp_policy(f.g, AmpLists::defaults(), DType::bf16);
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
  ValueId loss = f.b.sum(m1);   // deny: m1 cast back to f32
  ValueId dead = f.b.mean(m1);  // deny, fetched by nobody: shares that cast
  ValueId dead2 = f.b.sum(f.b.relu(x));  // a branch that runs nowhere
  (void)dead;
  apply_amp_policy(f.g, AmpLists::defaults(), DType::bf16);
  const PrecisionSummary all = summarize_precision(f.g);
  const PrecisionSummary live = summarize_precision(f.g, {loss});
  EXPECT_EQ(all.casts.casts, live.casts.casts);  // the shared cast is live
  EXPECT_EQ(live.f32_nodes, 1);                   // Sum(m1) only
  EXPECT_EQ(all.f32_nodes, 4);                    // + Mean, Relu, Sum of the dead branch
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
  apply_amp_policy(f.g, AmpLists::defaults(), DType::f16);
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
  apply_amp_policy(f.g, AmpLists::defaults(), DType::bf16);
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
  apply_amp_policy(f.g, AmpLists::defaults(), DType::bf16);
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
  PrecisionSummary s = apply_amp_policy(f.g, AmpLists::defaults(), DType::bf16);
  EXPECT_EQ(dtype_of_node(f.g, r), DType::f32);
  EXPECT_EQ(s.low_nodes, 0);
  EXPECT_EQ(count_casts(f.g), 0);
}

TEST(AmpPolicyTest, EditedListsChangeThePlan) {
  Fixture f;
  ValueId x = f.b.placeholder("x", {4, 8});
  ValueId a = f.b.matmul(x, f.var("w", {8, 8}));
  f.b.sum(a);
  AmpLists lists = AmpLists::defaults();
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
  AmpLists l = AmpLists::defaults();
  for (OpKind op : {OpKind::Conv2D, OpKind::Conv2DBackpropInput, OpKind::Conv2DBackpropFilter,
                    OpKind::MatMul})
    EXPECT_EQ(l.classify(op), AmpList::allow) << op_name(op);
  for (OpKind op : {OpKind::Add, OpKind::AddN, OpKind::AvgPool, OpKind::BiasAdd,
                    OpKind::FusedBatchNorm, OpKind::FusedBatchNormGrad, OpKind::LeakyRelu,
                    OpKind::Mul, OpKind::Sigmoid, OpKind::Tanh, OpKind::TanhGrad})
    EXPECT_EQ(l.classify(op), AmpList::infer) << op_name(op);
  for (OpKind op : {OpKind::Mean, OpKind::Sum, OpKind::SparseSoftmaxCrossEntropyWithLogits})
    EXPECT_EQ(l.classify(op), AmpList::deny) << op_name(op);
  for (OpKind op : {OpKind::Relu, OpKind::ReluGrad, OpKind::MaxPool, OpKind::MaxPoolGrad,
                    OpKind::Reshape})
    EXPECT_EQ(l.classify(op), AmpList::clear) << op_name(op);
  for (OpKind op : {OpKind::ApplyMomentum, OpKind::ApplyAdam, OpKind::Cast, OpKind::Variable})
    EXPECT_EQ(l.classify(op), AmpList::fp32) << op_name(op);
}

// On a whole training step: every allow op low precision, every deny op and every
// optimizer update f32, master weights f32 and weight gradients cast back to f32.
TEST(AmpPolicyTest, LenetTrainingStep) {
  Graph g;
  VariableStore vars;
  TrainingGraphSpec spec;
  spec.model = "lenet";
  spec.image_shape = {1, 28, 28};
  spec.batch = 8;
  build_training_graph(g, vars, spec);
  apply_amp_policy(g, AmpLists::defaults(), DType::bf16);
  for (const Node& n : g.nodes()) {
    AmpList l = AmpLists::defaults().classify(n.kind);
    if (l == AmpList::allow) EXPECT_EQ(n.dtype, DType::bf16) << n.name;
    if (l == AmpList::deny) EXPECT_EQ(n.dtype, DType::f32) << n.name;
    if (n.kind == OpKind::ApplyMomentum) {
      EXPECT_EQ(n.dtype, DType::f32);
      for (ValueId v : n.inputs) EXPECT_EQ(g.value(v).dtype, DType::f32) << n.name;
    }
    if (n.kind == OpKind::Variable) EXPECT_EQ(g.value(n.outputs[0]).dtype, DType::f32);
  }
  // Weight gradients come out of bf16 Conv2DBackpropFilter / MatMul and are cast back.
  NodeId update = g.find_node("conv1.weight/ApplyMomentum");
  ASSERT_GE(update, 0);
  const Node& grad_producer = g.node(g.value(g.node(update).inputs[2]).producer);
  EXPECT_EQ(grad_producer.kind, OpKind::Cast);
}

}  // namespace
}  // namespace campo

namespace campo {
namespace {

// DESIGN/issue claim: on ResNet-50 every Conv2D / Conv2DBackprop* / MatMul is low precision
// and every deny-list op f32, over the whole training step.
TEST(AmpPolicyTest, ResNet50AllowOpsLowDenyOpsF32) {
  Graph g;
  VariableStore vars;
  TrainingGraphSpec spec;
  spec.model = "resnet50";
  spec.model_options.in_channels = 3;
  spec.model_options.image_size = 32;
  spec.image_shape = {3, 32, 32};
  spec.batch = 2;
  build_training_graph(g, vars, spec);
  apply_amp_policy(g, AmpLists::defaults(), DType::bf16);
  int allow_ops = 0;
  for (const Node& n : g.nodes()) {
    AmpList l = AmpLists::defaults().classify(n.kind);
    if (l == AmpList::allow) {
      ++allow_ops;
      EXPECT_EQ(n.dtype, DType::bf16) << n.name;
    }
    if (l == AmpList::deny) EXPECT_EQ(n.dtype, DType::f32) << n.name;
  }
  EXPECT_GT(allow_ops, 150);  // 53 convs forward, their backprops, the fc MatMuls
}

}  // namespace
}  // namespace campo

namespace campo {
namespace {

// LeNet's training step on batches of 8, painted by amp, with its casts as they are, all
// folded, or only the weight casts folded into weight copies (fold_weight_casts).
enum class Fold { none, all, weight_copies };
struct LenetStep {
  Graph g;
  VariableStore vars{1};
  CastStats casts;
  ValueId loss = kNoValue;
  std::unique_ptr<Executable> exe;
  explicit LenetStep(Fold fold, const OptimizerConfig& optimizer = {}) {
    Builder b(g, vars);
    ValueId images = b.placeholder("images", {8, 1, 28, 28});
    ValueId labels = b.placeholder("labels", {8}, DType::i32);
    loss = b.mean(b.sparse_softmax_cross_entropy(
        build_model("lenet", b, images, ModelOptions{}), labels));
    ValueId seed = b.placeholder("loss_scale", {});
    auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (auto& n : params) pv.push_back(g.node(g.find_node(n)).outputs[0]);
    append_optimizer(b, params, append_gradients(b, loss, seed, pv), optimizer);
    casts = apply_precision(g, paint_amp(g, AmpLists::defaults()), DType::bf16, fold == Fold::all);
    if (fold == Fold::weight_copies) casts.weight_copies = fold_weight_casts(g).weight_copies;
    CompileOptions co;
    co.fetches = {loss};
    exe = std::make_unique<Executable>(g, vars, co);
    testing::fill_classifier_step_inputs(*exe, 5, 10, 0.5f);  // large lr: the update shows
  }
};

// Cast folding (cost-aware): amp's painting of LeNet's training graph with and without
// folding. Folded, each bf16 Conv2DBackpropFilter writes its f32 weight gradient straight
// to ApplyMomentum, with one Cast fewer per convolution, and a training step updates the
// weights as the unfolded graph does to bf16 rounding (it skips one rounding of dw).
TEST(AmpPolicyTest, FoldedCastsWriteWeightGradientsInF32) {
  LenetStep plain(Fold::none), folded(Fold::all);
  const int filters = int(folded.g.nodes_of_kind(OpKind::Conv2DBackpropFilter).size());
  ASSERT_EQ(filters, 2);
  // Every bf16 cast of a variable in the plain graph is a weight the optimizer updates:
  // folded, each becomes a weight copy.
  int weight_casts = 0;
  for (NodeId id : plain.g.nodes_of_kind(OpKind::Cast))
    weight_casts += plain.g.node(plain.g.value(plain.g.node(id).inputs[0]).producer).kind ==
                    OpKind::Variable;
  ASSERT_EQ(weight_casts, 9);  // LeNet's 5 weights and the 4 biases read by bf16 BiasAdds
  EXPECT_EQ(plain.casts.folded, 0);
  EXPECT_EQ(folded.casts.folded, filters + weight_casts);
  EXPECT_EQ(folded.casts.weight_copies, weight_casts);
  EXPECT_EQ(plain.casts.casts - folded.casts.casts, filters + weight_casts);
  EXPECT_EQ(summarize_precision(folded.g).casts.folded, filters + weight_casts);
  EXPECT_EQ(summarize_precision(folded.g).casts.weight_copies, weight_casts);
  for (NodeId id : folded.g.nodes_of_kind(OpKind::Conv2DBackpropFilter)) {
    const Node& n = folded.g.node(id);
    EXPECT_EQ(n.dtype, DType::bf16);
    EXPECT_TRUE(n.f32_output);
    EXPECT_EQ(folded.g.value(n.outputs[0]).dtype, DType::f32);
    for (NodeId c : folded.g.consumers(n.outputs[0]))
      EXPECT_EQ(folded.g.node(c).kind, OpKind::ApplyMomentum) << folded.g.node(c).name;
  }
  const std::vector<std::string> weights = {"conv1.weight", "conv2.weight"};
  std::vector<Tensor> befores;
  for (const std::string& w : weights) befores.push_back(plain.vars.at(w).clone());
  plain.exe->run();
  folded.exe->run();
  for (size_t k = 0; k < weights.size(); ++k) {
    const std::string& w = weights[k];
    const Tensor& before = befores[k];
    const Tensor& a = plain.vars.at(w);
    const Tensor& b = folded.vars.at(w);
    double moved = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const float pa = a.data_as<float>()[i], pb = b.data_as<float>()[i];
      const float step = pa - before.data_as<float>()[i];
      moved = std::max(moved, double(std::abs(step)));
      EXPECT_NEAR(pb, pa, std::abs(step) / 64.0f + 1e-6f) << w << " " << i;
    }
    EXPECT_GT(moved, 1e-3) << w;  // the step did update the weights
  }
}

// Weight copies: the optimizer update writes the bf16 copy of each weight that the Cast
// would have made at the start of the next step, with the same rounding, so training with
// them is bit-identical to training with the Casts, for SGD and Adam. The executable
// rebuilds the copies before its first step and after a write to the variables from
// outside (a checkpoint load), and not otherwise.
TEST(AmpPolicyTest, WeightCopiesTrainBitIdenticallyToCasts) {
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::adam;
  for (const OptimizerConfig& optimizer : {OptimizerConfig{}, adam}) {
    LenetStep casts(Fold::none, optimizer), copies(Fold::weight_copies, optimizer);
    ASSERT_EQ(copies.casts.weight_copies, 9);
    EXPECT_EQ(summarize_precision(copies.g).casts.casts + 9, summarize_precision(casts.g).casts.casts);
    auto same_weights = [&] {
      for (const std::string& name : casts.vars.names())
        ASSERT_TRUE(testing::all_close(copies.vars.at(name), casts.vars.at(name), 0, 0)) << name;
    };
    auto step = [&](int k) {
      for (LenetStep* s : {&casts, &copies}) {
        testing::fill_classifier_step_inputs(*s->exe, 10 + uint64_t(k), 10, 0.05f);
        if (optimizer.kind == OptimizerConfig::Kind::adam)
          s->exe->input("step").data_as<float>()[0] = float(k + 1);
        s->exe->run();
      }
      EXPECT_EQ(copies.exe->output(copies.loss).data_as<float>()[0],
                casts.exe->output(casts.loss).data_as<float>()[0]) << "step " << k;
    };
    for (int k = 0; k < 3; ++k) step(k);
    same_weights();
    EXPECT_EQ(copies.exe->weight_copy_refreshes(), 1);
    EXPECT_EQ(casts.exe->weight_copy_refreshes(), 0);
    // A write from outside the step, as a checkpoint load does.
    for (LenetStep* s : {&casts, &copies}) {
      Tensor& w = s->vars.at("conv1.weight");
      for (int64_t i = 0; i < w.numel(); ++i) w.data_as<float>()[i] *= 0.5f;
    }
    step(3);
    same_weights();
    EXPECT_EQ(copies.exe->weight_copy_refreshes(), 2);
  }
}

}  // namespace
}  // namespace campo
