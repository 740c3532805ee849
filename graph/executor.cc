#include "graph/executor.h"

#include <algorithm>

#include "runtime/timer.h"

namespace campo {

Executable::Executable(const Graph& graph, VariableStore& vars, const CompileOptions& options)
    : graph_(graph), vars_(vars), options_(options) {
  CAMPO_CHECK(options.device == Device::cpu, "device ", device_name(options.device),
              " is not supported by this executor yet");
  ctx_.rng.reseed(options.seed);

  // Dead-code elimination: keep what the fetches and side-effecting nodes need.
  const std::vector<char> live = live_nodes(graph, options.fetches);
  for (NodeId id : graph.topological_order())
    if (live[size_t(id)]) schedule_.push_back(id);

  // Lifetimes of intermediate values.
  const int n_sched = int(schedule_.size());
  std::vector<int> first(size_t(graph.num_values()), -1), last(size_t(graph.num_values()), -1);
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(schedule_[size_t(pos)]);
    for (ValueId v : n.outputs) first[size_t(v)] = last[size_t(v)] = pos;
    for (ValueId v : n.inputs) last[size_t(v)] = std::max(last[size_t(v)], pos);
  }
  for (ValueId v : options.fetches) last[size_t(v)] = n_sched;

  values_.resize(size_t(graph.num_values()));
  std::vector<BufferRequest> requests;
  std::vector<ValueId> planned;
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(schedule_[size_t(pos)]);
    if (n.kind == OpKind::Variable) {
      Tensor& t = vars.at(n.name);
      const Value& val = graph.value(n.outputs[0]);
      CAMPO_CHECK(t.shape() == val.shape && t.dtype() == val.dtype, "variable '", n.name,
                  "' is ", dtype_name(t.dtype()), shape_str(t.shape()), " but the graph expects ",
                  dtype_name(val.dtype), shape_str(val.shape));
      values_[size_t(n.outputs[0])] = Tensor::borrow(t.data(), t.shape(), t.dtype());
    } else if (n.kind == OpKind::Placeholder) {
      const Value& val = graph.value(n.outputs[0]);
      Tensor t = Tensor::zeros(val.shape, val.dtype);
      values_[size_t(n.outputs[0])] = t;
      placeholders_.push_back({n.name, t});
    } else if (n.weight_copy) {
      // Persistent: it lives from one step to the next, outside the arena.
      CAMPO_CHECK(n.kind == OpKind::Cast && graph.node(graph.value(n.inputs[0]).producer).kind ==
                                                OpKind::Variable,
                  "internal: weight copy '", n.name, "' is not a Cast of a variable");
      const Value& val = graph.value(n.outputs[0]);
      values_[size_t(n.outputs[0])] = Tensor::zeros(val.shape, val.dtype);
      copy_positions_.push_back(size_t(pos));
    } else {
      for (ValueId v : n.outputs) {
        const Value& val = graph.value(v);
        requests.push_back({size_t(shape_numel(val.shape)) * dtype_size(val.dtype),
                            first[size_t(v)], last[size_t(v)]});
        planned.push_back(v);
      }
    }
  }
  plan_ = plan_memory(requests);
  arena_.reset(alloc_host(plan_.arena_bytes));
  for (size_t i = 0; i < planned.size(); ++i) {
    const Value& val = graph.value(planned[i]);
    values_[size_t(planned[i])] =
        Tensor::borrow(static_cast<char*>(arena_.get()) + plan_.offsets[i], val.shape, val.dtype);
  }

  // Kernels and argument lists, built once.
  kernels_.resize(size_t(n_sched));
  node_inputs_.resize(size_t(n_sched));
  node_outputs_.resize(size_t(n_sched));
  node_times_ms_.assign(size_t(n_sched), 0.0);
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(schedule_[size_t(pos)]);
    for (ValueId v : n.inputs) node_inputs_[size_t(pos)].push_back(values_[size_t(v)]);
    for (ValueId v : n.outputs) node_outputs_[size_t(pos)].push_back(values_[size_t(v)]);
    if (n.kind == OpKind::Variable || n.kind == OpKind::Placeholder) continue;
    KernelSpec spec{n.kind, n.attrs, n.dtype, {}, {}, n.name, n.pad_to};
    for (ValueId v : n.inputs) spec.inputs.push_back(desc_of(graph, v));
    for (ValueId v : n.outputs) spec.outputs.push_back(desc_of(graph, v));
    kernels_[size_t(pos)] = create_kernel(spec, options.device, ctx_);
  }
  // Weight copies run apart from the step (refresh_weight_copies).
  for (size_t pos : copy_positions_) copy_kernels_.push_back(std::move(kernels_[pos]));
  update_begin_ = size_t(n_sched);
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(schedule_[size_t(pos)]);
    if (!kernels_[size_t(pos)]) continue;
    if (n.phase == Phase::update && update_begin_ == size_t(n_sched)) update_begin_ = size_t(pos);
    CAMPO_CHECK(update_begin_ == size_t(n_sched) || n.phase == Phase::update,
                "internal: node '", n.name, "' is scheduled after an optimizer update");
  }
}

