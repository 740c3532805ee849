#include "train/gan_trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "amp/padding.h"
#include "datasets/image_file.h"
#include "datasets/loader.h"
#include "datasets/registry.h"
#include "datasets/synthetic.h"
#include "graph/autodiff.h"
#include "graph/checkpoint.h"
#include "runtime/atomic_file.h"
#include "runtime/file_check.h"
#include "runtime/memory_info.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/options.h"
#include "train/policy_guard.h"
#include "train/profiling.h"

namespace campo {

namespace {

ValueId variable_value(const Graph& g, const std::string& name) {
  NodeId id = g.find_node(name);
  CAMPO_CHECK(id >= 0, "internal: no variable '", name, "' in the graph");
  return g.node(id).outputs[0];
}

}  // namespace

// ---- GanSession ----

namespace {

// A host f32 tensor of `shape` holding `value` everywhere.
Tensor filled(const Shape& shape, float value) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::fill_n(t.data_as<float>(), t.numel(), value);
  return t;
}

// The gradients of `loss` (seeded by a "loss_scale" placeholder) with respect to the
// parameters of one network (`net`: netG or netD), and their optimizer updates.
void append_net_update(Builder& b, const Graph& g, const VariableStore& vars, ValueId loss,
                       const char* net, const OptimizerConfig& optimizer) {
  const std::vector<std::string> params = dcgan_parameter_names(vars, net);
  std::vector<ValueId> values;
  for (const auto& p : params) values.push_back(variable_value(g, p));
  ValueId seed_grad = b.placeholder("loss_scale", {});
  append_optimizer(b, params, append_gradients(b, loss, seed_grad, values), optimizer);
}

struct DStep {
  ValueId loss, d_x, d_g_z1;  // a model array: each of them [N], one value per model
  std::vector<ValueId> fetches() const { return {loss, d_x, d_g_z1}; }
};

// The input and the output of G's forward pass in a step graph: z and fake = G(z).
struct GeneratorPass {
  ValueId z = kNoValue, fake = kNoValue;
};

// The batch mean of `x` ([batch], or [batch, N] in an array: one mean per model).
ValueId batch_mean(Builder& b, ValueId x) {
  return b.array_size() > 1 ? b.mean(x, {0}) : b.mean(x);
}

// What a step differentiates: its loss, or in an array the sum of the models' losses.
ValueId total_loss(Builder& b, ValueId loss) { return b.array_size() > 1 ? b.sum(loss) : loss; }

// D step: loss_D = BCE(D(x), 1) + BCE(D(G(z)), 0); update D only. `array` models stack
// along axis 1 (array 1: one model).
DStep build_d_step(Graph& g, VariableStore& vars, const DcganOptions& model, int64_t batch,
                   const OptimizerConfig& optimizer, int array = 1,
                   GeneratorPass* generator = nullptr) {
  Builder b(g, vars);
  b.set_training(true);
  b.set_array_size(array);
  const int64_t n = array;
  ValueId real =
      b.placeholder("images", {batch, n * model.channels, model.image_size, model.image_size});
  ValueId z = b.placeholder("z", {batch, n * model.nz, 1, 1});
  const Shape labels = array > 1 ? Shape{batch, n} : Shape{batch};
  ValueId ones = b.placeholder("real_label", labels);
  ValueId zeros = b.placeholder("fake_label", labels);
  ValueId fake = build_dcgan_generator(b, z, model);
  if (generator) *generator = {z, fake};
  ValueId d_real = build_dcgan_discriminator(b, real, model);
  ValueId d_fake = build_dcgan_discriminator(b, fake, model);
  DStep d;
  d.loss = b.add(batch_mean(b, b.sigmoid_cross_entropy(d_real, ones)),
                 batch_mean(b, b.sigmoid_cross_entropy(d_fake, zeros)));
  d.d_x = batch_mean(b, b.sigmoid(d_real));
  d.d_g_z1 = batch_mean(b, b.sigmoid(d_fake));
  append_net_update(b, g, vars, total_loss(b, d.loss), kDiscriminatorScope, optimizer);
  return d;
}

struct GStep {
  ValueId loss, d_g_z2;  // a model array: [N] each
  std::vector<ValueId> fetches() const { return {loss, d_g_z2}; }
};
// G step as written: loss_G = BCE(D(G(z)), 1); update G only. G's forward pass is in it so
// that autodiff builds G's backward pass; without_generator_forward takes it out.
GStep build_g_step(Graph& g, VariableStore& vars, const DcganOptions& model, int64_t batch,
                   const OptimizerConfig& optimizer, int array = 1,
                   GeneratorPass* generator = nullptr) {
  Builder b(g, vars);
  b.set_training(true);
  b.set_array_size(array);
  const int64_t n = array;
  ValueId z = b.placeholder("z", {batch, n * model.nz, 1, 1});
  ValueId ones = b.placeholder("real_label", array > 1 ? Shape{batch, n} : Shape{batch});
  ValueId fake = build_dcgan_generator(b, z, model);
  if (generator) *generator = {z, fake};
  ValueId d_fake = build_dcgan_discriminator(b, fake, model);
  GStep s;
  s.loss = batch_mean(b, b.sigmoid_cross_entropy(d_fake, ones));
  s.d_g_z2 = batch_mean(b, b.sigmoid(d_fake));
  append_net_update(b, g, vars, total_loss(b, s.loss), kGeneratorScope, optimizer);
  return s;
}

// The G step without G's forward pass (see the file comment): copies `full`, a G step as
// build_g_step gives it (no casts yet, so node-id order is topological), into the empty
// graph `g`, leaving out the nodes of G's forward pass (those after z that fake depends on).
// Each of their values that a remaining node reads becomes a placeholder "saved/<node>"
// ("saved/<node>:<output>" for outputs past the first) of the value's shape and dtype (f32:
// no policy has run), to be filled from the value of the node of the same name in the D step
// graph `d`. z stays a placeholder (G's first filter gradient reads it). Returns the step's
// statistics in `g`; `saved` gets the placeholders and their sources in `d`, `copy_of_node`
// each node of `full` as a node of `g` (-1: left out).
GStep without_generator_forward(const Graph& full, const GStep& step, const GeneratorPass& pass,
                                const Graph& d, Graph& g,
                                std::vector<GanSession::SavedValue>& saved,
                                std::vector<NodeId>& copy_of_node) {
  const int n = full.num_nodes();
  const NodeId z = full.value(pass.z).producer, fake = full.value(pass.fake).producer;
  std::vector<char> after_z(size_t(n), 0), fake_needs(size_t(n), 0);
  after_z[size_t(z)] = 1;
  for (NodeId id = z + 1; id < n; ++id) {
    CAMPO_CHECK(full.node(id).kind != OpKind::Cast, "internal: the G step has casts already");
    for (ValueId v : full.node(id).inputs)
      after_z[size_t(id)] |= after_z[size_t(full.value(v).producer)];
  }
  fake_needs[size_t(fake)] = 1;
  for (NodeId id = fake; id >= 0; --id)
    if (fake_needs[size_t(id)])
      for (ValueId v : full.node(id).inputs) fake_needs[size_t(full.value(v).producer)] = 1;
  auto in_forward = [&](NodeId id) {
    return id != z && after_z[size_t(id)] && fake_needs[size_t(id)];
  };

  std::vector<ValueId> copy_of(size_t(full.num_values()), kNoValue);
  copy_of_node.assign(size_t(n), -1);
  // The placeholder of G's forward value v and its source in the D step.
  auto saved_placeholder = [&](ValueId v) {
    const Value& value = full.value(v);
    const Node& producer = full.node(value.producer);
    const NodeId source_node = d.find_node(producer.name);
    CAMPO_CHECK(source_node >= 0 && d.node(source_node).kind == producer.kind,
                "internal: the D step has no node '", producer.name, "' of G's forward pass");
    const ValueId source = d.node(source_node).outputs.at(size_t(value.output_index));
    CAMPO_CHECK(d.value(source).shape == value.shape, "internal: '", producer.name, "' is ",
                shape_str(d.value(source).shape), " in the D step, ", shape_str(value.shape),
                " in the G step");
    std::string name = "saved/" + producer.name;
    if (value.output_index > 0) name += ":" + std::to_string(value.output_index);
    const NodeId id =
        g.add_node(OpKind::Placeholder, {}, PlaceholderAttrs{value.shape, value.dtype}, name);
    CAMPO_CHECK(g.node(id).name == name, "internal: placeholder name '", name, "' is taken");
    saved.push_back({name, source});
    return g.node(id).outputs[0];
  };
  for (NodeId id = 0; id < n; ++id) {
    if (in_forward(id)) continue;
    const Node& node = full.node(id);
    std::vector<ValueId> inputs;
    for (ValueId v : node.inputs) {
      if (copy_of[size_t(v)] == kNoValue) {
        CAMPO_CHECK(in_forward(full.value(v).producer), "internal: '", node.name,
                    "' reads a value the G step has not copied");
        copy_of[size_t(v)] = saved_placeholder(v);
      }
      inputs.push_back(copy_of[size_t(v)]);
    }
    const NodeId copy =
        g.add_node(node.kind, inputs, node.attrs, node.name, node.dtype, node.phase);
    const Node& made = g.node(copy);
    CAMPO_CHECK(made.name == node.name && made.outputs.size() == node.outputs.size(),
                "internal: the G step's node '", node.name, "' did not copy");
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      CAMPO_CHECK(g.value(made.outputs[i]).shape == full.value(node.outputs[i]).shape,
                  "internal: the G step's node '", node.name, "' changed shape");
      copy_of[size_t(node.outputs[i])] = made.outputs[i];
    }
    copy_of_node[size_t(id)] = copy;
  }
  return {copy_of[size_t(step.loss)], copy_of[size_t(step.d_g_z2)]};
}

