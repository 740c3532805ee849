#include "graph/executor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/memory_info.h"

namespace campo {

StepPlan plan_step(const Graph& graph, const std::vector<ValueId>& fetches, ConvLayout conv_layout,
                   Device kernel_device) {
  StepPlan p;
  // Dead-code elimination: keep what the fetches and side-effecting nodes need.
  const std::vector<char> live = live_nodes(graph, fetches);
  for (NodeId id : graph.topological_order())
    if (live[size_t(id)]) p.schedule.push_back(id);

  // Physical layouts (graph/layout.h): blocked values only between CPU kernels.
  p.layouts =
      assign_layouts(graph, p.schedule, fetches, blocked_layout_for(conv_layout, kernel_device));

  // Lifetimes of intermediate values. A conversion reads its value at its first reader's
  // position (so the value lives at least that long) and its own buffer lives from there
  // to its last reader.
  const int n_sched = int(p.schedule.size());
  std::vector<int> first(size_t(graph.num_values()), -1), last(size_t(graph.num_values()), -1);
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(p.schedule[size_t(pos)]);
    for (ValueId v : n.outputs) first[size_t(v)] = last[size_t(v)] = pos;
    for (ValueId v : n.inputs) last[size_t(v)] = std::max(last[size_t(v)], pos);
  }
  for (ValueId v : fetches) last[size_t(v)] = n_sched;
  for (const LayoutConversion& c : p.layouts.conversions)
    last[size_t(c.value)] = std::max(last[size_t(c.value)], c.readers.front());

  auto bytes_of = [&](ValueId v) {
    return size_t(shape_numel(graph.value(v).shape)) * dtype_size(graph.value(v).dtype);
  };
  std::vector<BufferRequest>& requests = p.requests;
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(p.schedule[size_t(pos)]);
    if (n.kind == OpKind::Variable) continue;  // the VariableStore's
    if (n.kind == OpKind::Placeholder || n.weight_copy) {
      // Outside the arena: the inputs, and weight copies, which live from one step to the
      // next.
      CAMPO_CHECK(n.kind == OpKind::Placeholder ||
                      (n.kind == OpKind::Cast &&
                       graph.node(graph.value(n.inputs[0]).producer).kind == OpKind::Variable),
                  "internal: weight copy '", n.name, "' is not a Cast of a variable");
      (n.kind == OpKind::Placeholder ? p.input_bytes : p.weight_copy_bytes) +=
          bytes_of(n.outputs[0]);
      p.outside.push_back(pos);
      continue;
    }
    for (ValueId v : n.outputs) {
      requests.push_back({bytes_of(v), first[size_t(v)], last[size_t(v)]});
      p.planned.push_back(v);
    }
    if (n.phase == Phase::update)  // its gradient inputs: the backward pass's values
      for (ValueId v : n.inputs)
        if (graph.node(graph.value(v).producer).phase == Phase::backward)
          p.gradient_bytes += bytes_of(v);
  }
  for (const LayoutConversion& c : p.layouts.conversions)
    requests.push_back({bytes_of(c.value), c.readers.front(), c.readers.back()});
  p.memory = plan_memory(requests);
  return p;
}

ExecutableMemory StepPlan::estimate() const {
  return {.arena = memory.arena_bytes,
          .live_peak = memory.live_peak_bytes,
          .gradients = gradient_bytes,
          .inputs = input_bytes,
          .weight_copies = weight_copy_bytes};
}

