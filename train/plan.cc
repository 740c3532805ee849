#include "train/plan.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <istream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "amp/calibration.h"
#include "amp/padding.h"
#include "models/dcgan.h"
#include "runtime/atomic_file.h"
#include "runtime/device_energy.h"
#include "runtime/energy.h"
#include "runtime/file_check.h"
#include "runtime/memory_info.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/gan_trainer.h"
#include "train/model_array.h"
#include "train/profiling.h"
#include "train/roofline.h"
#include "train/trainer.h"

namespace campo {

namespace {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::forward:
      return "fwd";
    case Phase::backward:
      return "bwd";
    case Phase::update:
      return "upd";
  }
  return "?";
}

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n && n % 3 == 0 && *it != '-') out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

PrecisionConfig model_run_precision(const ModelRunOptions& o, Precision policy) {
  PrecisionConfig c = precision_config(policy, o.mixed, o.device.type);
  c.costs = o.costs;
  if (policy == Precision::cost_aware && !o.costs && !o.calibration.empty())
    c.calibration = std::make_shared<const Calibration>(
        load_calibration(o.calibration, *backend_for(o.device, o.cuda_graph)));
  return c;
}

// DCGAN's bench learning rate (the paper's).
constexpr float kGanBenchLr = 2e-4f;

OptimizerConfig gan_optimizer(const ModelRunOptions& o) {
  OptimizerConfig c;
  c.kind = o.optimizer;
  c.beta1 = kDcganAdamBeta1;  // Adam only
  return c;
}

TrainingGraphSpec model_run_spec(const ModelRunOptions& o, Precision policy) {
  CAMPO_CHECK(is_known_model(o.model), "unknown model '", o.model, "'");
  CAMPO_CHECK(o.batch > 0, "--batch must be a positive number of samples, got ", o.batch);
  CAMPO_CHECK(o.image_size > 0 && o.channels > 0 && o.classes > 1,
              "--image-size, --channels and --classes must be positive (classes >= 2)");
  TrainingGraphSpec spec;
  spec.model = o.model;
  spec.model_options.in_channels = o.channels;
  spec.model_options.image_size = o.image_size;
  spec.model_options.num_classes = o.classes;
  spec.model_options.bert_config = o.bert_config;
  spec.image_shape = {o.channels, o.image_size, o.image_size};
  if (model_input(o.model) == ModelInput::tokens) {
    CAMPO_CHECK(o.seq_len >= 1, "--seq-len must be positive, got ", o.seq_len);
    spec.image_shape = {o.seq_len};
  }
  spec.batch = o.batch;
  spec.optimizer.kind = o.optimizer;
  spec.precision = model_run_precision(o, policy);
  // --array N: N copies as one fused step, "lr" [N] (one rate per model).
  spec.array = o.array;
  spec.optimizer.slices = o.array;
  return spec;
}

Device plan_for_device(const PlanForOptions& f) {
  check_plan_for_options(f);
  return find_device(device_table(f.devices_path), f.device).kind == "gpu" ? Device::cuda
                                                                           : Device::cpu;
}

void attach_predicted_costs(ModelRunOptions& o) {
  const PlanForOptions& f = o.plan_for;
  check_plan_for_options(f);
  if (!f.active()) return;
  CAMPO_CHECK(!is_gan_model(o.model),
              "--for plans models of one step graph (classifiers and BERT), not ", o.model);
  const RecordedProfile profile = read_profile(f.profile_path);
  const std::string model = profile.said("model");
  CAMPO_CHECK(model == "?" || model == o.model, profile.where, " is a profile of ", model,
              ", not of ", o.model, ": record one with campo train --model ", o.model,
              " ... --profile-out FILE");
  const std::vector<DeviceModel> table = device_table(f.devices_path);
  const DeviceModel& to = find_device(table, f.device);
  const DeviceModel from = profile.origin(table, f.from);
  Graph g;
  VariableStore vars(o.seed, default_cpu_backend());  // the graph only: nothing runs
  const TrainingGraphInfo info = build_training_graph(g, vars, model_run_spec(o, Precision::fp32));
  const PrecisionConfig precision = precision_config(Precision::cost_aware, o.mixed, o.device.type);
  CAMPO_CHECK(!precision.automatic(),
              "--for predicts the costs of one low type: give --low-precision bf16 or fp16, "
              "not auto");
  const DType low = precision.low;
  o.costs = std::make_shared<const CostTable>(
      predict_cost_table(g, info.fetches(), profile, from, to, low));
  o.costs_note = "cost-aware's costs predicted for " + to.name + " (" + to.full_name + ") from " +
                 profile.where + ", measured on " + from.name + " (" + from.full_name + ")";
}