// The precision of the G step that runs, `g` (without G's forward pass, no casts yet), as
// the policy decided it for the whole G step `full` it was copied from (node ids mapped by
// `copy_of_node`; `planned` what apply_policy did to `full`): so the plan of every node that
// runs is the one it had when the G step ran G's forward pass, whose dtypes the plan took
// into account (a plan of `g` alone would take the saved placeholders for f32 values, as it
// takes every leaf). The saved placeholders first get the dtypes of their sources in the D
// step `d` (the hand-over copies them as they are; where the D step's plan of G's forward
// pass differs from the whole G step's, cast insertion converts them). Then the same
// apply_precision as the policy's (folding casts for cost-aware only, as apply_policy) and
// the same padding. Returns what apply_policy returns, by node id of `g`.
PolicyResult replay_policy(const Graph& full, const PolicyResult& planned,
                           const std::vector<NodeId>& copy_of_node,
                           const PrecisionConfig& precision,
                           const std::vector<GanSession::SavedValue>& saved, const Graph& d,
                           Graph& g, std::shared_ptr<const CostTable>& costs) {
  if (precision.policy == Precision::fp32) return planned;
  for (const GanSession::SavedValue& v : saved) {
    Node& node = g.node(g.find_node(v.placeholder));
    Value& value = g.value(node.outputs[0]);
    value.dtype = d.value(v.source).dtype;
    node.attrs = PlaceholderAttrs{value.shape, value.dtype};
  }
  const int n = g.num_nodes();
  std::vector<char> low(size_t(n), 0);
  for (NodeId id = 0; id < NodeId(copy_of_node.size()); ++id) {
    const NodeId copy = copy_of_node[size_t(id)];
    if (copy < 0) continue;
    low[size_t(copy)] = full.node(id).dtype == precision.low;
    g.node(copy).pad_to = full.node(id).pad_to;
  }
  const bool fold = precision.policy == Precision::cost_aware && precision.fold_casts;
  PolicyResult r;
  if (planned.cost_plan) {  // the costs and decisions of the nodes that run, by g's ids
    auto table = std::make_shared<CostTable>(*costs);
    auto plan = std::make_shared<CostAwarePlan>(*planned.cost_plan);
    table->nodes.assign(size_t(n), {});
    table->low_measured.assign(costs->low_measured.empty() ? 0 : size_t(n), 0);
    plan->low.assign(size_t(n), 0);
    plan->decided_by.assign(size_t(n), Traversal::none);
    for (NodeId id = 0; id < NodeId(copy_of_node.size()); ++id) {
      const size_t copy = size_t(copy_of_node[size_t(id)]);
      if (copy_of_node[size_t(id)] < 0) continue;
      if (size_t(id) < costs->nodes.size()) table->nodes[copy] = costs->nodes[size_t(id)];
      if (size_t(id) < costs->low_measured.size())
        table->low_measured[copy] = costs->low_measured[size_t(id)];
      plan->low[copy] = planned.cost_plan->low.at(size_t(id));
      plan->decided_by[copy] = planned.cost_plan->decided_by.at(size_t(id));
    }
    plan->predicted_ms = predict_step_ms(g, *table, low, fold);
    costs = std::move(table);
    r.cost_plan = std::move(plan);
  }
  apply_precision(g, low, precision.low, fold);
  r.pad_to = planned.pad_to;
  r.padding_candidates =
      int(padding_candidates(g, planned.pad_to > 0 ? planned.pad_to : kPadTo).size());
  for (const Node& node : g.nodes()) r.padded += node.pad_to > 0;
  return r;
}

