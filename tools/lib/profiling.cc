#include "tools/lib/profiling.h"

#include <algorithm>
#include <limits>

namespace campo {

namespace {

// Per-node fastest times (ms) over `steps` timed steps after `warmup` untimed ones.
std::vector<double> time_nodes(const Graph& g, VariableStore& vars, const TrainingGraphInfo& info,
                               int warmup, int steps, uint64_t seed, int64_t classes) {
  CompileOptions co;
  co.fetches = {info.loss};
  if (info.all_finite != kNoValue) co.fetches.push_back(info.all_finite);
  co.seed = seed;
  Executable exe(g, vars, co);
  Rng rng(seed);
  Tensor& images = exe.input("images");
  for (int64_t i = 0; i < images.numel(); ++i) images.data_as<float>()[i] = rng.normal();
  Tensor& labels = exe.input("labels");
  for (int64_t i = 0; i < labels.numel(); ++i)
    labels.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(classes)));
  exe.input("lr").data_as<float>()[0] = 0.0f;  // profile without moving the weights
  exe.input("loss_scale").data_as<float>()[0] = 1.0f;
  if (exe.has_input("inv_loss_scale")) exe.input("inv_loss_scale").data_as<float>()[0] = 1.0f;
  if (exe.has_input("step")) exe.input("step").data_as<float>()[0] = 1.0f;
  for (int i = 0; i < warmup; ++i) exe.run();
  std::vector<double> best(size_t(g.num_nodes()), std::numeric_limits<double>::infinity());
  exe.set_timing(true);
  exe.set_node_hook([&](NodeId id, double ms) { best[size_t(id)] = std::min(best[size_t(id)], ms); });
  for (int i = 0; i < std::max(1, steps); ++i) exe.run();
  for (double& b : best)
    if (!std::isfinite(b)) b = 0.0;
  return best;
}

}  // namespace

CostTable profile_costs(const TrainingGraphSpec& spec) {
  CAMPO_CHECK(spec.precision.profile_warmup >= 0 && spec.precision.profile_steps > 0,
              "profiling needs >= 0 warm-up and > 0 timed steps");
  TrainingGraphSpec fp32 = spec;
  fp32.precision.policy = Precision::fp32;
  Graph g32;
  VariableStore v32(1);
  TrainingGraphInfo i32 = build_training_graph(g32, v32, fp32);
  const int original_nodes = g32.num_nodes();

  Graph glow;
  VariableStore vlow(1);
  TrainingGraphInfo ilow = build_training_graph(glow, vlow, fp32);
  CAMPO_CHECK(glow.num_nodes() == original_nodes, "internal: profiling graphs differ");
  std::vector<char> all_low(size_t(original_nodes), 0);
  for (NodeId i = 0; i < original_nodes; ++i) {
    const Node& n = glow.node(i);
    AmpList l = spec.precision.lists.classify(n.kind);
    all_low[size_t(i)] = (l == AmpList::allow || l == AmpList::infer || l == AmpList::clear) &&
                         n.kind != OpKind::Variable && n.kind != OpKind::Placeholder;
  }
  apply_precision(glow, all_low, spec.precision.low);

  const int64_t classes = spec.model_options.num_classes;
  std::vector<double> t32 = time_nodes(g32, v32, i32, spec.precision.profile_warmup,
                                       spec.precision.profile_steps, 7, classes);
  std::vector<double> tlow = time_nodes(glow, vlow, ilow, spec.precision.profile_warmup,
                                        spec.precision.profile_steps, 7, classes);
  CostTable costs;
  costs.nodes.resize(size_t(original_nodes));
  for (NodeId i = 0; i < original_nodes; ++i) {
    costs.nodes[size_t(i)].fp32_ms = t32[size_t(i)];
    costs.nodes[size_t(i)].low_ms = all_low[size_t(i)] ? tlow[size_t(i)] : t32[size_t(i)];
  }
  std::vector<std::pair<int64_t, double>> casts;
  for (NodeId id : glow.nodes_of_kind(OpKind::Cast))
    casts.push_back({shape_numel(glow.value(glow.node(id).inputs[0]).shape), tlow[size_t(id)]});
  costs.cast = fit_cast_model(casts);
  costs.cast.fixed_ms = std::max(0.0, costs.cast.fixed_ms);
  costs.cast.per_element_ms = std::max(0.0, costs.cast.per_element_ms);
  return costs;
}

}  // namespace campo