Executable::Executable(const Graph& graph, VariableStore& vars, const CompileOptions& options)
    : graph_(graph), vars_(vars), options_(options), ctx_(vars.backend_ptr()) {
  ctx_.rng.reseed(options.seed);
  ctx_.seed = options.seed;
  ctx_.communicator = options.communicator;
  const char* sync = std::getenv("CAMPO_CUDA_SYNC");
  CAMPO_CHECK(!sync || !*sync || !std::strcmp(sync, "0") || !std::strcmp(sync, "1"),
              "CAMPO_CUDA_SYNC must be 0 or 1, got '", sync, "'");
  sync_each_node_ = sync && !std::strcmp(sync, "1");
  Backend& backend = ctx_.backend();
  const Device device = backend.device().type;

  StepPlan plan = plan_step(graph, options.fetches, options.conv_layout, backend.kernel_device());
  schedule_ = std::move(plan.schedule);
  layouts_ = std::move(plan.layouts);
  planned_ = std::move(plan.planned);
  plan_ = std::move(plan.memory);
  input_bytes_ = plan.input_bytes;
  weight_copy_bytes_ = plan.weight_copy_bytes;
  gradient_bytes_ = plan.gradient_bytes;
  const int n_sched = int(schedule_.size());
  values_.resize(size_t(graph.num_values()));
  for (NodeId id : schedule_) {
    const Node& n = graph.node(id);
    if (n.kind != OpKind::Variable) continue;
    Tensor& t = vars.at(n.name);
    const Value& val = graph.value(n.outputs[0]);
    CAMPO_CHECK(t.shape() == val.shape && t.dtype() == val.dtype, "variable '", n.name, "' is ",
                dtype_name(t.dtype()), shape_str(t.shape()), " but the graph expects ",
                dtype_name(val.dtype), shape_str(val.shape));
    values_[size_t(n.outputs[0])] = Tensor::borrow(t.device_data(), t.shape(), t.dtype(), device);
  }
  // A plan (with the inputs and weight copies) larger than the device's memory stops the run
  // here, with the figures, before anything is allocated, any kernel made or step run (on the CPU,
  // Linux would grant the arena and the kernel's OOM killer end the run once the pages are
  // touched).
  arena_ = options.arena ? options.arena : std::make_shared<SharedArena>(vars.backend_ptr());
  CAMPO_CHECK(arena_->backend() == &backend,
              "internal: an executable shares the arena of another backend's");
  const size_t needed =
      (plan_.arena_bytes > arena_->bytes() ? plan_.arena_bytes - arena_->bytes() : 0) +
      input_bytes_ + weight_copy_bytes_;
  if (const std::optional<size_t> available = backend.available_memory();
      available && needed > *available)
    throw MemoryShortfall(needed, *available, backend.device().str());
  for (int pos : plan.outside) {
    const Node& n = graph.node(schedule_[size_t(pos)]);
    const Value& val = graph.value(n.outputs[0]);
    Tensor t = backend.zeros(val.shape, val.dtype);
    values_[size_t(n.outputs[0])] = t;
    if (n.kind == OpKind::Placeholder)
      placeholders_.push_back({n.name, t});
    else
      copy_positions_.push_back(size_t(pos));
  }
  arena_->reserve(plan_.arena_bytes);
  converted_.resize(layouts_.conversions.size());

  // Kernels, built once; their argument lists (bind_arena) rebuilt when the arena moves.
  kernels_.resize(size_t(n_sched));
  node_inputs_.resize(size_t(n_sched));
  node_outputs_.resize(size_t(n_sched));
  node_times_ms_.assign(size_t(n_sched), 0.0);
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(schedule_[size_t(pos)]);
    if (n.kind == OpKind::Variable || n.kind == OpKind::Placeholder) continue;
    KernelSpec spec{n.kind, n.attrs, n.dtype, {}, {}, n.name, n.pad_to, n.quant, {}};
    if (n.quant.enabled)
      for (int i = 0; i < 2; ++i) {
        const std::string name = gemm_quant_state_name(n.name, i);
        CAMPO_CHECK(vars.contains(name), "internal: quantized GEMM '", n.name,
                    "' has no state variable '", name, "'");
        Tensor& t = vars.at(name);
        spec.quant_state.push_back(Tensor::borrow(t.device_data(), t.shape(), t.dtype(), device));
      }
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      spec.inputs.push_back(desc_of(graph, n.inputs[i]));
      spec.inputs.back().layout = layouts_.input_layout[size_t(pos)][i];
    }
    for (ValueId v : n.outputs) {
      spec.outputs.push_back(desc_of(graph, v));
      spec.outputs.back().layout = layouts_.value_layout[size_t(v)];
    }
    kernels_[size_t(pos)] = create_kernel(spec, ctx_);
  }
  // Conversion steps, ordered by the position they run at.
  std::vector<size_t> order(layouts_.conversions.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return layouts_.conversions[a].readers.front() < layouts_.conversions[b].readers.front();
  });
  for (size_t i : order) {
    const LayoutConversion& c = layouts_.conversions[i];
    TensorDesc from = desc_of(graph, c.value), to = from;
    from.layout = layouts_.value_layout[size_t(c.value)];
    to.layout = c.to;
    conversions_.push_back(
        {size_t(c.readers.front()), i, create_layout_conversion(from, to, ctx_), {}, {}});
  }
  bind_arena();
  first_conversion_.assign(size_t(n_sched) + 1, conversions_.size());
  for (size_t i = conversions_.size(); i-- > 0;) first_conversion_[conversions_[i].position] = i;
  for (size_t pos = size_t(n_sched); pos-- > 0;)
    first_conversion_[pos] = std::min(first_conversion_[pos], first_conversion_[pos + 1]);
  // Weight copies run apart from the step (refresh_weight_copies).
  for (size_t pos : copy_positions_) copy_kernels_.push_back(std::move(kernels_[pos]));
  // The schedule places update nodes last (autodiff and the optimizer append them so);
  // checked, since reading a variable after its update would read the next step's value.
  bool updating = false;
  for (int pos = 0; pos < n_sched; ++pos) {
    const Node& n = graph.node(schedule_[size_t(pos)]);
    if (!kernels_[size_t(pos)]) continue;
    updating = updating || n.phase == Phase::update;
    CAMPO_CHECK(!updating || n.phase == Phase::update, "internal: node '", n.name,
                "' is scheduled after an optimizer update");
  }
  replay_blocker_ = why_not_replayed();
  CAMPO_CHECK(backend.cuda_graph() != CudaGraphMode::on || replay_blocker_.empty(),
              "--cuda-graph on: this step cannot be replayed: ", replay_blocker_,
              " (--cuda-graph auto launches it kernel by kernel)");
}