// cost-aware: the costs of a step graph built by `build`, which it calls on scratch
// variables so that the session's weights and optimizer state are not touched by the timed
// steps (or `fixed`'s table of it); null for the other policies.
std::shared_ptr<const CostTable> gan_step_costs(
    const PrecisionConfig& precision, std::shared_ptr<Backend> backend,
    const GanSession::StepCosts& fixed,
    const std::function<std::vector<ValueId>(Graph&, VariableStore&)>& build) {
  if (precision.policy != Precision::cost_aware) return nullptr;
  CAMPO_CHECK(!precision.costs,
              "dcgan: cost-aware profiles its two step graphs itself; a "
              "fixed cost table describes one graph and cannot be used");
  Graph scratch;
  VariableStore scratch_vars(1, std::move(backend));  // the profiling step runs there
  const std::vector<ValueId> fetches = build(scratch, scratch_vars);
  if (fixed) return std::make_shared<const CostTable>(fixed(scratch));
  TimingInputs inputs;
  inputs.constants = {{"lr", 0.0f},
                      {"step", 1.0f},
                      {"loss_scale", 1.0f},
                      {"real_label", 1.0f},
                      {"fake_label", 0.0f}};
  return std::make_shared<const CostTable>(
      graph_costs(scratch, scratch_vars, fetches, inputs, precision));
}

}  // namespace

namespace {

// The noise of a session of seed `seed` (z of every step) and its fixed sample noise.
uint64_t noise_seed(uint64_t seed) { return mix_seed(seed, 0x6e6f697365); }
uint64_t fixed_noise_seed(uint64_t seed) { return mix_seed(seed, 0x6669786564); }

// Fills block `model` of `n` of z [rows, n nz(, 1, 1)] from `rng`, in the order a single
// session fills its z [rows, nz(, 1, 1)] (row by row).
void fill_noise(Tensor& z, int model, int n, Rng& rng) {
  const int64_t rows = z.dim(0), nz = z.dim(1) / n;
  float* p = z.data_as<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < nz; ++k) p[(r * n + model) * nz + k] = rng.normal();
}

}  // namespace

GanSession::GanSession(const DcganOptions& model, int64_t batch, const OptimizerConfig& optimizer,
                       uint64_t seed, std::shared_ptr<Backend> backend, int64_t num_samples,
                       const PrecisionConfig& precision, ConvLayout conv_layout,
                       const StepCosts& step_costs)
    : GanSession(model, batch, optimizer, one_model(optimizer, seed), std::move(backend),
                 num_samples, precision, conv_layout, step_costs) {}