namespace {

// Prints one graph's plan table and totals; returns its JSON description. Writes the DOT
// file when `dot_path` is set.
nlohmann::json print_graph_plan(const Graph& g, const std::string& title,
                                const PrecisionConfig& precision, const PlanOptions& o,
                                const std::string& dot_path, std::ostream& out,
                                const std::vector<ValueId>& fetches,
                                const TrainingGraphInfo* info = nullptr) {
  const bool costed = info && info->cost_plan && info->costs;
  // --low-precision auto: an f16 column beside bf16's, and each cast priced by its types.
  const CostTable* f16 = costed && info->f16_costs ? info->f16_costs.get() : nullptr;
  const ThreeWayCostTable three = f16 ? three_way_costs(*info->costs, *f16) : ThreeWayCostTable{};
  out << title << "\n";
  out << std::left << std::setw(44) << "node" << std::setw(22) << "op" << std::setw(5) << "step"
      << std::setw(7) << "list" << std::setw(6) << "dtype";
  if (costed)
    out << std::right << std::setw(9) << "f32 ms" << std::setw(9) << (f16 ? "bf16 ms" : "low ms")
        << (f16 ? "  f16 ms" : "") << "  " << std::left << std::setw(14) << "decided by";
  out << "shapes\n";
  nlohmann::json nodes = nlohmann::json::array();
  for (NodeId id : g.topological_order()) {
    const Node& n = g.node(id);
    const bool leaf = n.kind == OpKind::Variable || n.kind == OpKind::Placeholder;
    const bool update = n.kind == OpKind::ApplyMomentum || n.kind == OpKind::ApplyAdam;
    std::string shapes;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      shapes += (i ? " x " : "") + compact_shape(g.value(n.inputs[i]).shape);
    if (!n.outputs.empty()) shapes += " -> " + compact_shape(g.value(n.outputs[0]).shape);
    const char* list = n.weight_copy            ? "copy"
                       : n.kind == OpKind::Cast ? "cast"
                                                : amp_list_name(precision.lists.classify(n.kind));
    nlohmann::json node = {{"name", n.name},
                           {"op", op_name(n.kind)},
                           {"phase", phase_name(n.phase)},
                           {"list", list},
                           {"dtype", dtype_name(n.dtype)},
                           {"pad_to", n.pad_to},
                           {"f32_output", n.f32_output},
                           {"weight_copy", n.weight_copy},
                           {"shapes", shapes}};
    const bool has_cost = costed && size_t(id) < info->costs->nodes.size() &&
                          size_t(id) < info->cost_plan->decided_by.size();
    const bool costed_cast = costed && n.kind == OpKind::Cast && !n.weight_copy;
    const int64_t cast_elements = costed_cast ? shape_numel(g.value(n.inputs[0]).shape) : 0;
    const double cast_ms =
        !costed_cast ? 0.0
        : f16        ? three.casts.cost_ms(g.value(n.inputs[0]).dtype, g.value(n.outputs[0]).dtype,
                                           cast_elements)
              : info->costs->cast_ms(is_low_precision(g.value(n.outputs[0]).dtype), cast_elements);
    const bool measured = costed && size_t(id) < info->costs->low_measured.size() &&
                          info->costs->low_measured[size_t(id)];
    if (has_cost) {
      node["fp32_ms"] = info->costs->nodes[size_t(id)].fp32_ms;
      node["low_ms"] = info->costs->nodes[size_t(id)].low_ms;
      if (f16) {  // auto: fp32_ms and low_ms (bf16) as above, and f16's
        node["fp32_ms"] = three.nodes[size_t(id)].f32_ms;
        node["f16_ms"] = three.nodes[size_t(id)].f16_ms;
      }
      node["low_measured"] = measured;
      node["decided_by"] = traversal_name(info->cost_plan->decided_by[size_t(id)]);
    } else if (costed && n.kind == OpKind::Cast) {
      node["cast_ms"] = cast_ms;
    }
    nodes.push_back(node);
    if ((leaf || update) && !o.all_nodes) continue;
    std::string name = n.name.size() > 43 ? "..." + n.name.substr(n.name.size() - 40) : n.name;
    out << std::left << std::setw(44) << name << std::setw(22) << op_name(n.kind) << std::setw(5)
        << phase_name(n.phase) << std::setw(7) << list << std::setw(6)
        << (std::string(dtype_name(n.dtype)) + (n.pad_to > 0 ? "+p" : "") +
            (n.f32_output ? "*" : ""));
    if (costed) {
      char buf[64];
      const char* decided = has_cost ? traversal_name(info->cost_plan->decided_by[size_t(id)]) : "";
      if (has_cost && f16)
        std::snprintf(buf, sizeof buf, "%9.3f%9.3f%8.3f  %-14s", three.nodes[size_t(id)].f32_ms,
                      three.nodes[size_t(id)].bf16_ms, three.nodes[size_t(id)].f16_ms, decided);
      else if (has_cost)
        std::snprintf(buf, sizeof buf, "%9.3f%8.3f%c  %-14s",
                      info->costs->nodes[size_t(id)].fp32_ms, info->costs->nodes[size_t(id)].low_ms,
                      measured ? 'm' : ' ', decided);
      else if (n.kind == OpKind::Cast)
        std::snprintf(buf, sizeof buf, "%9s%9.3f%s  %-14s", "", cast_ms, f16 ? "        " : "",
                      n.weight_copy ? "(weight copy)" : "(cast)");
      else
        std::snprintf(buf, sizeof buf, "%9s%9s%s  %-14s", "", "", f16 ? "        " : "", "");
      out << buf;
    }
    out << shapes << "\n";
  }
  const PrecisionSummary s = summarize_precision(g, fetches);
  out << "totals: ";
  if (f16)
    out << s.low_nodes - s.f16_nodes << " nodes in bf16, " << s.f16_nodes << " in f16, ";
  else
    out << s.low_nodes << " nodes in " << dtype_name(precision.low) << ", ";
  out << s.f32_nodes << " in f32; " << s.casts.casts << " casts, "
      << with_commas(s.casts.cast_elements) << " elements cast per step\n";
  if (f16)
    out << "auto: each node in the type of least predicted step time among f32, f16 and bf16 "
           "(casts between f16 and bf16 go through f32; ops that need range never f16)"
        << (precision.scaler.enabled ? "; dynamic loss scaling on, as f16 may be chosen" : "")
        << "\n";
  const int into_producers = s.casts.folded - s.casts.weight_copies;
  if (into_producers > 0)
    out << "folded: " << into_producers << " casts to f32 done by their producers' kernels "
        << "instead (marked *: computes in " << dtype_name(precision.low)
        << ", writes f32 for the f32 optimizer update)\n";
  if (s.casts.weight_copies > 0)
    out << "folded: " << s.casts.weight_copies << " casts of weights to "
        << dtype_name(precision.low) << " (list 'copy'): " << dtype_name(precision.low)
        << " weight copies that the optimizer updates write, instead of a Cast per step\n";
  if (!dot_path.empty()) {
    write_file_atomically(dot_path, g.to_dot());
    out << "wrote " << dot_path << "\n";
  }
  return {{"title", title},
          {"low_nodes", s.low_nodes},
          {"f16_nodes", s.f16_nodes},
          {"f32_nodes", s.f32_nodes},
          {"casts", s.casts.casts},
          {"cast_elements", s.casts.cast_elements},
          {"folded_casts", s.casts.folded},
          {"weight_copies", s.casts.weight_copies},
          {"nodes", nodes}};
}

std::string with_suffix(const std::string& path, const std::string& suffix) {
  if (path.empty()) return path;
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path + suffix : path.substr(0, dot) + suffix + path.substr(dot);
}

}  // namespace

namespace {

constexpr int kMaxArraySize = 64;  // --array's bound, as campo train's (train/trainer.cc)

void check_model_run_numbers(const ModelRunOptions& o) {
  CAMPO_CHECK(is_known_model(o.model), "unknown model '", o.model, "'");
  CAMPO_CHECK(o.batch > 0, "--batch must be a positive number of samples, got ", o.batch);
  CAMPO_CHECK(o.image_size > 0, "--image-size must be positive, got ", o.image_size);
  CAMPO_CHECK(o.channels > 0, "--channels must be positive, got ", o.channels);
  CAMPO_CHECK(o.classes > 1, "--classes must be at least 2, got ", o.classes);
  CAMPO_CHECK(o.array >= 1 && o.array <= kMaxArraySize, "--array must be a number of models in 1..",
              kMaxArraySize, ", got ", o.array);
  if (o.array > 1) {
    std::string why;
    CAMPO_CHECK(supports_model_array(o.model, &why), why);
  }
}

}  // namespace

void check_plan_options(const PlanOptions& o) {
  const Precision policy = o.precision;
  check_model_run_numbers(o.run);
  // cost-aware on a GPU profiles there and uses a calibration made on that GPU (campo
  // calibrate --device cuda), as on the CPU: nothing to refuse here.
  check_plan_for_options(o.run.plan_for);
  CAMPO_CHECK(!o.run.plan_for.active() || policy == Precision::cost_aware,
              "--for plans the cost-aware policy from predicted costs; --precision ",
              precision_name(o.precision), " needs no costs");
  CAMPO_CHECK(!is_gan_model(o.run.model) || o.run.array == 1,
              "campo plan --array does not support --model dcgan (plan a single DCGAN; "
              "campo bench --model dcgan --array N measures its array)");
  if (is_gan_model(o.run.model)) {  // one file per step graph
    for (const char* suffix : {"_d", "_g"})
      if (!o.dot_path.empty()) require_output_file(with_suffix(o.dot_path, suffix), "--dot file");
  } else if (!o.dot_path.empty()) {
    require_output_file(o.dot_path, "--dot file");
  }
  if (!o.json_path.empty()) require_output_file(o.json_path, "--json file");
  if (!o.alloc_trace_path.empty()) {
    CAMPO_CHECK(!is_gan_model(o.run.model),
                "campo plan --alloc-trace does not support --model dcgan (its two step graphs "
                "would interleave); trace a classifier");
    require_output_file(o.alloc_trace_path, "--alloc-trace file");
  }
}

