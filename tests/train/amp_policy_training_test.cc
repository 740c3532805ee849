// The `amp` policy on whole training steps: LeNet's and ResNet-50's training graphs
// (train/trainer.h) painted as TensorFlow's lists say, and LeNet's step (models/) with its
// casts folded or turned into weight copies, trained against the plain casts.
#include <gtest/gtest.h>

#include <memory>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "tests/test_util.h"
#include "train/trainer.h"

namespace campo {
namespace {

// On a whole training step: every allow op low precision, every deny op and every
// optimizer update f32, master weights f32 and weight gradients cast back to f32.
TEST(AmpPolicyTest, LenetTrainingStep) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  TrainingGraphSpec spec;
  spec.model = "lenet";
  spec.image_shape = {1, 28, 28};
  spec.batch = 8;
  build_training_graph(g, vars, spec);
  apply_amp_policy(g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
  for (const Node& n : g.nodes()) {
    AmpList l = AmpLists::defaults(Device::cpu, DType::bf16).classify(n.kind);
    if (l == AmpList::allow) EXPECT_EQ(n.dtype, DType::bf16) << n.name;
    if (l == AmpList::deny) EXPECT_EQ(n.dtype, DType::f32) << n.name;
    if (n.kind == OpKind::ApplyMomentum) {
      EXPECT_EQ(n.dtype, DType::f32);
      for (ValueId v : n.inputs) EXPECT_EQ(g.value(v).dtype, DType::f32) << n.name;
    }
    if (n.kind == OpKind::Variable) EXPECT_EQ(g.value(n.outputs[0]).dtype, DType::f32);
  }
  // Weight gradients come out of bf16 Conv2DBackpropFilter / MatMul and are cast back.
  const ValueId grad = update_gradient_of(g, g.node(g.find_node("conv1.weight")).outputs[0]);
  ASSERT_NE(grad, kNoValue);
  const Node& grad_producer = g.node(g.value(grad).producer);
  EXPECT_EQ(grad_producer.kind, OpKind::Cast);
}

// DESIGN/issue claim: on ResNet-50 every Conv2D / Conv2DBackprop* / MatMul is low precision
// and every deny-list op f32, over the whole training step.
TEST(AmpPolicyTest, ResNet50AllowOpsLowDenyOpsF32) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  TrainingGraphSpec spec;
  spec.model = "resnet50";
  spec.model_options.in_channels = 3;
  spec.model_options.image_size = 32;
  spec.image_shape = {3, 32, 32};
  spec.batch = 2;
  build_training_graph(g, vars, spec);
  apply_amp_policy(g, AmpLists::defaults(Device::cpu, DType::bf16), DType::bf16);
  int allow_ops = 0;
  for (const Node& n : g.nodes()) {
    AmpList l = AmpLists::defaults(Device::cpu, DType::bf16).classify(n.kind);
    if (l == AmpList::allow) {
      ++allow_ops;
      EXPECT_EQ(n.dtype, DType::bf16) << n.name;
    }
    if (l == AmpList::deny) EXPECT_EQ(n.dtype, DType::f32) << n.name;
  }
  EXPECT_GT(allow_ops, 150);  // 53 convs forward, their backprops, the fc MatMuls
}

// LeNet's training step on batches of 8, painted by amp, with its casts as they are, all
// folded, or only the weight casts folded into weight copies (fold_weight_casts).
enum class Fold { none, all, weight_copies };
struct LenetStep {
  Graph g;
  VariableStore vars{1, default_cpu_backend()};
  CastStats casts;
  ValueId loss = kNoValue;
  std::unique_ptr<Executable> exe;
  explicit LenetStep(Fold fold, const OptimizerConfig& optimizer = {}) {
    Builder b(g, vars);
    ValueId images = b.placeholder("images", {8, 1, 28, 28});
    ValueId labels = b.placeholder("labels", {8}, DType::i32);
    loss = b.mean(
        b.sparse_softmax_cross_entropy(build_model("lenet", b, images, ModelOptions{}), labels));
    ValueId seed = b.placeholder("loss_scale", {});
    auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (auto& n : params) pv.push_back(g.node(g.find_node(n)).outputs[0]);
    append_optimizer(b, params, append_gradients(b, loss, seed, pv), optimizer);
    casts = apply_precision(g, paint_amp(g, AmpLists::defaults(Device::cpu, DType::bf16)), DType::bf16, fold == Fold::all);
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
    weight_casts +=
        plain.g.node(plain.g.value(plain.g.node(id).inputs[0]).producer).kind == OpKind::Variable;
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
    EXPECT_EQ(summarize_precision(copies.g).casts.casts + 9,
              summarize_precision(casts.g).casts.casts);
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
                casts.exe->output(casts.loss).data_as<float>()[0])
          << "step " << k;
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
