// A tiny classifier trained through the real machinery (builder, autodiff, SGD update
// nodes, optionally the amp policy, executor), with one op under test in its middle:
//   logits = linear(middle(linear(x, 16)), 4);  loss = mean(sparse softmax CE)
// on one fixed batch. Used by the op tests of Softmax, Gelu and LayerNorm to show the op's
// gradient trains a model end to end (the loss falls on the batch it is fitted to).
#pragma once

#include <functional>
#include <vector>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/optimizer.h"
#include "models/layers.h"
#include "tests/test_util.h"

namespace campo::testing {

struct TinyTraining {
  std::vector<float> losses;  // loss before each step
  Graph graph;                // the training graph (after the policy, when one ran)
};

// `middle` maps [8, 16] to [8, 16]. `low` = f32: no policy; bf16 / f16: the amp policy with
// the CPU's lists.
inline void train_tiny(const std::function<ValueId(Builder&, ValueId)>& middle, DType low,
                       int steps, TinyTraining& out) {
  VariableStore vars(3, default_cpu_backend());
  Builder b(out.graph, vars);
  const ValueId x = b.placeholder("x", {8, 6});
  const ValueId labels = b.placeholder("labels", {8}, DType::i32);
  const ValueId h = middle(b, layers::linear(b, x, 16, "fc1"));
  const ValueId logits = layers::linear(b, h, 4, "fc2");
  const ValueId loss = b.mean(b.sparse_softmax_cross_entropy(logits, labels));
  const auto params = vars.names_of_kind(VariableKind::parameter);
  std::vector<ValueId> pv;
  for (const auto& p : params) pv.push_back(out.graph.node(out.graph.find_node(p)).outputs[0]);
  OptimizerConfig sgd;
  sgd.momentum = 0.0f;
  append_optimizer(b, params, append_gradients(b, loss, b.placeholder("loss_scale", {}), pv), sgd);
  if (low != DType::f32) apply_amp_policy(out.graph, AmpLists::defaults(Device::cpu, low), low);
  CompileOptions co;
  co.fetches = {loss};
  Executable exe(out.graph, vars, co);
  Rng rng(17);
  Tensor& xt = exe.input("x");
  for (int64_t i = 0; i < xt.numel(); ++i) xt.data_as<float>()[i] = rng.normal();
  Tensor& yt = exe.input("labels");
  for (int64_t i = 0; i < yt.numel(); ++i) yt.data_as<int32_t>()[i] = int32_t(i % 4);
  exe.input("loss_scale").data_as<float>()[0] = 1.0f;
  exe.input("lr").data_as<float>()[0] = 0.2f;
  for (int s = 0; s < steps; ++s) {
    exe.run();
    out.losses.push_back(exe.output(loss).data_as<float>()[0]);
  }
}

// Whether some node of `kind` runs in `dtype` in g.
inline bool has_node(const Graph& g, OpKind kind, DType dtype) {
  for (NodeId id : g.nodes_of_kind(kind))
    if (g.node(id).dtype == dtype) return true;
  return false;
}

}  // namespace campo::testing