void check_bench_options(const BenchOptions& o) {
  CAMPO_CHECK(!o.precisions.empty(), "--precision needs at least one policy");
  for (const std::string& p : o.precisions) (void)parse_precision(p);
  check_model_run_numbers(o.run);
  CAMPO_CHECK(o.steps > 0, "--steps must be a positive number of timed steps, got ", o.steps);
  CAMPO_CHECK(o.repeats > 0, "--repeats must be positive, got ", o.repeats);
  CAMPO_CHECK(o.warmup >= 0, "--warmup must be zero or positive, got ", o.warmup);
  validate(o.data_parallel);
  check_data_parallel_model(o.data_parallel, o.run.model);
  check_plan_for_options(o.run.plan_for);
  if (o.run.plan_for.active()) {
    CAMPO_CHECK(std::count(o.precisions.begin(), o.precisions.end(), "cost-aware") > 0,
                "--for plans the cost-aware policy from predicted costs: add cost-aware to "
                "--precision");
    CAMPO_CHECK(!o.data_parallel.enabled,
                "--for does not take --data-parallel (the predicted costs are of one "
                "process's step)");
    CAMPO_CHECK(plan_for_device(o.run.plan_for) == o.run.device.type, "--for ",
                o.run.plan_for.device, " is not a ", device_name(o.run.device.type),
                ": bench runs the plan here, on --device ", o.run.device.str(),
                "; campo plan --for shows a plan for another kind of device");
  }
  if (!o.json_path.empty()) require_output_file(o.json_path, "--json file");
}

namespace {

// The allocation trace of one step (--alloc-trace), with a header saying what it traces and
// the command that writes it again.
std::string alloc_trace_file(const PlanOptions& o, const Graph& g, const VariableStore& vars,
                             const StepPlan& step) {
  std::vector<size_t> persistent;
  for (const std::string& name : vars.names()) persistent.push_back(vars.at(name).nbytes());
  for (int pos : step.outside) {
    const Value& v = g.value(g.node(step.schedule[size_t(pos)]).outputs[0]);
    persistent.push_back(size_t(shape_numel(v.shape)) * dtype_size(v.dtype));
  }
  std::ostringstream head;
  head << "# campo allocation trace: one training step of " << o.run.model << ", batch "
       << o.run.batch << ", " << o.run.image_size << "x" << o.run.image_size << "x"
       << o.run.channels << ", precision " << precision_name(o.precision) << " ("
       << o.run.mixed.low_precision << "),\n"
       << "# as a runtime with one buffer per value would allocate it: " << vars.names().size()
       << " variables and " << step.outside.size() << " inputs and weight copies\n"
       << "# (never freed), then the " << step.requests.size()
       << " values of the memory plan (their live peak " << step.memory.live_peak_bytes
       << " bytes,\n# the plan's arena " << step.memory.arena_bytes
       << " bytes). Events: 'a ID BYTES', 'f ID'.\n"
       << "# written by: campo plan --model " << o.run.model << " --batch " << o.run.batch
       << " --image-size " << o.run.image_size << " --channels " << o.run.channels
       << " --precision " << precision_name(o.precision) << " --low-precision "
       << o.run.mixed.low_precision << " --device " << o.run.device.str()
       << " --alloc-trace FILE\n";
  return head.str() + allocation_trace(persistent, step.requests);
}

}  // namespace