std::string Executable::why_not_replayed() {
  Backend& backend = ctx_.backend();
  if (backend.cuda_graph() == CudaGraphMode::off) return "--cuda-graph off";
  if (std::string why = backend.capture_unsupported(); !why.empty()) return why;
  if (sync_each_node_) return "CAMPO_CUDA_SYNC=1 synchronizes after every node";
  for (size_t pos = 0; pos < schedule_.size(); ++pos) {
    if (!kernels_[pos]) continue;
    if (std::string why = kernels_[pos]->capture_blocker(); !why.empty())
      return "node " + graph_.node(schedule_[pos]).name + ": " + why;
  }
  return {};
}

Executable::~Executable() = default;

void SharedArena::reserve(size_t bytes) {
  if (buffer_ && bytes <= bytes_) return;
  buffer_.reset();  // the old one first: never both at once
  buffer_ = backend_->allocate(bytes);
  bytes_ = bytes;
}

void Executable::bind_arena() {
  char* base = arena_->data();
  auto in_arena = [&](size_t request, ValueId v) {
    const Value& val = graph_.value(v);
    return Tensor::borrow(base + plan_.offsets[request], val.shape, val.dtype,
                          ctx_.backend().device().type);
  };
  for (size_t i = 0; i < planned_.size(); ++i)
    values_[size_t(planned_[i])] = in_arena(i, planned_[i]);
  for (size_t i = 0; i < converted_.size(); ++i)
    converted_[i] = in_arena(planned_.size() + i, layouts_.conversions[i].value);
  for (size_t pos = 0; pos < schedule_.size(); ++pos) {
    const Node& n = graph_.node(schedule_[pos]);
    node_inputs_[pos].clear();
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int c = layouts_.input_conversion[pos][i];
      node_inputs_[pos].push_back(c < 0 ? values_[size_t(n.inputs[i])] : converted_[size_t(c)]);
    }
    node_outputs_[pos].clear();
    for (ValueId v : n.outputs) node_outputs_[pos].push_back(values_[size_t(v)]);
  }
  for (ConversionStep& c : conversions_) {
    c.input = {values_[size_t(layouts_.conversions[c.conversion].value)]};
    c.output = {converted_[c.conversion]};
  }
  bound_arena_ = base;
}