GanSession::GanSession(const DcganOptions& model, int64_t batch, OptimizerConfig optimizer,
                       const ArrayHyperparameters& h, std::shared_ptr<Backend> backend,
                       int64_t num_samples, const PrecisionConfig& precision,
                       ConvLayout conv_layout, const StepCosts& step_costs)
    : model_(model),
      batch_(batch),
      n_(h.size()),
      hyper_(h),
      vars_(h.seed.empty() ? 0 : h.seed[0], std::move(backend)),  // refuses a null one
      slices_(h.size()) {
  check_dcgan_options(model);
  h.check();
  for (float d : h.dropout) CAMPO_CHECK(d == 0.0f, "dcgan has no dropout (got ", d, ")");
  check_gan_precision(precision);
  CAMPO_CHECK(!optimizer.stores_low_precision(),
              "--master-weights none and --optimizer-state bf16 do not support dcgan yet (its "
              "D and G step graphs are built apart): train it with f32 weights and state");
  CAMPO_CHECK(batch > 0, "GAN batch must be positive, got ", batch);
  CAMPO_CHECK(num_samples > 0, "GAN sample count must be positive, got ", num_samples);
  for (uint64_t s : h.seed) noise_rngs_.emplace_back(noise_seed(s));

  // Each model's starting weights (arrays): its single session's, built on a store of its
  // seed in the single session's order (the D step's graph, then the G step's).
  if (n_ > 1) {
    for (int i = 0; i < n_; ++i) {
      VariableStore single(h.seed[size_t(i)], vars_.backend_ptr());
      Graph d, g;
      build_d_step(d, single, model, batch, model_optimizer(optimizer, h, i));
      build_g_step(g, single, model, batch, model_optimizer(optimizer, h, i));
      slices_.add_model(single);
    }
  }
  optimizer = array_optimizer(optimizer, h);
  const uint64_t seed = h.seed[0];
  const Shape labels = n_ > 1 ? Shape{batch, n_} : Shape{batch};
  {
    const DStep d = build_d_step(d_graph_, vars_, model, batch, optimizer, n_);
    loss_d_ = d.loss;
    d_x_ = d.d_x;
    d_g_z1_ = d.d_g_z1;
    d_costs_ =
        gan_step_costs(precision, vars_.backend_ptr(), step_costs, [&](Graph& g, VariableStore& v) {
          return build_d_step(g, v, model, batch, optimizer, n_).fetches();
        });
    d_policy_ = apply_policy(d_graph_, precision, d_costs_.get(), vars_.backend_ptr());
  }
  {  // G's forward pass cut out (see the file comment); planned as the whole G step.
    Graph full;
    GeneratorPass pass;
    const GStep whole = build_g_step(full, vars_, model, batch, optimizer, n_, &pass);
    std::vector<NodeId> copy_of_node;
    const GStep s =
        without_generator_forward(full, whole, pass, d_graph_, g_graph_, saved_, copy_of_node);
    loss_g_ = s.loss;
    d_g_z2_ = s.d_g_z2;
    g_costs_ =
        gan_step_costs(precision, vars_.backend_ptr(), step_costs, [&](Graph& g, VariableStore& v) {
          return build_g_step(g, v, model, batch, optimizer, n_).fetches();
        });
    const PolicyResult planned = apply_policy(full, precision, g_costs_.get(), vars_.backend_ptr());
    g_policy_ =
        replay_policy(full, planned, copy_of_node, precision, saved_, d_graph_, g_graph_, g_costs_);
  }
  if (n_ > 1) {
    slices_.write_into(vars_);
  }
  // The three graphs take turns in one arena (step() reads the D step's values before the
  // G step runs).
  const auto arena = std::make_shared<SharedArena>(vars_.backend_ptr());
  {
    CompileOptions co;
    co.fetches = d_fetches();
    for (const SavedValue& v : saved_) co.fetches.push_back(v.source);  // for the G step
    co.seed = seed;
    co.conv_layout = conv_layout;
    co.arena = arena;
    d_exe_ = std::make_unique<Executable>(d_graph_, vars_, co);
    d_exe_->feed_scalar("loss_scale", 1.0f);
    d_exe_->feed("real_label", filled(labels, 1.0f));
    d_exe_->feed("fake_label", filled(labels, 0.0f));
  }
  {
    CompileOptions co;
    co.fetches = g_fetches();
    co.seed = seed + 1;
    co.conv_layout = conv_layout;
    co.arena = arena;
    g_exe_ = std::make_unique<Executable>(g_graph_, vars_, co);
    g_exe_->feed_scalar("loss_scale", 1.0f);
    g_exe_->feed("real_label", filled(labels, 1.0f));
    for (const SavedValue& v : saved_) handoff_.push_back({g_exe_->input(v.placeholder), v.source});
  }
  {  // Samples of the fixed noise, G in training mode (as the example).
    Builder b(sample_graph_, vars_);
    b.set_training(true);
    b.set_array_size(n_);
    ValueId z = b.placeholder("z", {num_samples, int64_t(n_) * model.nz, 1, 1});
    samples_ = build_dcgan_generator(b, z, model);
    CompileOptions co;
    co.fetches = {samples_};
    co.conv_layout = conv_layout;
    co.arena = arena;
    sample_exe_ = std::make_unique<Executable>(sample_graph_, vars_, co);
    Tensor fz = Tensor::empty(sample_exe_->input_shape("z"), DType::f32);
    for (int i = 0; i < n_; ++i) {
      Rng fixed(fixed_noise_seed(h.seed[size_t(i)]));
      fill_noise(fz, i, n_, fixed);
    }
    sample_exe_->feed("z", fz);
  }
}

GanSession::~GanSession() = default;

void GanSession::save(const std::string& path, int64_t epoch, int64_t position_in_epoch,
                      const std::string& optimizer) {
  CAMPO_CHECK(n_ == 1, "internal: GanSession::save of an array of ", n_,
              " models (save_model writes one model)");
  save_model(0, path, epoch, position_in_epoch, optimizer);
}