void print_plan(const PlanOptions& o, std::ostream& out) {
  check_plan_options(o);
  const Precision policy = o.precision;
  std::ostringstream header;
  header << "plan: " << o.run.model << ", precision " << precision_name(policy) << ", device "
         << o.run.device.str();
  nlohmann::json j = {{"model", o.run.model},
                      {"precision", precision_name(policy)},
                      {"device", o.run.device.str()},
                      {"low_precision", o.run.mixed.low_precision},
                      {"batch", o.run.batch}};
  // The plan runs steps only in cost-aware's profiling step (without given costs), and those
  // run on --device's backend; otherwise it only builds the graphs, which needs no device
  // (planning for a GPU on a machine without one), so the variables stay on the host.
  const bool profiles = policy == Precision::cost_aware && !o.run.costs;
  const std::shared_ptr<Backend> backend =
      profiles ? backend_for(o.run.device, o.run.cuda_graph) : default_cpu_backend();
  const DeviceReport device_report(backend);
  if (is_gan_model(o.run.model)) {
    // Two step graphs: the discriminator's and the generator's.
    const PrecisionConfig precision = model_run_precision(o.run, policy);
    DcganOptions m;
    m.image_size = o.run.image_size;
    m.channels = o.run.channels;
    GanSession session(m, o.run.batch, gan_optimizer(o.run), o.run.seed, backend, 1, precision);
    header << ", batch " << o.run.batch << ", " << m.image_size << "x" << m.image_size << "x"
           << m.channels;
    out << header.str() << "\n";
    TrainingGraphInfo d_info, g_info;  // cost-aware: the costs and decisions to show
    d_info.costs = session.d_costs();
    d_info.cost_plan = session.d_plan();
    g_info.costs = session.g_costs();
    g_info.cost_plan = session.g_plan();
    j["graphs"] = nlohmann::json::array(
        {print_graph_plan(session.d_graph(), "discriminator step", precision, o,
                          with_suffix(o.dot_path, "_d"), out, session.d_fetches(), &d_info),
         print_graph_plan(session.g_graph(), "generator step", precision, o,
                          with_suffix(o.dot_path, "_g"), out, session.g_fetches(), &g_info)});
    // The session is compiled (not run): its own report, kernel workspace included.
    const MemoryReport memory = session.memory();
    out << "memory: " << memory_line(memory) << "\n";
    j["memory"] = memory_json(memory);
    PrecisionSummary s = session.precision_summary();
    j["low_nodes"] = s.low_nodes;
    j["f32_nodes"] = s.f32_nodes;
    j["casts"] = s.casts.casts;
    j["cast_elements"] = s.casts.cast_elements;
  } else {
    TrainingGraphSpec spec = model_run_spec(o.run, policy);
    // Padding is decided by timing each GEMM both ways on the device itself: not for one
    // predicted from afar.
    if (o.run.plan_for.active()) spec.precision.padding = false;
    Graph g;
    VariableStore vars(o.run.seed, backend);
    TrainingGraphInfo info =
        build_training_graph(g, vars, with_profiled_costs(spec, vars.backend_ptr()));
    header << ", batch " << o.run.batch << ", input " << compact_shape(spec.image_shape);
    if (o.run.array > 1) header << ", array of " << o.run.array << " models";
    // json::array: a braced list of one json is a copy of it, not an array, under clang.
    j["graphs"] = nlohmann::json::array({print_graph_plan(g, header.str(), spec.precision, o,
                                                          o.dot_path, out, info.fetches(), &info)});
    if (info.cost_plan) {
      // Compare with amp under the same costs: same graph before casts, amp's painting.
      TrainingGraphSpec fp32 = spec;
      fp32.precision.policy = Precision::fp32;
      Graph ga;
      VariableStore va(o.run.seed, backend);
      const TrainingGraphInfo ia = build_training_graph(ga, va, fp32);
      std::vector<char> amp_low = paint_amp(ga, spec.precision.lists);
      const double amp_ms = predict_step_ms(ga, *info.costs, amp_low);
      std::vector<char> none(size_t(ga.num_nodes()), 0);
      const double fp32_ms = predict_step_ms(ga, *info.costs, none);
      apply_precision(ga, amp_low, spec.precision.low);
      const CastStats amp_casts = summarize_precision(ga, ia.fetches()).casts;
      char line[256];
      std::snprintf(line, sizeof line,
                    "predicted step: cost-aware %.2f ms, amp %.2f ms, fp32 %.2f ms; casts: "
                    "cost-aware %d, amp %d (cast model %.4f ms + %.3g ms/element)\n",
                    info.cost_plan->predicted_ms, amp_ms, fp32_ms, info.summary.casts.casts,
                    amp_casts.casts, info.costs->cast.fixed_ms, info.costs->cast.per_element_ms);
      if (!o.run.costs_note.empty()) out << "costs: " << o.run.costs_note << "\n";
      out << line;
      if (info.costs->cast_to_f32 && !spec.precision.automatic())
        out << "cast model low -> f32: " << info.costs->cast_to_f32->fixed_ms << " ms + "
            << info.costs->cast_to_f32->per_element_ms
            << " ms/element (the line above: f32 -> low)\n";
      if (spec.precision.automatic()) {
        // Why this mix: the exact plans over one low type, under the same costs.
        const AutoChoice& a = info.auto_choice;
        const ThreeWayCostTable three = three_way_costs(*info.costs, *info.f16_costs);
        std::snprintf(line, sizeof line,
                      "search: exact over f32, f16 and bf16 per node (ops that need range never "
                      "f16); bf16 only %.2f ms, f16 only %.2f ms; chosen: %s\n",
                      a.bf16_only_ms, a.f16_only_ms, a.chosen);
        out << line;
        const CastCosts& c = three.casts;
        std::snprintf(line, sizeof line,
                      "cast models (ms + ms/element): f32->f16 %.4f + %.3g, f16->f32 %.4f + %.3g, "
                      "f32->bf16 %.4f + %.3g, bf16->f32 %.4f + %.3g\n",
                      c.f32_to_f16.fixed_ms, c.f32_to_f16.per_element_ms, c.f16_to_f32.fixed_ms,
                      c.f16_to_f32.per_element_ms, c.f32_to_bf16.fixed_ms,
                      c.f32_to_bf16.per_element_ms, c.bf16_to_f32.fixed_ms,
                      c.bf16_to_f32.per_element_ms);
        out << line;
        j["bf16_only_predicted_ms"] = a.bf16_only_ms;
        j["f16_only_predicted_ms"] = a.f16_only_ms;
        j["auto_chosen"] = a.chosen;
      } else if (spec.precision.search == CostAwareSearch::exact) {
        std::snprintf(line, sizeof line,
                      "search: exact; the four traversals alone predicted %.2f ms, the exact "
                      "search changed %d nodes (decided by 5:exact)\n",
                      info.cost_plan->traversals_ms, info.cost_plan->exact_changes);
        out << line;
      }
      const int measured =
          int(std::count(info.costs->low_measured.begin(), info.costs->low_measured.end(), 1));
      if (measured > 0)
        out << "measured: " << measured << " low-precision times marked m were timed in the "
            << "profiling step: the calibration does not trust its model of those ops (held-out "
            << "MAPE over " << kUntrustedMapePercent << "%, or none); the others are predicted\n";
      j["low_measured"] = measured;
      if (!info.costs->hardware_counters.empty())
        out << "hardware counters: " << info.costs->hardware_counters << "\n";
      j["hardware_counters"] = info.costs->hardware_counters.empty()
                                   ? nlohmann::json(nullptr)
                                   : nlohmann::json(info.costs->hardware_counters);
      if (o.run.plan_for.active())
        out << "padding: not decided for " << o.run.plan_for.device << " ("
            << info.padding_candidates << " candidates): it is timed on the device itself\n";
      else
        out << "padding: " << info.padded << " of " << info.padding_candidates
            << " low-precision GEMMs (unaligned K/N) and convolutions (unaligned channels) "
            << "padded to multiples of " << info.pad_to
            << " (where timing the node both ways showed a gain)\n";
      j["padding_candidates"] = info.padding_candidates;
      j["padded"] = info.padded;
      j["pad_to"] = info.pad_to;
      if (o.run.plan_for.active()) {
        j["for"] = o.run.plan_for.device;
        j["costs"] = o.run.costs_note;
      }
      j["predicted_ms"] = info.cost_plan->predicted_ms;
      j["amp_predicted_ms"] = amp_ms;
      j["fp32_predicted_ms"] = fp32_ms;
      j["amp_casts"] = amp_casts.casts;
      j["search"] = search_name(spec.precision.search);
      j["traversals_predicted_ms"] = info.cost_plan->traversals_ms;
      j["exact_changes"] = info.cost_plan->exact_changes;
    }
    j["low_nodes"] = info.summary.low_nodes;
    j["f16_nodes"] = info.summary.f16_nodes;
    j["f32_nodes"] = info.summary.f32_nodes;
    j["casts"] = info.summary.casts.casts;
    j["cast_elements"] = info.summary.casts.cast_elements;
    // Nothing compiled: the executor's plan of the step, without what kernels add.
    MemoryReport memory = memory_report(vars, {});
    const StepPlan step = plan_step(g, info.fetches(), o.run.conv_layout, o.run.device.type);
    memory.graphs = step.estimate();
    out << "predicted memory: " << memory_line(memory)
        << " (kernel workspace: known once the kernels are made)\n";
    j["memory"] = memory_json(memory);
    if (!o.alloc_trace_path.empty()) {
      write_file_atomically(o.alloc_trace_path, alloc_trace_file(o, g, vars, step));
      out << "wrote " << o.alloc_trace_path << "\n";
    }
  }
  if (profiles) device_report.add_to(j);  // where the profiling step ran
  if (!o.json_path.empty()) {
    write_file_atomically(o.json_path, j.dump(1) + "\n");
    out << "wrote " << o.json_path << "\n";
  }
}