ExecutableMemory& ExecutableMemory::operator+=(const ExecutableMemory& o) {
  arena += o.arena;
  live_peak += o.live_peak;
  gradients += o.gradients;
  inputs += o.inputs;
  weight_copies += o.weight_copies;
  workspace += o.workspace;
  kernel_buffers += o.kernel_buffers;
  return *this;
}

ExecutableMemory Executable::memory() const {
  return {.arena = plan_.arena_bytes,
          .live_peak = plan_.live_peak_bytes,
          .gradients = gradient_bytes_,
          .inputs = input_bytes_,
          .weight_copies = weight_copy_bytes_,
          .workspace = ctx_.workspace_bytes(),
          .kernel_buffers = ctx_.kernel_buffer_bytes()};
}

void Executable::refresh_weight_copies() {
  if (copy_positions_.empty() || copies_generation_ == vars_.generation()) return;
  for (size_t i = 0; i < copy_positions_.size(); ++i) {
    const size_t pos = copy_positions_[i];
    run_kernel(*copy_kernels_[i], ctx_, node_inputs_[pos], node_outputs_[pos]);
  }
  copies_generation_ = vars_.generation();
  ++copy_refreshes_;
}

void Executable::run_conversions(size_t pos) {
  for (size_t i = first_conversion_[pos];
       i < conversions_.size() && conversions_[i].position == pos; ++i)
    conversions_[i].kernel->run(ctx_, conversions_[i].input, conversions_[i].output);
}