void GanSession::save_model(int i, const std::string& path, int64_t epoch,
                            int64_t position_in_epoch, const std::string& optimizer) {
  CAMPO_CHECK(i >= 0 && i < n_, "internal: model ", i, " of a GAN array of ", n_);
  CheckpointMeta meta;
  meta.model = "dcgan";
  meta.step = iterations_;
  meta.epoch = epoch;
  meta.position_in_epoch = position_in_epoch;
  meta.optimizer = optimizer;
  meta.rng_states["noise"] = rng_state_to_string(noise_rngs_[size_t(i)].state());
  meta.rng_states["d_step"] = rng_state_to_string(d_exe_->context().rng.state());
  meta.rng_states["g_step"] = rng_state_to_string(g_exe_->context().rng.state());
  meta.extra["d_executor_step"] = std::to_string(d_exe_->context().step);
  meta.extra["g_executor_step"] = std::to_string(g_exe_->context().step);
  // The samples of a step (dcgan runs on one process: --batch): the position above counts
  // steps, so it means these samples only at this batch (restore refuses another).
  meta.extra["global_batch"] = std::to_string(batch_);
  if (n_ == 1) {
    save_checkpoint(path, vars_, meta);
    return;
  }
  slices_.save_model(path, vars_, i, hyper_, meta);
}

Tensor GanSession::read_model_variable(int i, const std::string& name) const {
  CAMPO_CHECK(i >= 0 && i < n_, "model ", i, " of a GAN array of ", n_);
  if (n_ == 1) return vars_.read(name);
  return slices_.read(vars_, i, name);
}

GanSession::Position GanSession::restore(const std::string& path, const std::string& optimizer) {
  CAMPO_CHECK(n_ == 1, "a GAN array of ", n_,
              " models cannot be restored; restore each model's checkpoint into a single "
              "session (campo train --model dcgan --resume PATH-<i>.safetensors)");
  // Everything is checked before anything changes: the metadata from the header first
  // (a classifier's checkpoint fails here, not on a missing tensor), then load_checkpoint
  // validates and stages every tensor before it writes any.
  const std::map<std::string, std::string> header = read_safetensors_metadata(path);
  const auto model = header.find("campo.model");
  CAMPO_CHECK(model != header.end() && model->second == "dcgan", "checkpoint ", path,
              " holds model '", model == header.end() ? std::string() : model->second,
              "', not 'dcgan' (resume a dcgan run from a checkpoint its --save wrote)");
  const auto trained = header.find("campo.optimizer");
  CAMPO_CHECK(trained != header.end() && trained->second == optimizer, "checkpoint ", path,
              " was trained with optimizer '",
              trained == header.end() ? std::string() : trained->second, "', not '", optimizer,
              "'");
  for (const char* name : {"noise", "d_step", "g_step"})
    CAMPO_CHECK(header.count(std::string("campo.rng.") + name), "checkpoint ", path,
                " has no metadata 'campo.rng.", name,
                "' (it was not written by a dcgan run's --save)");
  const Rng::State noise = rng_state_from_string(header.at("campo.rng.noise"));
  const Rng::State d_rng = rng_state_from_string(header.at("campo.rng.d_step"));
  const Rng::State g_rng = rng_state_from_string(header.at("campo.rng.g_step"));
  CheckpointMeta counters;  // the executor steps and the batch, as load_checkpoint's extras
  for (const char* key : {"d_executor_step", "g_executor_step", "global_batch"})
    if (auto it = header.find(key); it != header.end()) counters.extra[key] = it->second;
  const int64_t most = int64_t(1) << 53;
  const int64_t d_step = checkpoint_extra_int(path, counters, "d_executor_step", 0, most, 0);
  const int64_t g_step = checkpoint_extra_int(path, counters, "g_executor_step", 0, most, 0);
  // The position is in steps of the saved batch: at another --batch it would name other
  // samples, so another batch is refused, as a classifier's checkpoint does (train/trainer.cc).
  // A checkpoint written before dcgan recorded its batch is taken as of this run's batch, as
  // a classifier's from before its field is: refusing would strand every such run's
  // checkpoint, and resuming one at the batch it was written with (the usual case) is right.
  const int64_t saved_batch =
      checkpoint_extra_int(path, counters, "global_batch", 1, int64_t(1) << 40, batch_);
  CAMPO_CHECK(saved_batch == batch_, "checkpoint ", path, " was written by steps of ", saved_batch,
              " samples (--batch); this run's take ", batch_, ": resume it with --batch ",
              saved_batch);
  // Validates the whole file and changes the variables only when all of it loads.
  const CheckpointMeta meta = load_checkpoint(path, vars_);
  iterations_ = meta.step;
  noise_rngs_[0].set_state(noise);
  d_exe_->context().rng.set_state(d_rng);
  g_exe_->context().rng.set_state(g_rng);
  d_exe_->context().step = d_step;
  g_exe_->context().step = g_step;
  return {meta.epoch, meta.position_in_epoch};
}

int64_t GanSession::generator_parameters() const {
  int64_t n = 0;
  for (const auto& name : dcgan_parameter_names(vars_, kGeneratorScope))
    n += vars_.at(name).numel();
  return n / n_;
}

int64_t GanSession::discriminator_parameters() const {
  int64_t n = 0;
  for (const auto& name : dcgan_parameter_names(vars_, kDiscriminatorScope))
    n += vars_.at(name).numel();
  return n / n_;
}

std::vector<StepGraph> GanSession::step_graphs() {
  // Timed alone: a step at rate 0 with the usual labels.
  TimingInputs in;
  in.constants = {
      {"lr", 0.0f}, {"loss_scale", 1.0f}, {"step", 1.0f}, {"real_label", 1.0f}, {"fake_label", 0.0f}};
  return {{"discriminator step", "D step", &d_graph_, d_fetches(), d_costs(), d_plan(), {}, in},
          {"generator step", "G step", &g_graph_, g_fetches(), g_costs(), g_plan(), {}, in}};
}