namespace {

// One policy of a bench run, built, compiled and warmed up: the training session of the
// run (TrainingSession or GanSession, the one `campo train` runs) with a fixed batch, the
// same for every model of an --array, every repetition and every policy (data loading is
// not measured). Classifiers feed it once and run steps; DCGAN draws its noise per step.
struct BenchPolicy {
  std::string precision;
  std::unique_ptr<Session> session;
  TrainingSession* classifier = nullptr;  // session, when it is a classifier's
  Batch batch;
  std::vector<const Batch*> batches;  // every model's: &batch
  std::vector<float> lr;              // every model's
  void step() {
    if (classifier)
      classifier->run();
    else  // DCGAN: the images again, uploaded during the step before where that overlaps
      session->step_models(batches, lr,
                           session->variables().backend().overlaps_uploads()
                               ? batches
                               : std::vector<const Batch*>{});
  }
};

// N models' hyperparameters: seeds seed, seed + 1, ..., every one at `lr`.
ArrayHyperparameters bench_models(const ModelRunOptions& run, const OptimizerConfig& o, float lr) {
  const size_t n = size_t(run.array);
  ArrayHyperparameters h{std::vector<float>(n, lr),
                         std::vector<float>(n, o.momentum),
                         std::vector<float>(n, o.weight_decay),
                         std::vector<float>(n, 0.0f),
                         {}};
  for (size_t i = 0; i < n; ++i) h.seed.push_back(run.seed + i);
  return h;
}

// The policy `precision` of the run: its session built on `backend` (its gradients
// averaged over `ranks`' ranks when they are on), fed, warmed up.
std::unique_ptr<BenchPolicy> bench_policy(const BenchOptions& o, const std::string& precision,
                                          std::shared_ptr<Backend> backend, Rng& rng,
                                          const DataParallelRun& ranks) {
  auto owned = std::make_unique<BenchPolicy>();
  BenchPolicy& p = *owned;
  p.precision = precision;
  const Precision policy = parse_precision(precision);
  const ModelRunOptions& run = o.run;
  if (is_gan_model(run.model)) {
    DcganOptions m;
    m.image_size = run.image_size;
    m.channels = run.channels;
    const OptimizerConfig opt = gan_optimizer(run);
    const ArrayHyperparameters h = bench_models(run, opt, kGanBenchLr);
    p.session = std::make_unique<GanSession>(m, run.batch, opt, h, backend, 1,
                                             model_run_precision(run, policy), run.conv_layout);
    p.batch.images = Tensor::empty({run.batch, m.channels, m.image_size, m.image_size}, DType::f32);
    for (int64_t i = 0; i < p.batch.images.numel(); ++i)
      p.batch.images.data_as<float>()[i] = rng.uniform(-1, 1);
    p.lr = h.lr;
  } else {
    const TrainingGraphSpec spec = model_run_spec(run, policy);
    const ArrayHyperparameters h = bench_models(run, spec.optimizer, o.lr);
    auto session = std::make_unique<TrainingSession>(
        spec.model, spec.model_options, spec.image_shape, spec.batch, spec.optimizer, h, backend,
        spec.precision, run.conv_layout, ranks);
    if (ranks.on()) check_ranks_agree(*ranks.comm, session->train_graph().to_text());
    // Random inputs (token models: ids) and labels; every token position is a target.
    const bool tokens = model_input(run.model) == ModelInput::tokens;
    Shape shape = {run.batch};
    shape.insert(shape.end(), spec.image_shape.begin(), spec.image_shape.end());
    p.batch.images = Tensor::empty(shape, tokens ? DType::i32 : DType::f32);
    p.batch.labels = Tensor::empty(tokens ? shape : Shape{run.batch}, DType::i32);
    for (int64_t i = 0; i < p.batch.images.numel(); ++i) {
      if (tokens)
        p.batch.images.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(run.classes)));
      else
        p.batch.images.data_as<float>()[i] = rng.normal();
    }
    for (int64_t i = 0; i < p.batch.labels.numel(); ++i)
      p.batch.labels.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(run.classes)));
    p.classifier = session.get();
    p.session = std::move(session);
    p.lr = h.lr;
  }
  p.batches.assign(size_t(run.array), &p.batch);
  if (p.classifier) p.classifier->feed(p.batches, p.lr);
  for (int i = 0; i < o.warmup; ++i) p.step();
  return owned;
}

// After the timed repetitions: casts, nodes in low precision, the predicted step time and
// the time per (op, compute type) and in casts of a few profiled steps.
void describe(BenchPolicy& p, BenchResult& res) {
  const PrecisionSummary s = p.session->precision_summary();
  res.casts = s.casts.casts;
  res.folded = s.casts.folded;
  res.weight_copies = s.casts.weight_copies;
  res.cast_elements = s.casts.cast_elements;
  res.low_nodes = s.low_nodes;
  res.predicted_ms = p.session->predicted_step_ms();
  res.memory = p.session->memory();
  res.cuda_graph = cuda_graph_json(*p.session);  // before the profiled (launched) steps
  res.cuda_graph_line = cuda_graph_line(*p.session);
  const int profiled = 3;
  p.session->set_profiling(true);
  for (int i = 0; i < profiled; ++i) p.step();
  p.session->set_profiling(false);
  const OpProfile& profile = p.session->profile();
  res.step_ms = profile.total_ms() / profiled;
  res.cast_ms_per_step = 0;
  for (const auto& [key, ms] : profile.by_op_dtype()) {
    res.op_ms.push_back({op_name(key.first), dtype_name(key.second), ms / profiled});
    if (key.first == OpKind::Cast) res.cast_ms_per_step += ms / profiled;
  }
}

// A bench run between its repetitions: the policies, their results so far, the machine's
// GEMM peak and the energy counters.
struct BenchRun {
  std::shared_ptr<Backend> backend;  // --device's, made once: every policy's steps run there
  std::unique_ptr<DeviceReport> device_report;
  std::vector<std::unique_ptr<BenchPolicy>> policies;  // at fixed addresses: batches point in
  // --data-parallel: the ranks, and on rank 0 each policy again in one process (the
  // scaling efficiency's baseline); no communicator: one process, no baseline.
  std::shared_ptr<Communicator> ranks;
  std::vector<std::unique_ptr<BenchPolicy>> one_process;
  std::vector<BenchResult> results;  // one per policy, in order
  BenchMachine machine;
  std::unique_ptr<EnergyMeter> energy;  // the device's counter; null: not available
};

// The GEMM sizes of the peak measurement: large enough to reach the kernel's peak, small
// enough that both precisions take well under a second (the emulated bf16 of a CPU
// without AVX-512 BF16 converts its operands every run, so it is slower than f32).
constexpr int64_t kPeakGemmSize = 1024;
constexpr int kPeakReps = 5;

DType bench_low_dtype(const ModelRunOptions& run) {
  return low_type_of(parse_low_precision_mode(run.mixed.low_precision));
}

// Samples one step trains on: the batch of every model of an --array (on each rank).
int64_t samples_per_step(const ModelRunOptions& run) { return run.batch * run.array; }

// What every rank of a data-parallel bench must have alike, beyond each policy's graph:
// ranks that ran different numbers of steps would wait in each other's collectives.
std::string bench_fingerprint(const BenchOptions& o) {
  std::ostringstream s;
  const ModelRunOptions& r = o.run;
  s << r.model << ' ' << r.batch << ' ' << r.image_size << ' ' << r.channels << ' ' << r.classes
    << ' ' << r.bert_config << ' ' << r.seq_len << ' ' << r.mixed.low_precision << ' '
    << optimizer_name(r.optimizer) << ' ' << r.seed << ' ' << r.array << ' ' << int(r.conv_layout)
    << ' ' << o.steps << ' ' << o.warmup << ' ' << o.repeats << ' ' << o.lr << ' ' << o.measure_peak
    << ' ' << o.data_parallel.bucket_mb;
  for (const std::string& p : o.precisions) s << ' ' << p;
  return s.str();
}

// Builds, compiles and warms up every policy; measures the GEMM peak first (o.measure_peak)
// and opens the energy counters.
BenchRun prepare_bench(const BenchOptions& o, std::shared_ptr<Backend> backend) {
  check_bench_options(o);
  BenchRun run;
  run.backend = required_backend(std::move(backend));
  CAMPO_CHECK(run.backend->device() == rank_device(o.run.device, o.data_parallel),
              "internal: bench of --device ", o.run.device.str(), " given a backend of ",
              run.backend->device().str());
  run.device_report = std::make_unique<DeviceReport>(run.backend);
  run.machine.device = run.backend->describe();
  run.machine.device_report = run.device_report.get();
  if (o.measure_peak) {
    run.machine.peak_f32 = measure_gemm_peak(run.backend, DType::f32, kPeakGemmSize, kPeakGemmSize,
                                             kPeakGemmSize, kPeakReps);
    run.machine.peak_low = measure_gemm_peak(run.backend, bench_low_dtype(o.run), kPeakGemmSize,
                                             kPeakGemmSize, kPeakGemmSize, kPeakReps);
  }
  if (o.data_parallel.enabled) {
    run.ranks = join_ranks(o.data_parallel, o.run.device.type);
    check_ranks_agree(*run.ranks, bench_fingerprint(o));
    run.machine.ranks = run.ranks.get();
  }
  if (run.machine.world_size() > 1) {
    run.machine.energy_unavailable =
        o.run.device.type == Device::cuda
            ? "data-parallel: the energy of the ranks' GPUs is not gathered"
            : "data-parallel: ranks that share a package would each count all of its energy";
  } else {
    DeviceEnergy energy = open_device_energy(*run.backend, o.powercap_root, o.nvml_library);
    run.energy = std::move(energy.meter);
    run.machine.energy_unavailable = energy.unavailable;
    if (run.energy) {
      run.machine.energy_source = run.energy->source();
      run.machine.energy_update_period_s = run.energy->update_period_seconds();
    }
  }
  const DataParallelRun ranks = data_parallel_run(run.ranks, o.data_parallel);
  Rng rng(o.run.seed);
  for (const std::string& p : o.precisions) {
    run.policies.push_back(bench_policy(o, p, run.backend, rng, ranks));
    if (ranks.on() && ranks.rank() == 0)
      run.one_process.push_back(bench_policy(o, p, run.backend, rng, {}));
  }
  run.backend->synchronize();  // the warm-up steps are not in the first repetition's time
  for (const auto& p : run.policies) {
    BenchResult res;
    res.precision = p->precision;
    res.flops = p->session->step_flops();
    run.results.push_back(res);
  }
  return run;
}

