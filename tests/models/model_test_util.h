// Shared by the model tests: a model's forward graph over a placeholder (Built), and a
// few SGD steps on one fixed batch (train_fixed_batch).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "graph/autodiff.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "tests/test_util.h"

namespace campo::testing {

// A model's forward graph over one images placeholder (nothing compiled). Builds of the
// same model with the same variable shapes can share one store (`shared`), which skips
// re-initialising millions of parameters.
struct Built {
  Graph graph;
  std::shared_ptr<VariableStore> store;
  VariableStore& vars;
  ValueId logits = kNoValue;

  Built(const std::string& model, const Shape& images, ModelOptions o,
        std::shared_ptr<VariableStore> shared = nullptr)
      : store(shared ? shared : std::make_shared<VariableStore>(0, default_cpu_backend())),
        vars(*store) {
    o.in_channels = int(images[1]);
    o.image_size = int(images[2]);
    Builder b(graph, vars);
    logits = build_model(model, b, b.placeholder("images", images), o);
  }
  int64_t parameters() const { return vars.count_elements(VariableKind::parameter); }
  Shape shape_of(const std::string& name) const { return vars.at(name).shape(); }
  // The stride of the Conv2D reading variable `weight`.
  int stride_of(const std::string& weight) const {
    const ValueId w = graph.node(graph.find_node(weight)).outputs[0];
    for (NodeId id : graph.consumers(w))
      if (graph.node(id).kind == OpKind::Conv2D)
        return attrs_as<ConvAttrs>(graph.node(id).attrs).stride_h;
    return -1;
  }
};

inline ModelOptions classes(int n, const std::string& stem = "auto") {
  ModelOptions o;
  o.num_classes = n;
  o.stem = stem;
  return o;
}

// Trains `model` with SGD on one fixed random batch; loss before and after `steps` steps,
// both measured with the same graph mode (`eval_loss`: an inference graph, so dropout does
// not add noise to the comparison; otherwise the training step's own loss).
struct FixedBatchRun {
  float first = 0, last = 0;
};

inline FixedBatchRun train_fixed_batch(const std::string& model, ModelOptions o,
                                       const Shape& images, int steps, float lr, bool eval_loss,
                                       const OptimizerConfig& optimizer = {},
                                       ConvLayout conv_layout = ConvLayout::blocked) {
  VariableStore vars(3, default_cpu_backend());
  Graph g;
  ValueId loss;
  {
    Builder b(g, vars);
    ValueId x = b.placeholder("images", images);
    ValueId y = b.placeholder("labels", {images[0]}, DType::i32);
    loss = b.mean(b.sparse_softmax_cross_entropy(build_model(model, b, x, o), y));
    ValueId seed = b.placeholder("loss_scale", {});
    auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (auto& n : params) pv.push_back(g.node(g.find_node(n)).outputs[0]);
    append_optimizer(b, params, append_gradients(b, loss, seed, pv), optimizer);
  }
  CompileOptions co;
  co.fetches = {loss};
  co.conv_layout = conv_layout;
  Executable exe(g, vars, co);
  Graph eg;
  ValueId eval_loss_value = kNoValue;
  std::unique_ptr<Executable> eval;
  if (eval_loss) {
    Builder b(eg, vars);
    b.set_training(false);
    ValueId x = b.placeholder("images", images);
    ValueId y = b.placeholder("labels", {images[0]}, DType::i32);
    eval_loss_value = b.mean(b.sparse_softmax_cross_entropy(build_model(model, b, x, o), y));
    CompileOptions eco;
    eco.fetches = {eval_loss_value};
    eco.conv_layout = conv_layout;
    eval = std::make_unique<Executable>(eg, vars, eco);
  }
  // Noise around a per-sample brightness, so the samples are easy to tell apart.
  Rng rng(11);
  Tensor x = testing::random_tensor(images, rng, -0.5f, 0.5f);
  const int64_t per_sample = shape_numel(images) / images[0];
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data_as<float>()[i] += float(i / per_sample) - 0.5f * float(images[0] - 1);
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < images[0]; ++i) labels.push_back(int32_t(i % o.num_classes));
  Tensor y = Tensor::from_vector(labels, {images[0]});
  exe.input("images").copy_from(x);
  exe.input("labels").copy_from(y);
  exe.input("loss_scale").data_as<float>()[0] = 1.0f;
  exe.input("lr").data_as<float>()[0] = lr;
  auto measure = [&] {
    eval->input("images").copy_from(x);
    eval->input("labels").copy_from(y);
    eval->run();
    return eval->output(eval_loss_value).data_as<float>()[0];
  };
  FixedBatchRun r;
  if (eval_loss) r.first = measure();
  for (int s = 0; s < steps; ++s) {
    if (exe.has_input("step")) exe.input("step").data_as<float>()[0] = float(s + 1);  // Adam
    exe.run();
    const float l = exe.output(loss).data_as<float>()[0];
    EXPECT_TRUE(std::isfinite(l)) << model << " step " << s;
    if (!eval_loss && s == 0) r.first = l;
    if (!eval_loss) r.last = l;
  }
  if (eval_loss) r.last = measure();
  return r;
}

}  // namespace campo::testing