Batch GanSession::random_batch(Rng& rng) const {
  Batch b;
  b.images = Tensor::empty({batch_, model_.channels, model_.image_size, model_.image_size},
                           DType::f32);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data_as<float>()[i] = rng.uniform(-1, 1);
  return b;
}

MemoryReport GanSession::memory() const {
  return memory_report(vars_, {d_exe_.get(), g_exe_.get(), sample_exe_.get()});
}

void GanSession::set_profiling(bool on) {
  if (on) profile_.reset();
  profile_.attach(*d_exe_, d_graph_, on);
  profile_.attach(*g_exe_, g_graph_, on);
}

FlopCount GanSession::step_flops() const {
  FlopCount c = count_step_flops(d_graph_, d_fetches());
  c += count_step_flops(g_graph_, g_fetches());
  return c;
}

double GanSession::predicted_step_ms() const {
  return d_plan() ? d_plan()->predicted_ms + g_plan()->predicted_ms : 0.0;
}

GanSession::StepStats GanSession::step(const Tensor& real, float lr) {
  CAMPO_CHECK(n_ == 1, "internal: GanSession::step of one batch on an array of ", n_,
              " models (give one batch and learning rate per model)");
  return step(std::vector<const Tensor*>{&real}, std::vector<float>{lr})[0];
}

std::vector<GanSession::StepStats> GanSession::step(const std::vector<const Tensor*>& real,
                                                    const std::vector<float>& lr) {
  return step(real, lr, {}, {});
}

std::vector<GanSession::StepStats> GanSession::step(const std::vector<const Tensor*>& real,
                                                    const std::vector<float>& lr,
                                                    const std::vector<const Batch*>& key,
                                                    const std::vector<const Batch*>& next) {
  CAMPO_CHECK(int(real.size()) == n_ && int(lr.size()) == n_, "internal: ", real.size(),
              " batches and ", lr.size(), " learning rates for a GAN array of ", n_);
  const Shape expected = {batch_, model_.channels, model_.image_size, model_.image_size};
  for (const Tensor* r : real)
    CAMPO_CHECK(r->shape() == expected && r->dtype() == DType::f32, "GAN step: real images have ",
                "shape ", shape_str(r->shape()), ", the graphs were compiled for ",
                shape_str(expected));
  ++iterations_;
  const float t = float(iterations_);

  Tensor z = Tensor::empty(d_exe_->input_shape("z"), DType::f32);
  for (int i = 0; i < n_; ++i) fill_noise(z, i, n_, noise_rngs_[size_t(i)]);
  auto feed_lr = [&](Executable& exe) {
    if (n_ == 1)
      exe.feed_scalar("lr", lr[0]);
    else
      exe.feed("lr", Tensor::from_vector(lr, {int64_t(n_)}));
  };
  d_exe_->feed("z", z);
  if (!prefetch_.land(*d_exe_, key)) d_exe_->feed("images", stack_model_inputs(real, batch_));
  feed_lr(*d_exe_);
  if (d_exe_->has_input("step")) d_exe_->feed_scalar("step", t);  // Adam's bias correction
  std::vector<StepStats> s(static_cast<size_t>(n_));
  // Each fetch holds one value per model (a scalar for one model).
  auto read = [&](Executable& exe, ValueId v, float StepStats::*field) {
    const Tensor values = exe.fetch(v);
    CAMPO_CHECK(values.numel() == n_, "internal: a GAN statistic of ", values.numel(),
                " values for ", n_, " models");
    for (int i = 0; i < n_; ++i) s[size_t(i)].*field = values.data_as<float>()[i];
  };
  d_exe_->run();
  if (!next.empty()) {
    std::vector<const Tensor*> images;
    for (const Batch* b : next) images.push_back(&b->images);
    prefetch_.upload(*d_exe_, {{"images", stack_model_inputs(images, batch_)}}, next);
  }
  // The D step's values before the G step runs in the arena they share: its statistics,
  // and fake = G(z), the activations G's backward pass reads and z, copied on the device.
  read(*d_exe_, loss_d_, &StepStats::loss_d);
  read(*d_exe_, d_x_, &StepStats::d_x);
  read(*d_exe_, d_g_z1_, &StepStats::d_g_z1);
  // (Looked up each step: the arena moves when a graph compiled later grows it.)
  for (const auto& [to, from] : handoff_) vars_.backend().copy(to, d_exe_->output(from));
  if (g_exe_->has_input("z")) vars_.backend().copy(g_exe_->input("z"), d_exe_->input("z"));
  feed_lr(*g_exe_);
  if (g_exe_->has_input("step")) g_exe_->feed_scalar("step", t);  // Adam's bias correction
  g_exe_->run();
  read(*g_exe_, loss_g_, &StepStats::loss_g);
  read(*g_exe_, d_g_z2_, &StepStats::d_g_z2);
  return s;
}

std::vector<StepValue> GanSession::step_values() const {
  return {{"loss_d", "loss_D", "loss_d"},
          {"loss_g", "loss_G", "loss_g"},
          {"d_x", "D(x)", "d_x"},
          {"d_g_z1", "D(G(z))", "d_g_z"},
          {"d_g_z2", "", ""}};  // printed as D(G(z)) before/after D's update
}

std::vector<std::vector<float>> GanSession::step_models(const std::vector<const Batch*>& batches,
                                                        const std::vector<float>& lr,
                                                        const std::vector<const Batch*>& next) {
  std::vector<const Tensor*> real;
  for (const Batch* b : batches) real.push_back(&b->images);
  std::vector<std::vector<float>> out;
  for (const StepStats& s : step(real, lr, batches, next))
    out.push_back({s.loss_d, s.loss_g, s.d_x, s.d_g_z1, s.d_g_z2});
  return out;
}