// o.steps steps of `p`, timed once they have run (a GPU's steps are queued).
double timed_steps(const BenchOptions& o, BenchRun& run, BenchPolicy& p) {
  Timer t;
  for (int i = 0; i < o.steps; ++i) p.step();
  run.backend->synchronize();
  return t.seconds();
}

// --data-parallel, before a policy's timed steps on every rank: the same steps in one
// process, rank 0 alone while the other ranks wait for its time, and every rank then
// starting together. Samples/s of the one process.
double time_one_process(const BenchOptions& o, BenchRun& run, size_t k) {
  double seconds = 0;
  if (run.ranks->rank() == 0) seconds = timed_steps(o, run, *run.one_process[k]);
  run.ranks->broadcast(&seconds, sizeof seconds, 0);
  return double(o.steps) * double(samples_per_step(o.run)) / seconds;
}

// One interleaved repetition: each policy in turn, o.steps timed steps each (and the
// device's energy over them when its counter is readable, read with nothing queued before
// and after). --data-parallel: each policy's one-process baseline first; the step time is the
// slowest rank's, the samples every rank's.
void run_bench_repetition(const BenchOptions& o, BenchRun& run) {
  for (size_t k = 0; k < run.policies.size(); ++k) {
    BenchResult& res = run.results[k];
    Communicator::Stats before_comm;
    if (run.ranks) {
      res.one_process_samples_per_sec.push_back(time_one_process(o, run, k));
      before_comm = run.ranks->stats();
    }
    std::vector<uint64_t> before;
    Timer energy_window;
    if (run.energy) {
      run.backend->synchronize();  // nothing queued before the window is in it
      before = run.energy->read();
      energy_window.reset();
    }
    double seconds = timed_steps(o, run, *run.policies[k]);  // ends synchronized
    if (run.energy) {
      res.joules.push_back(run.energy->joules_between(before, run.energy->read()));
      res.energy_seconds.push_back(energy_window.seconds());
    }
    int ranks = 1;
    if (run.ranks) {
      ranks = run.ranks->size();
      std::vector<double> all(static_cast<size_t>(ranks));
      run.ranks->all_gather(&seconds, all.data(), sizeof seconds);
      seconds = *std::max_element(all.begin(), all.end());
      res.communication += run.ranks->stats() - before_comm;
    }
    res.samples_per_sec.push_back(double(o.steps) * double(samples_per_step(o.run) * ranks) /
                                  seconds);
  }
}

std::vector<BenchResult> finish_bench_run(const BenchOptions& o, BenchRun& run, std::ostream& out) {
  if (!run.results.empty() && !run.results[0].samples_per_sec.empty())
    for (size_t k = 0; k < run.policies.size(); ++k) describe(*run.policies[k], run.results[k]);
  if (run.ranks && run.ranks->rank() != 0) {  // --data-parallel: rank 0 reports and writes
    BenchOptions quiet = o;
    quiet.json_path.clear();
    std::ostream nowhere(nullptr);
    return finish_bench(quiet, run.results, run.machine, nowhere);
  }
  return finish_bench(o, run.results, run.machine, out);
}

}  // namespace

std::vector<BenchResult> run_bench(const BenchOptions& o, std::shared_ptr<Backend> backend,
                                   std::ostream& out) {
  BenchRun run = prepare_bench(o, std::move(backend));
  for (int r = 0; r < o.repeats; ++r) run_bench_repetition(o, run);
  return finish_bench_run(o, run, out);
}

std::vector<BenchResult> run_bench_lockstep(const BenchOptions& o, std::shared_ptr<Backend> backend,
                                            std::istream& commands, std::ostream& protocol,
                                            std::ostream& out) {
  CAMPO_CHECK(!o.data_parallel.enabled, "internal: --lockstep with --data-parallel");
  BenchRun run = prepare_bench(o, std::move(backend));
  nlohmann::json ready = {
      {"ready", true},
      {"framework", std::string("campo ") + CAMPO_VERSION},
      {"model", o.run.model},
      {"array", o.run.array},
      {"precisions", o.precisions},
      {"flops_per_step", run.results.at(0).flops.total()},
      {"gemm_flops_per_step", run.results.at(0).flops.gemm},
      {"params", run.policies.at(0)->session->variables().count_elements(VariableKind::parameter)}};
  protocol << ready.dump() << std::endl;  // endl: flushed, the orchestrator waits for it
  std::string line;
  while (std::getline(commands, line)) {
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    const std::string command = b == std::string::npos ? "" : line.substr(b, e - b + 1);
    if (command.empty()) continue;
    if (command == "quit") break;
    CAMPO_CHECK(command == "run", "--lockstep: unknown command '", command,
                "' on stdin (one command a line: run or quit)");
    run_bench_repetition(o, run);
    nlohmann::json speeds = nlohmann::json::object();
    for (const BenchResult& res : run.results) speeds[res.precision] = res.samples_per_sec.back();
    protocol << nlohmann::json{{"samples_per_sec", speeds}}.dump() << std::endl;
  }
  return finish_bench_run(o, run, out);
}

PairedRatio paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  CAMPO_CHECK(a.size() == b.size() && !a.empty(), "paired_ratio: ", a.size(), " and ", b.size(),
              " repetitions");
  PairedRatio p;
  for (size_t r = 0; r < a.size(); ++r) {
    p.ratios.push_back(b[r] / a[r]);
    p.faster += b[r] > a[r];
  }
  p.median = median_of(p.ratios);
  // The k-th smallest and k-th largest ratios bound the median with probability
  // 1 - 2 P(X < k), X ~ Binomial(n, 1/2): the largest k with P(X < k) <= 2.5%.
  const int n = int(p.ratios.size());
  std::vector<double> sorted = p.ratios;
  std::sort(sorted.begin(), sorted.end());
  double below = 0, pmf = std::ldexp(1.0, -n);  // P(X < k), P(X = k - 1)
  int k = 0;
  for (int i = 0; i < n && below + pmf <= 0.025; ++i) {
    below += pmf;
    pmf = pmf * double(n - i) / double(i + 1);
    k = i + 1;
  }
  p.ci_low = k > 0 ? sorted[size_t(k - 1)] : std::nan("");
  p.ci_high = k > 0 ? sorted[size_t(n - k)] : std::nan("");
  return p;
}