void Executable::set_timing(bool on) {
  if (on && !timer_) timer_ = ctx_.backend().make_timer(schedule_.size());
  if (!on) timer_.reset();
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

void Executable::run_synchronized() {
  for (size_t pos = 0; pos < schedule_.size(); ++pos) {
    Kernel* k = kernels_[pos].get();
    if (!k) continue;
    try {
      run_conversions(pos);
      run_kernel(*k, ctx_, node_inputs_[pos], node_outputs_[pos]);
      ctx_.backend().synchronize();
    } catch (const Error& e) {
      const Node& n = graph_.node(schedule_[pos]);
      CAMPO_FAIL("node ", n.name, " (", op_name(n.kind), ", ", dtype_name(n.dtype), ", step ",
                 ctx_.step, "): ", e.what());
    }
  }
}

void Executable::run_launched() {
  for (size_t pos = 0; pos < schedule_.size(); ++pos) {
    run_conversions(pos);
    if (Kernel* k = kernels_[pos].get())
      run_kernel(*k, ctx_, node_inputs_[pos], node_outputs_[pos]);
  }
}

void Executable::issue_kernels() {
  for (size_t pos = 0; pos < schedule_.size(); ++pos) {
    run_conversions(pos);
    if (Kernel* k = kernels_[pos].get()) k->run(ctx_, node_inputs_[pos], node_outputs_[pos]);
  }
}

void Executable::run_replayed() {
  if (!captured_ && !warm_) {
    run_launched();
    warm_ = true;
    return;
  }
  Backend& backend = ctx_.backend();
  for (size_t pos = 0; pos < schedule_.size(); ++pos)
    if (Kernel* k = kernels_[pos].get()) k->before_run(ctx_);
  if (!captured_) {
    try {
      backend.begin_capture();
      issue_kernels();
      captured_ = backend.end_capture();
      ++captures_;
    } catch (const Error& e) {
      backend.abort_capture();
      if (backend.cuda_graph() == CudaGraphMode::on)
        CAMPO_FAIL("--cuda-graph on: capturing the step failed: ", e.what());
      // auto: this step and the later ones kernel by kernel (before_run has run).
      replay_blocker_ = std::string("capturing the step failed: ") + e.what();
      issue_kernels();
      for (size_t pos = 0; pos < schedule_.size(); ++pos)
        if (Kernel* k = kernels_[pos].get()) k->after_run(ctx_);
      return;
    }
  }
  captured_->replay();
  ++replays_;
  for (size_t pos = 0; pos < schedule_.size(); ++pos)
    if (Kernel* k = kernels_[pos].get()) k->after_run(ctx_);
}

void Executable::issue_bracketed(NodeBrackets& brackets) {
  for (size_t pos = 0; pos < schedule_.size(); ++pos) {
    Kernel* k = kernels_[pos].get();
    if (!k) continue;
    brackets.start(pos);
    run_conversions(pos);
    run_kernel(*k, ctx_, node_inputs_[pos], node_outputs_[pos]);
    brackets.stop(pos);
  }
  ctx_.backend().synchronize();
}

void Executable::rebind_if_moved() {
  if (arena_->data() == bound_arena_) return;
  bind_arena();
  captured_.reset();
  warm_ = false;
}

void Executable::run_bracketed(NodeBrackets& brackets) {
  rebind_if_moved();
  refresh_weight_copies();
  issue_bracketed(brackets);
  ++ctx_.step;
}

void Executable::run() {
  rebind_if_moved();
  refresh_weight_copies();
  const size_t n = schedule_.size();
  if (sync_each_node_ && !timer_) {
    run_synchronized();
  } else if (!timer_) {
    if (replay_blocker_.empty())
      run_replayed();
    else
      run_launched();
  } else {
    issue_bracketed(*timer_);
    const std::vector<double>& ms = timer_->elapsed_ms();
    for (size_t pos = 0; pos < n; ++pos) {
      if (!kernels_[pos]) continue;
      node_times_ms_[pos] = ms[pos];
      if (hook_) hook_(schedule_[pos], ms[pos]);
    }
  }
  ++ctx_.step;
}

void Executable::feed(const std::string& name, const Tensor& host) {
  Tensor& t = input(name);
  CAMPO_CHECK(host.dtype() == t.dtype() && host.shape() == t.shape(), "placeholder '", name,
              "' is ", dtype_name(t.dtype()), shape_str(t.shape()), ", fed ",
              dtype_name(host.dtype()), shape_str(host.shape()));
  // A few bytes (an array's learning rates, a small batch's labels) go in queue order,
  // without draining the device's queue; a batch's images with a waiting copy.
  if (host.nbytes() > 0 && host.nbytes() <= Backend::kQueuedCopyMax)
    ctx_.backend().queue_copy_from_host(t, host.data());
  else
    ctx_.backend().write(t, host);
}

void Executable::feed_scalar(const std::string& name, float value) {
  Tensor& t = input(name);
  CAMPO_CHECK(t.dtype() == DType::f32 && t.numel() == 1, "placeholder '", name, "' is ",
              dtype_name(t.dtype()), shape_str(t.shape()), ", not an f32 scalar");
  ctx_.backend().write_scalar(t, value);
}

Tensor Executable::fetch(ValueId v) { return ctx_.backend().to_host(output(v)); }

float Executable::fetch_scalar(ValueId v) {
  const Tensor& t = output(v);
  CAMPO_CHECK(t.dtype() == DType::f32 && t.numel() == 1, "value ", v, " is ", dtype_name(t.dtype()),
              shape_str(t.shape()), ", not an f32 scalar");
  return ctx_.backend().read_scalar(t);
}

const Tensor& Executable::output(ValueId v) const {
  CAMPO_CHECK(v >= 0 && v < int(values_.size()) && values_[size_t(v)].device_data() != nullptr,
              "value ", v, " was not computed by this executable (not fetched?)");
  CAMPO_CHECK(
      std::find(options_.fetches.begin(), options_.fetches.end(), v) != options_.fetches.end() ||
          graph_.node(graph_.value(v).producer).kind == OpKind::Variable,
      "value ", v, " was not listed in CompileOptions::fetches");
  return values_[size_t(v)];
}

}  // namespace campo