Tensor GanSession::generate_samples() {
  CAMPO_CHECK(n_ == 1, "internal: generate_samples of a GAN array (generate_model_samples)");
  sample_exe_->run();
  return sample_exe_->fetch(samples_);
}

std::vector<Tensor> GanSession::generate_model_samples() {
  sample_exe_->run();
  const Tensor all = sample_exe_->fetch(samples_);  // [rows, N nc, S, S]
  const int64_t rows = all.dim(0), block = all.numel() / rows / n_;
  std::vector<Tensor> out;
  for (int i = 0; i < n_; ++i) {  // model i's channel block
    Tensor one =
        Tensor::empty({rows, model_.channels, model_.image_size, model_.image_size}, DType::f32);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(one.data_as<float>() + r * block, all.data_as<float>() + (r * n_ + i) * block,
                  size_t(block) * sizeof(float));
    out.push_back(std::move(one));
  }
  return out;
}

GanSession::StepCosts given_step_costs(std::vector<std::shared_ptr<const CostTable>> costs) {
  if (costs.empty()) return nullptr;
  auto next = std::make_shared<size_t>(0);
  return [costs = std::move(costs), next](const Graph&) {
    CAMPO_CHECK(*next < costs.size() && costs[*next], "internal: ", costs.size(),
                " step graphs' costs given, step graph ", *next + 1, " asked for");
    return *costs[(*next)++];
  };
}

void check_gan_training_options(const TrainOptions& o) {
  CAMPO_CHECK(o.dataset == "fashion-mnist" || o.dataset == "mnist" || o.dataset == "synthetic",
              "unknown GAN dataset '", o.dataset,
              "' (expected fashion-mnist, mnist or synthetic)");
  CAMPO_CHECK(o.image_size == 0 || o.image_size == 32 || o.image_size == 64,
              "--image-size must be 32 or 64 for dcgan, got ", o.image_size);
  CAMPO_CHECK(o.nz > 0 && o.ngf > 0 && o.ndf > 0, "--nz, --ngf and --ndf must be positive, got ",
              o.nz, ", ", o.ngf, ", ", o.ndf);
  check_gan_precision(precision_config(o));
  if (!o.samples_dir.empty()) require_output_directory(o.samples_dir, "--samples-dir");
}

// ---- the training loop ----