std::vector<BenchResult> finish_bench(const BenchOptions& o, std::vector<BenchResult>& results,
                                      const BenchMachine& machine, std::ostream& out) {
  const size_t repetitions = results.empty() ? 0 : results[0].samples_per_sec.size();
  if (repetitions == 0) {
    // --lockstep whose stdin closed before the first "run": nothing was measured.
    out << "bench: " << o.run.model << ": no repetition was run, nothing measured\n";
    if (!o.json_path.empty()) {
      write_file_atomically(o.json_path, "[]\n");
      out << "wrote " << o.json_path << "\n";
    }
    return results;
  }
  double fp32_median = 0;
  const BenchResult* amp = nullptr;
  for (BenchResult& res : results) {
    res.median = median_of(res.samples_per_sec);
    res.min = *std::min_element(res.samples_per_sec.begin(), res.samples_per_sec.end());
    res.max = *std::max_element(res.samples_per_sec.begin(), res.samples_per_sec.end());
    if (res.precision == "fp32") fp32_median = res.median;
    if (res.precision == "amp") amp = &res;
  }
  for (BenchResult& res : results)
    if (amp && res.precision != "fp32" && res.precision != "amp")
      res.vs_amp = paired_ratio(amp->samples_per_sec, res.samples_per_sec);
  const int ranks = machine.world_size();
  for (BenchResult& res : results) {
    if (res.one_process_samples_per_sec.empty()) continue;
    std::vector<double> ideal;  // N ranks as fast as N lone processes
    for (double x : res.one_process_samples_per_sec) ideal.push_back(x * ranks);
    res.scaling = paired_ratio(ideal, res.samples_per_sec);
  }
  const bool tokens = is_known_model(o.run.model) && model_input(o.run.model) == ModelInput::tokens;
  out << "bench: " << o.run.model << ", batch " << o.run.batch << ", input "
      << (tokens ? "[" + std::to_string(o.run.seq_len) + "] tokens"
                 : "[" + std::to_string(o.run.channels) + "," + std::to_string(o.run.image_size) +
                       "," + std::to_string(o.run.image_size) + "]")
      << (o.run.array > 1 ? ", array of " + std::to_string(o.run.array) + " models (" +
                                std::to_string(samples_per_step(o.run)) + " samples/step)"
                          : std::string())
      << ", " << o.steps << " steps x " << repetitions << " interleaved repetitions, low precision "
      << o.run.mixed.low_precision << "\n";
  if (!o.run.costs_note.empty()) out << "costs: " << o.run.costs_note << "\n";
  if (o.data_parallel.enabled)
    out << "data-parallel: " << ranks << " ranks (" << machine.ranks->transport() << "), batch "
        << o.run.batch << " per rank; samples/s are every rank's; one process: the same step, "
        << "rank 0 alone, timed before each repetition\n";
  const double peak_f32 = machine.peak_f32 ? machine.peak_f32->gflops : 0;
  const double peak_low = machine.peak_low ? machine.peak_low->gflops : 0;
  char line[512];
  if (machine.peak_f32 && machine.peak_low) {
    std::snprintf(line, sizeof line,
                  "peak: one %lldx%lldx%lld GEMM (campo's MatMul kernel, best of %d): f32 %.1f "
                  "GFLOP/s, %s %.1f GFLOP/s\n",
                  (long long)machine.peak_f32->m, (long long)machine.peak_f32->n,
                  (long long)machine.peak_f32->k, machine.peak_f32->reps, peak_f32,
                  dtype_name(machine.peak_low->dtype), peak_low);
    out << line;
  } else {
    out << "peak: not measured (--no-peak)\n";
  }
  if (!machine.energy_unavailable.empty())
    out << "energy: not available (" << machine.energy_unavailable << ")\n";
  nlohmann::json j = nlohmann::json::array();
  // What the figures were measured on (Backend::describe of the benchmarked device).
  const std::string& machine_name = machine.device;
  out << "device: " << machine_name << "\n";
  for (BenchResult& res : results) {
    res.ratio_to_fp32 = fp32_median > 0 ? res.median / fp32_median : 0;
    const double per_step = double(samples_per_step(o.run) * ranks);
    const double measured_ms = res.median > 0 ? 1000.0 * per_step / res.median : 0;
    if (res.predicted_ms > 0 && measured_ms > 0)
      res.prediction_error_pct = 100.0 * (res.predicted_ms - measured_ms) / measured_ms;
    // Roofline: the counted FLOPs at the median rate, against the peak of the step's GEMM mix.
    const double steps_per_sec = res.median / per_step;
    res.achieved_gflops = double(res.flops.total()) * steps_per_sec * 1e-9;
    res.peak_gflops = mixed_gemm_peak_gflops(res.flops, peak_f32, peak_low);
    res.pct_of_peak = res.peak_gflops > 0 ? 100.0 * res.achieved_gflops / res.peak_gflops : 0;
    // The --steps whose shortest window would span kReliableEnergyRefreshes refreshes (0:
    // the windows are long enough).
    double steps_for_energy = 0;
    if (!res.joules.empty()) {
      res.joules_per_step = median_of(res.joules) / double(o.steps);
      res.samples_per_joule = res.joules_per_step > 0 ? per_step / res.joules_per_step : 0;
      CAMPO_CHECK(res.energy_seconds.size() == res.joules.size(), "internal: ", res.joules.size(),
                  " energy readings of ", res.energy_seconds.size(), " windows");
      const double shortest =
          *std::min_element(res.energy_seconds.begin(), res.energy_seconds.end());
      const double needed = kReliableEnergyRefreshes * machine.energy_update_period_s;
      res.energy_reliable = shortest >= needed;
      if (!res.energy_reliable)
        steps_for_energy = std::ceil(double(o.steps) * needed / std::max(shortest, 1e-9));
    }
    char cast_time[64];
    std::snprintf(cast_time, sizeof cast_time, "%6.2f ms/step in casts (%4.1f%%)",
                  res.cast_ms_per_step,
                  res.step_ms > 0 ? 100.0 * res.cast_ms_per_step / res.step_ms : 0.0);
    char folded[32] = "";
    if (res.folded > 0) std::snprintf(folded, sizeof folded, " (+%d folded)", res.folded);
    std::snprintf(line, sizeof line,
                  "%-8s %-11s %9.1f samples/s (%.1f-%.1f)  x%s  %3d casts%s  %s  %d nodes low\n",
                  o.run.model.c_str(), res.precision.c_str(), res.median, res.min, res.max,
                  fp32_median > 0 ? (std::to_string(res.ratio_to_fp32).substr(0, 4)).c_str() : "-",
                  res.casts, folded, cast_time, res.low_nodes);
    out << line;
    if (res.predicted_ms > 0) {
      std::snprintf(line, sizeof line,
                    "%-8s %-11s predicted %.2f ms/step, measured %.2f ms/step (%+.1f%%)\n", "", "",
                    res.predicted_ms, measured_ms, res.prediction_error_pct);
      out << line;
    }
    if (res.vs_amp) {
      const PairedRatio& p = *res.vs_amp;
      char ci[64] = "95% CI needs 6 or more repetitions";
      if (!std::isnan(p.ci_low))
        std::snprintf(ci, sizeof ci, "95%% CI %.3f-%.3f", p.ci_low, p.ci_high);
      std::snprintf(line, sizeof line,
                    "%-8s %-11s x%.3f of amp, paired by repetition (%s; faster in %d of %zu)\n", "",
                    "", p.median, ci, p.faster, p.ratios.size());
      out << line;
    }
    {
      const double gemm_share =
          res.flops.gemm > 0 ? 100.0 * double(res.flops.gemm_low) / double(res.flops.gemm) : 0;
      char peak[160] = "";
      if (res.peak_gflops > 0 && res.flops.gemm_low == 0)
        std::snprintf(peak, sizeof peak, ", %.1f%% of the f32 GEMM peak", res.pct_of_peak);
      else if (res.peak_gflops > 0)
        std::snprintf(peak, sizeof peak,
                      ", %.1f%% of the GEMM peak of its mix (%.1f GFLOP/s: %.0f%% of the GEMM "
                      "FLOPs in %s)",
                      res.pct_of_peak, res.peak_gflops, gemm_share,
                      dtype_name(bench_low_dtype(o.run)));
      std::snprintf(line, sizeof line,
                    "%-8s %-11s roofline: %.3f GFLOP/step (%.3f in GEMMs), %.2f GFLOP/s%s\n", "",
                    "", double(res.flops.total()) * 1e-9, double(res.flops.gemm) * 1e-9,
                    res.achieved_gflops, peak);
      out << line;
    }
    // --data-parallel: the timed steps' communication, per step (every repetition's).
    const nlohmann::json communication =
        res.scaling ? communication_json(*machine.ranks, res.communication,
                                         double(o.steps) * double(repetitions))
                    : nlohmann::json();
    if (res.scaling) {
      const PairedRatio& p = *res.scaling;
      const nlohmann::json& reduce = communication["reduce_ms_per_step"];
      char reduced[32] = "(not timed)";
      if (!reduce.is_null()) std::snprintf(reduced, sizeof reduced, "%.2f", reduce.get<double>());
      std::snprintf(line, sizeof line,
                    "%-8s %-11s %.1f samples/s per rank, one process %.1f: scaling efficiency "
                    "%.2f (median of %zu paired repetitions); gradients %.1f MiB/step in %.0f "
                    "buckets, reduced in %s ms/step, waited %.2f ms/step\n",
                    "", "", res.median / ranks, median_of(res.one_process_samples_per_sec),
                    p.median, p.ratios.size(),
                    communication["bytes_per_step"].get<double>() / (1 << 20),
                    communication["buckets"].get<double>(), reduced,
                    communication["wait_ms_per_step"].get<double>());
      out << line;
    }
    out << std::string(21, ' ') << "memory: " << memory_line(res.memory) << "\n";
    if (machine.device_report && machine.device_report->backend()->capture_unsupported().empty())
      out << std::string(21, ' ') << res.cuda_graph_line << "\n";
    if (!res.joules.empty()) {
      std::string source = machine.energy_source;
      for (char& c : source) c = char(std::toupper(static_cast<unsigned char>(c)));
      char reliability[160] = "";
      if (!res.energy_reliable)
        std::snprintf(reliability, sizeof reliability,
                      "; not reliable: windows from %.3g ms, under %.0f of the counter's %.3g ms "
                      "refreshes; --steps %.0f or more",
                      1e3 * *std::min_element(res.energy_seconds.begin(), res.energy_seconds.end()),
                      kReliableEnergyRefreshes, 1e3 * machine.energy_update_period_s,
                      steps_for_energy);
      std::snprintf(line, sizeof line, "%-8s %-11s energy: %.3f J/step, %.2f samples/J (%s%s)\n",
                    "", "", res.joules_per_step, res.samples_per_joule, source.c_str(),
                    reliability);
      out << line;
    }
    j.push_back({{"model", o.run.model},
                 {"machine", machine_name},
                 {"precision", res.precision},
                 {"low_precision", o.run.mixed.low_precision},
                 {"batch", o.run.batch},
                 {"world_size", ranks},
                 {"array", o.run.array},
                 {"samples_per_sec", res.samples_per_sec},
                 {"median_samples_per_sec", res.median},
                 {"ratio_to_fp32", res.ratio_to_fp32},
                 {"casts", res.casts},
                 {"folded_casts", res.folded},
                 {"weight_copies", res.weight_copies},
                 {"cast_elements", res.cast_elements},
                 {"cast_ms_per_step", res.cast_ms_per_step},
                 {"step_ms", res.step_ms},
                 {"low_nodes", res.low_nodes},
                 {"predicted_ms", res.predicted_ms},
                 {"measured_ms", measured_ms},
                 {"prediction_error_pct", res.prediction_error_pct},
                 {"flops_per_step", res.flops.total()},
                 {"gemm_flops_per_step", res.flops.gemm},
                 {"gemm_flops_low_per_step", res.flops.gemm_low},
                 {"other_flops_per_step", res.flops.other},
                 {"achieved_gflops", res.achieved_gflops}});
    if (!res.op_ms.empty()) {
      nlohmann::json ops = nlohmann::json::array();
      for (const OpTime& t : res.op_ms)
        ops.push_back({{"op", t.op}, {"dtype", t.dtype}, {"ms", t.ms}});
      j.back()["op_ms"] = ops;
    }
    nlohmann::json& e = j.back();
    if (res.precision == "cost-aware" && o.run.plan_for.active()) {
      e["for"] = o.run.plan_for.device;  // its plan: from costs predicted for that device
      e["costs"] = o.run.costs_note;
    }
    e["memory"] = memory_json(res.memory);
    e["cuda_graph"] = res.cuda_graph;
    e["peak_rss_mib"] = double(peak_resident_memory_bytes()) / double(1 << 20);
    if (machine.device_report) machine.device_report->add_to(e);
    auto or_null = [](bool known, double v) {
      return known ? nlohmann::json(v) : nlohmann::json();
    };
    e["peak_gflops_f32"] = or_null(peak_f32 > 0, peak_f32);
    e["peak_gflops_low"] = or_null(peak_low > 0, peak_low);
    e["peak_gflops"] = or_null(res.peak_gflops > 0, res.peak_gflops);
    e["pct_of_peak"] = or_null(res.peak_gflops > 0, res.pct_of_peak);
    e["pct_of_peak_f32"] = or_null(peak_f32 > 0, 100.0 * res.achieved_gflops / peak_f32);
    e["pct_of_peak_low"] = or_null(peak_low > 0, 100.0 * res.achieved_gflops / peak_low);
    if (res.joules.empty())
      e["energy"] = nullptr;
    else
      e["energy"] = {{"joules", res.joules},
                     {"joules_per_step", res.joules_per_step},
                     {"samples_per_joule", res.samples_per_joule},
                     {"source", machine.energy_source},
                     {"window_seconds", res.energy_seconds},
                     {"update_period_seconds", machine.energy_update_period_s},
                     {"reliable", res.energy_reliable}};
    auto paired_json = [](const PairedRatio& p) {
      return nlohmann::json{{"ratios", p.ratios},
                            {"median", p.median},
                            {"ci95", std::isnan(p.ci_low) ? nlohmann::json(nullptr)
                                                          : nlohmann::json{p.ci_low, p.ci_high}},
                            {"faster", p.faster}};
    };
    if (res.vs_amp) e["vs_amp"] = paired_json(*res.vs_amp);
    if (res.scaling) {
      e["transport"] = machine.ranks->transport();
      e["samples_per_sec_per_rank"] = res.median / ranks;
      e["one_process_samples_per_sec"] = res.one_process_samples_per_sec;
      e["scaling_efficiency"] = paired_json(*res.scaling);
      e["communication"] = communication;
    }
  }
  // Every policy's session is alive at once: the process's peak is theirs together.
  std::snprintf(line, sizeof line, "peak RSS of the process (every policy): %.1f MiB\n",
                double(peak_resident_memory_bytes()) / double(1 << 20));
  out << line;
  if (!o.json_path.empty()) {
    write_file_atomically(o.json_path, j.dump(1) + "\n");
    out << "wrote " << o.json_path << "\n";
  }
  return results;
}

}  // namespace campo