Executable::~Executable() = default;

void Executable::refresh_weight_copies() {
  if (copy_positions_.empty() || copies_generation_ == vars_.generation()) return;
  for (size_t i = 0; i < copy_positions_.size(); ++i) {
    const size_t pos = copy_positions_[i];
    copy_kernels_[i]->run(ctx_, node_inputs_[pos], node_outputs_[pos]);
  }
  copies_generation_ = vars_.generation();
  ++copy_refreshes_;
}

void Executable::run_range(size_t begin, size_t end) {
  for (size_t pos = begin; pos < end; ++pos) {
    Kernel* k = kernels_[pos].get();
    if (!k) continue;
    if (!timing_) {
      k->run(ctx_, node_inputs_[pos], node_outputs_[pos]);
      continue;
    }
    Timer t;
    k->run(ctx_, node_inputs_[pos], node_outputs_[pos]);
    double ms = t.milliseconds();
    node_times_ms_[pos] = ms;
    if (hook_) hook_(schedule_[pos], ms);
  }
}

void Executable::run_until_update() {
  refresh_weight_copies();
  run_range(0, update_begin_);
}

void Executable::run_update() {
  run_range(update_begin_, schedule_.size());
  ++ctx_.step;
}

Tensor& Executable::input(const std::string& name) {
  for (auto& [n, t] : placeholders_)
    if (n == name) return t;
  CAMPO_FAIL("the compiled graph has no placeholder named '", name, "'");
}

bool Executable::has_input(const std::string& name) const {
  for (auto& [n, t] : placeholders_)
    if (n == name) return true;
  return false;
}

void Executable::run() {
  refresh_weight_copies();
  run_range(0, schedule_.size());
  ++ctx_.step;
}

void Executable::feed(const std::string& name, const Tensor& host) { input(name).copy_from(host); }

void Executable::feed_scalar(const std::string& name, float value) {
  Tensor& t = input(name);
  CAMPO_CHECK(t.dtype() == DType::f32 && t.numel() == 1, "placeholder '", name, "' is ",
              dtype_name(t.dtype()), shape_str(t.shape()), ", not an f32 scalar");
  t.data_as<float>()[0] = value;
}

Tensor Executable::fetch(ValueId v) const { return output(v).clone(); }

float Executable::fetch_scalar(ValueId v) const {
  const Tensor& t = output(v);
  CAMPO_CHECK(t.dtype() == DType::f32 && t.numel() == 1, "value ", v, " is ",
              dtype_name(t.dtype()), shape_str(t.shape()), ", not an f32 scalar");
  return t.data_as<float>()[0];
}

const Tensor& Executable::output(ValueId v) const {
  CAMPO_CHECK(v >= 0 && v < int(values_.size()) && values_[size_t(v)].data() != nullptr,
              "value ", v, " was not computed by this executable (not fetched?)");
  CAMPO_CHECK(std::find(options_.fetches.begin(), options_.fetches.end(), v) !=
                      options_.fetches.end() ||
                  graph_.node(graph_.value(v).producer).kind == OpKind::Variable,
              "value ", v, " was not listed in CompileOptions::fetches");
  return values_[size_t(v)];
}

}  // namespace campo