GanResult train_gan(const TrainOptions& o, std::ostream& all_log, bool log_is_terminal,
                    const CalibrationSource& calibration) {
  check_gan_training_options(o);
  Timer wall;
  const RunStart start = start_run(o, all_log);  // DCGAN: one process (validate)
  const std::shared_ptr<Backend>& backend = start.backend;
  std::ostream& log = *start.log;
  const ArrayHyperparameters& h = start.h;
  const int n = h.size();
  const bool is_array = n > 1;
  // shared: the first seed's data and order for every model; independent: each model's own.
  const bool independent = is_array && o.array.shuffle == ArrayShuffle::independent;
  DcganOptions mopts;
  mopts.image_size = o.image_size > 0 ? o.image_size : 64;
  mopts.channels = o.channels > 0 ? o.channels : 1;
  mopts.nz = o.nz;
  mopts.ngf = o.ngf;
  mopts.ndf = o.ndf;

  DatasetOptions dopts;
  dopts.data_dir = o.data_dir;
  dopts.image_size = mopts.image_size;
  dopts.channels = mopts.channels;
  dopts.mean = 0.5f;  // [0, 1] pixels -> [-1, 1]
  dopts.stddev = 0.5f;
  if (o.dataset == "synthetic" && o.train_limit > 0) dopts.synthetic_size = o.train_limit;
  PrecisionConfig precision = precision_config(o);
  TrainingLoopOptions loop = loop_options(o, start, precision, log_is_terminal);
  // Model i's data: a single run of seed_i opens the data set with its seed (the synthetic
  // data set's pixels depend on it) and shuffles with it.
  for (int i = 0; i < (independent ? n : 1); ++i) {
    if (i > 0 && o.dataset != "synthetic") {  // the files do not depend on the seed
      loop.train.push_back(loop.train[0]);
    } else {
      dopts.seed = h.seed[size_t(i)];
      loop.train.push_back(dataset_view(open_dataset(o.dataset, "train", dopts), o.train_limit,
                                        o.dataset == "synthetic"));
    }
    loop.shuffle_seeds.push_back(h.seed[size_t(i)]);
  }
  const Dataset& data = *loop.train[0];
  const Shape expected = {mopts.channels, mopts.image_size, mopts.image_size};
  CAMPO_CHECK(data.image_shape() == expected, "internal: ", data.name(), " gives images ",
              shape_str(data.image_shape()), ", expected ", shape_str(expected));
  CAMPO_CHECK(data.size() >= o.batch, "--batch ", o.batch, " is larger than the ", data.size(),
              " training samples of ", data.name());

  OptimizerConfig optimizer = optimizer_config(o);
  optimizer.beta1 = kDcganAdamBeta1;
  attach_calibration(precision, calibration, *backend, log);
  const DeviceReport device_report(backend);
  // cost-aware: its plans against fp32's and amp's, measured; the run takes the faster one.
  SessionSpec spec;
  spec.graph.model = o.model;
  spec.graph.image_shape = {mopts.channels, mopts.image_size, mopts.image_size};
  spec.graph.batch = o.batch;
  spec.graph.optimizer = optimizer;
  spec.graph.precision = precision;
  spec.graph.array = n;
  spec.models = h;
  spec.conv_layout = o.conv_layout;
  const SessionFactory timing_session = [&](const SessionSpec& s) {
    return std::make_unique<GanSession>(mopts, s.graph.batch, s.graph.optimizer, s.models,
                                        backend, 1, s.graph.precision, s.conv_layout,
                                        given_step_costs(s.step_costs));
  };
  const GuardVerdict guard = build_with_batch_advice(
      o.batch, [&] { return guard_run(spec, timing_session, o.guard ? "" : "--no-guard", log); });
  apply_guard(spec, guard);
  precision = spec.graph.precision;
  loop.precision_config = precision;  // what the run trains with
  GanSession session = build_with_batch_advice(o.batch, [&] {
    return GanSession(mopts, o.batch, optimizer, h, backend, 64, precision, o.conv_layout,
                      given_step_costs(spec.step_costs));
  });

  if (!o.samples_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.samples_dir, ec);
    CAMPO_CHECK(!ec && std::filesystem::is_directory(o.samples_dir),
                "cannot create the samples directory '", o.samples_dir, "'",
                ec ? ": " + ec.message() : std::string());
  }
  GanResult r;
  r.parameters_g = session.generator_parameters();
  r.parameters_d = session.discriminator_parameters();
  r.models.assign(size_t(n), {});
  loop.display_window = 10;
  const std::string size = std::to_string(mopts.image_size);
  loop.what = std::string(is_array ? "an array of " + std::to_string(n) + " " : "") + "dcgan " +
              size + "x" + size + "x" + std::to_string(mopts.channels) + " (G " +
              std::to_string(r.parameters_g) + ", D " + std::to_string(r.parameters_d) +
              " parameters" + (is_array ? " each" : "") + ")";
  loop.end_of_epoch = [&](int epoch) {  // each model's sample grid of its fixed noise
    if (o.samples_dir.empty()) return;
    char name[32];
    std::snprintf(name, sizeof name, "epoch_%03d.png", epoch + 1);
    const std::string path = (std::filesystem::path(o.samples_dir) / name).string();
    const std::vector<Tensor> samples = session.generate_model_samples();
    for (int i = 0; i < n; ++i) {
      const std::string file = is_array ? array_checkpoint_path(path, i) : path;
      write_png_grid(file, samples[size_t(i)], 8, 2);
      r.models[size_t(i)].sample_files.push_back(file);
      if (o.report.progress != Progress::none) log << "wrote " << file << "\n";
    }
  };
  loop.result = {{"model", o.model},
                 {"dataset", o.dataset},
                 {"image_size", mopts.image_size},
                 {"channels", mopts.channels},
                 {"parameters_g", r.parameters_g},
                 {"parameters_d", r.parameters_d}};
  if (guard.reported()) loop.result["guard"] = guard.json();
  loop.model_fields = [&](int i) {
    const std::vector<std::string>& files = r.models[size_t(i)].sample_files;
    nlohmann::ordered_json m;
    if (is_array) {
      m["lr"] = h.lr[size_t(i)];
      if (o.optimizer == OptimizerConfig::Kind::sgd) m["momentum"] = h.momentum[size_t(i)];
      m["weight_decay"] = h.weight_decay[size_t(i)];
      m["seed"] = h.seed[size_t(i)];
    }
    m["samples"] = files.empty() ? "" : files.back();
    return m;
  };
  if (const std::string& path = o.checkpoint.resume_path; !path.empty()) {  // one model only
    const GanSession::Position pos = session.restore(path, optimizer_name(o.optimizer));
    loop.resumed = Resumed{.path = path,
                           .epoch = pos.epoch,
                           .position_in_epoch = pos.position_in_epoch,
                           .steps = session.iterations()};
  }
  const TrainingLoopResult run = run_training(session, loop, device_report, wall, log);
  r.steps = run.steps;
  r.profile = run.profile;
  for (int i = 0; i < n; ++i) {
    GanModelResult& m = r.models[size_t(i)];
    const std::vector<double>& f = run.final_values[size_t(i)];
    m.loss_d = f[0];
    m.loss_g = f[1];
    m.d_x = f[2];
    m.d_g_z = f[3];
    m.loss_d_history = run.values[size_t(i)][0];
    m.loss_g_history = run.values[size_t(i)][1];
    if (!run.checkpoints.empty()) m.checkpoint = run.checkpoints[size_t(i)];
  }
  const GanModelResult& first = r.models[0];
  r.loss_d = first.loss_d;
  r.loss_g = first.loss_g;
  r.d_x = first.d_x;
  r.d_g_z = first.d_g_z;
  r.loss_d_history = first.loss_d_history;
  r.loss_g_history = first.loss_g_history;
  r.sample_files = first.sample_files;
  r.samples_per_sec = run.samples_per_sec;
  r.wall_seconds = run.wall_seconds;
  return r;
}

}  // namespace campo

namespace campo {

PrecisionSummary GanSession::precision_summary() const {
  PrecisionSummary d = summarize_precision(d_graph_, d_fetches()),
                   g = summarize_precision(g_graph_, g_fetches());
  d.low_nodes += g.low_nodes;
  d.f32_nodes += g.f32_nodes;
  d.casts.casts += g.casts.casts;
  d.casts.cast_elements += g.casts.cast_elements;
  d.casts.folded += g.casts.folded;
  d.casts.weight_copies += g.casts.weight_copies;
  // The calibration's check of the two step graphs: D's, unless G's did not fit.
  for (const std::shared_ptr<const CostTable>& costs : {d_costs_, g_costs_})
    if (costs && (d.calibration.verdict == CalibrationFit::Verdict::none ||
                  costs->calibration.verdict == CalibrationFit::Verdict::misfit))
      d.calibration = costs->calibration;
  return d;
}

}  // namespace campo
