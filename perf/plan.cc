#include "perf/plan.h"

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
#include "ops/quantized_gemm_route.h"
#include "perf/model_run.h"
#include "perf/roofline.h"
#include "runtime/atomic_file.h"
#include "runtime/energy.h"
#include "runtime/file_check.h"
#include "runtime/memory_info.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/make_session.h"
#include "train/model_array.h"
#include "train/profiling.h"
#include "train/trainer.h"

namespace campo {

namespace {

constexpr size_t kSetByWidth = 30;  // the plan table's "set by" column

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

namespace {

// Per node of a graph after cast insertion: the Cast nodes (weight copies aside: they run only
// when the weights change from outside a step) that feed its inputs and that read its outputs,
// the casts its precision costs. A cast read by several nodes counts for each.
struct NodeCasts {
  std::vector<int> in, out;
  explicit NodeCasts(const Graph& g) : in(size_t(g.num_nodes()), 0), out(size_t(g.num_nodes()), 0) {
    for (NodeId c = 0; c < g.num_nodes(); ++c) {
      const Node& cast = g.node(c);
      if (cast.kind != OpKind::Cast || cast.weight_copy) continue;
      const NodeId from = g.value(cast.inputs[0]).producer;
      if (g.node(from).kind != OpKind::Cast) ++out[size_t(from)];
      for (NodeId reader : g.consumers(cast.outputs[0]))
        if (g.node(reader).kind != OpKind::Cast) ++in[size_t(reader)];
    }
  }
};

// What set node `id`'s precision, for plans: "rule N" (a precision policy file's), else the
// policy's own choice ("lists" for amp, "search" for cost-aware, "fp32"); "" for leaves, casts
// and the nodes no policy decides (optimizer updates).
std::string set_by(const Node& n, NodeId id, const PrecisionConfig& precision,
                   const PolicyAssignment* rules) {
  if (!rule_may_set(n)) return "";
  if (rules && size_t(id) < rules->rule.size() && rules->is_set(id))
    return "rule " + std::to_string(rules->rule[size_t(id)]);
  switch (precision.policy) {
    case Precision::amp:
      return "lists";
    case Precision::cost_aware:
      return "search";
    case Precision::fp32:
      return "fp32";
  }
  return "?";
}

// A rule's words for the table: its note, else its description.
std::string rule_words(const PrecisionRule& r) { return r.note.empty() ? r.describe() : r.note; }

constexpr size_t kLosingMost = 5;  // --numerics: the nodes listed as losing most

// --numerics: the nodes of `g` (in topological order) that the run's records name; one error
// line when none (the file records another model's, or another plan's, nodes).
std::vector<std::string> nodes_with_numerics(const Graph& g, const NumericsSummary& s) {
  std::vector<std::string> names;
  for (NodeId id : g.topological_order())
    if (s.nodes.count(g.node(id).name)) names.push_back(g.node(id).name);
  CAMPO_CHECK(!names.empty(), "--numerics file ", s.path, " names none of this plan's nodes (",
              s.nodes.size(), " recorded nodes, e.g. '", s.nodes.begin()->first,
              "'): it records a run of another model or precision policy");
  return names;
}

// The node's figures in the run's records; null without --numerics or records of it.
const TensorLoss* recorded_loss(const NumericsSummary* s, const std::string& node) {
  if (!s) return nullptr;
  const auto it = s->nodes.find(node);
  return it == s->nodes.end() ? nullptr : &it->second;
}

// The node's figures for plan --json (null without).
nlohmann::json numerics_json(const TensorLoss* loss) {
  if (!loss) return nullptr;
  const TensorLoss& t = *loss;
  return {{"operand", t.operand},
          {"pass", t.pass},
          {"format", t.format},
          {"underflow", t.underflow},
          {"saturated", t.saturated},
          {"nan", t.nan},
          {"inf", t.inf},
          {"steps", t.steps}};
}

// The node's mark on its plan line: "  {a fwd e4m3: underflow 1.25%, saturated 0%}", with
// "; loses most #k" for the ranked ones; "" without records.
std::string numerics_mark(const TensorLoss* loss, const std::string& node,
                          const std::vector<std::string>& ranked) {
  if (!loss) return "";
  std::string mark = "  {" + describe_loss(*loss);
  const auto rank = std::find(ranked.begin(), ranked.end(), node);
  if (rank != ranked.end()) mark += "; loses most #" + std::to_string(rank - ranked.begin() + 1);
  return mark + "}";
}

// After the totals: where the records come from and the nodes that lose most.
void print_losing_most(const NumericsSummary& s, const std::vector<std::string>& matched,
                       const std::vector<std::string>& ranked, std::ostream& out) {
  out << "numerics " << s.path << ": " << s.records << " records of steps " << s.first_step << ".."
      << s.last_step << ", " << matched.size() << " of this plan's nodes recorded";
  if (matched.size() < s.nodes.size())
    out << " (" << s.nodes.size() - matched.size() << " recorded nodes are not in it)";
  out << "; figures: each node's operand that loses most, mean over its recorded steps\n";
  if (ranked.empty()) {
    out << "loses most: none (no operand flushed to zero, saturated or overflowed)\n";
    return;
  }
  out << "loses most:\n";
  for (size_t i = 0; i < ranked.size(); ++i)
    out << "  " << i + 1 << ". " << ranked[i] << "  " << describe_loss(s.nodes.at(ranked[i]))
        << "\n";
}

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
  const NumericsSummary* numerics = o.numerics.get();
  const std::vector<std::string> recorded =
      numerics ? nodes_with_numerics(g, *numerics) : std::vector<std::string>{};
  const std::vector<std::string> ranked =
      numerics ? nodes_losing_most(*numerics, recorded, kLosingMost) : std::vector<std::string>{};
  out << title << "\n";
  out << std::left << std::setw(44) << "node" << std::setw(22) << "op" << std::setw(5) << "step"
      << std::setw(7) << "list" << std::setw(6) << "dtype";
  if (costed)
    out << std::right << std::setw(9) << "f32 ms" << std::setw(9) << (f16 ? "bf16 ms" : "low ms")
        << (f16 ? "  f16 ms" : "") << "  " << std::left << std::setw(14) << "decided by";
  // --precision-policy: which rule (or the policy) set each node, and the casts it costs.
  const PolicyAssignment* rules = info ? info->rules.get() : nullptr;
  const NodeCasts casts(g);
  if (rules) out << std::left << std::setw(kSetByWidth) << "set by" << std::setw(7) << "casts";
  out << "shapes\n";
  nlohmann::json nodes = nlohmann::json::array();
  struct {
    int nodes = 0;
    int64_t elements = 0;
    int fp8_on_cuda = 0;  // --device cuda: nodes cuBLASLt multiplies as FP8 (the rest emulated)
  } quantized;
  const bool on_cuda = o.run.device.type == Device::cuda;
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
                           {"shapes", shapes},
                           {"casts_in", casts.in[size_t(id)]},
                           {"casts_out", casts.out[size_t(id)]}};
    const std::string setter = set_by(n, id, precision, rules);
    node["set_by"] = setter.empty() ? nlohmann::json(nullptr) : nlohmann::json(setter);
    node["rule"] = rules && size_t(id) < rules->rule.size() && rules->is_set(id)
                       ? nlohmann::json(rules->rule[size_t(id)])
                       : nlohmann::json(nullptr);
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
    // A quantized GEMM: its format and recipe, and what it quantizes every step (each operand:
    // amax, scale, cast; MX: a scale per 32-element block).
    std::string quant_text;
    if (n.quant.enabled) {
      const int64_t elements =
          shape_numel(g.value(n.inputs[0]).shape) + shape_numel(g.value(n.inputs[1]).shape);
      ++quantized.nodes;
      quantized.elements += elements;
      node["quant"] = {
          {"format", n.quant.format},
          {"elements",
           {element_format_name(n.quant.element[0]), element_format_name(n.quant.element[1])}},
          {"scaling", scaling_name(n.quant.recipe.scaling)},
          {"recipe", n.quant.recipe.describe()},
          {"rounding", n.quant.rounding == Rounding::stochastic ? "stochastic" : "nearest"},
          {"quantized_elements", elements}};
      std::string cuda_text;
      if (on_cuda) {  // how the CUDA kernel runs it (ops/quantized_gemm_route.h)
        const CudaGemmPlan route = plan_quantized_gemm_on_cuda(
            n.kind, n.attrs, {g.value(n.inputs[0]).shape, g.value(n.inputs[1]).shape}, n.quant);
        quantized.fp8_on_cuda += route.route == CudaGemmRoute::fp8;
        node["quant"]["cuda"] = cuda_gemm_route_name(route.route);
        node["quant"]["cuda_reason"] = route.reason;
        cuda_text = std::string("; cuda: ") + cuda_gemm_route_name(route.route) +
                    (route.reason.empty() ? "" : ", " + route.reason);
      }
      quant_text = "  [" + n.quant.describe() + "; quantizes 2 operands, " + with_commas(elements) +
                   " elements per step" + cuda_text + "]";
    } else {
      node["quant"] = nullptr;
    }
    const TensorLoss* loss = recorded_loss(numerics, n.name);
    node["numerics"] = numerics_json(loss);
    quant_text += numerics_mark(loss, n.name, ranked);
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
    if (rules) {
      std::string who = setter;
      if (!node["rule"].is_null())
        who += ": " + rule_words(precision.rules->rules[size_t(node["rule"].get<int>() - 1)]);
      if (who.size() > kSetByWidth - 1) who = who.substr(0, kSetByWidth - 4) + "...";
      const int in = casts.in[size_t(id)], outs = casts.out[size_t(id)];
      const std::string cast_text =
          setter.empty() ? "" : std::to_string(in) + "/" + std::to_string(outs);
      out << std::left << std::setw(kSetByWidth) << who << std::setw(7) << cast_text;
    }
    out << shapes << quant_text << "\n";
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
  if (quantized.nodes > 0 && !on_cuda)
    out << "quantized GEMMs: " << quantized.nodes << " nodes compute in f32 on FP8/MX operands "
        << "(CPU emulation), " << with_commas(quantized.elements)
        << " operand elements quantized per step (amax, scale, cast)\n";
  if (quantized.nodes > 0 && on_cuda)
    out << "quantized GEMMs: " << quantized.nodes << " nodes on FP8 operands, "
        << quantized.fp8_on_cuda << " as cuBLASLt FP8 GEMMs, "
        << quantized.nodes - quantized.fp8_on_cuda
        << " emulated (f32 kernels on the decoded codes; each node's line says why), "
        << with_commas(quantized.elements)
        << " operand elements quantized per step (amax, scale, cast)\n";
  if (numerics) print_losing_most(*numerics, recorded, ranked, out);
  nlohmann::json policy_json(nullptr);
  if (rules) {
    const PrecisionPolicy& file = *precision.rules;
    out << "precision policy " << file.path
        << (file.description.empty() ? "" : " (" + file.description + ")") << ": " << rules->layers
        << " layers; casts in/out: Cast nodes feeding the node / reading it\n";
    policy_json = {{"path", file.path},
                   {"description", file.description},
                   {"layers", rules->layers},
                   {"rules", nlohmann::json::array()}};
    for (const PrecisionRule& r : file.rules) {
      const int set = rules->nodes_set[size_t(r.index - 1)];
      out << "  rule " << r.index << ": " << r.describe()
          << (r.note.empty() ? "" : " (" + r.note + ")") << ": sets " << set << " nodes"
          << (set == 0 ? " (later rules override all it selects)" : "") << "\n";
      policy_json["rules"].push_back(
          {{"index", r.index},
           {"description", r.describe()},
           {"note", r.note},
           {"format", r.gemm.enabled ? r.gemm.format : std::string(dtype_name(r.format))},
           {"recipe", r.gemm.enabled ? nlohmann::json(r.format_text()) : nlohmann::json(nullptr)},
           {"nodes", set}});
    }
  }
  if (!dot_path.empty()) {
    write_file_atomically(dot_path, g.to_dot());
    out << "wrote " << dot_path << "\n";
  }
  return {{"title", title},
          {"precision_policy", policy_json},
          {"low_nodes", s.low_nodes},
          {"quantized_gemms", quantized.nodes},
          {"quantized_gemms_fp8_on_cuda",
           on_cuda ? nlohmann::json(quantized.fp8_on_cuda) : nlohmann::json(nullptr)},
          {"quantized_elements", quantized.elements},
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

std::vector<std::string> plan_dot_files(const PlanOptions& o) {
  if (o.dot_path.empty()) return {};
  if (step_graph_count(o.run.model) == 1) return {o.dot_path};
  return {with_suffix(o.dot_path, "_d"), with_suffix(o.dot_path, "_g")};
}

void check_plan_options(const PlanOptions& o) {
  const Precision policy = o.precision;
  check_model_run_numbers(o.run);
  // cost-aware on a GPU profiles there and uses a calibration made on that GPU (campo
  // calibrate --device cuda), as on the CPU: nothing to refuse here.
  check_plan_for_options(o.run.plan_for);
  CAMPO_CHECK(!o.run.plan_for.active() || policy == Precision::cost_aware,
              "--for plans the cost-aware policy from predicted costs; --precision ",
              precision_name(o.precision), " needs no costs");
  CAMPO_CHECK(step_graph_count(o.run.model) == 1 || o.run.array == 1,
              "campo plan --array does not support --model dcgan (plan a single DCGAN; "
              "campo bench --model dcgan --array N measures its array)");
  CAMPO_CHECK(o.numerics_path.empty() || step_graph_count(o.run.model) == 1,
              "campo plan --numerics does not support --model dcgan (campo train --numerics "
              "does not record it)");
  for (const std::string& dot : plan_dot_files(o)) require_output_file(dot, "--dot file");
  if (!o.json_path.empty()) require_output_file(o.json_path, "--json file");
  if (!o.alloc_trace_path.empty()) {
    CAMPO_CHECK(step_graph_count(o.run.model) == 1,
                "campo plan --alloc-trace does not support --model dcgan (its two step graphs "
                "would interleave); trace a classifier");
    require_output_file(o.alloc_trace_path, "--alloc-trace file");
  }
}

void load_plan_numerics(PlanOptions& o) {
  if (!o.numerics_path.empty())
    o.numerics = std::make_shared<const NumericsSummary>(read_numerics_file(o.numerics_path));
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

namespace {

// A model of several step graphs (DCGAN's discriminator and generator steps): each planned
// alone, from the session that trains them (compiled, not run).
void plan_step_graphs(const PlanOptions& o, const std::shared_ptr<Backend>& backend,
                      std::ostringstream& header, nlohmann::json& j, std::ostream& out) {
  const Precision policy = o.precision;
  SessionSpec spec;
  spec.graph = model_run_spec(o.run, policy);
  spec.models = one_model(spec.graph.optimizer, o.run.seed);
  spec.gan_samples = 1;
  std::unique_ptr<Session> session = make_session(spec, backend);
  const PrecisionConfig& precision = spec.graph.precision;
  const Shape& input = spec.graph.image_shape;
  header << ", batch " << o.run.batch << ", " << input[1] << "x" << input[2] << "x" << input[0];
  out << header.str() << "\n";
  const std::vector<std::string> dots = plan_dot_files(o);
  j["graphs"] = nlohmann::json::array();
  const std::vector<StepGraph> graphs = session->step_graphs();
  for (size_t i = 0; i < graphs.size(); ++i) {
    const StepGraph& step = graphs[i];
    TrainingGraphInfo info;  // cost-aware: the costs and decisions to show
    info.costs = step.costs;
    info.cost_plan = step.plan;
    j["graphs"].push_back(print_graph_plan(*step.graph, step.name, precision, o,
                                           dots.empty() ? "" : dots[i], out, step.fetches,
                                           &info));
  }
  // The session is compiled (not run): its own report, kernel workspace included.
  const MemoryReport memory = session->memory();
  out << "memory: " << memory_line(memory) << "\n";
  j["memory"] = memory_json(memory);
  PrecisionSummary s = session->precision_summary();
  j["low_nodes"] = s.low_nodes;
  j["f32_nodes"] = s.f32_nodes;
  j["casts"] = s.casts.casts;
  j["cast_elements"] = s.casts.cast_elements;
}

// Why no GEMM of this plan can run on FP8 operands (--allow-fp8 where no node has an FP8 time).
std::string no_fp8_reason(const PlanOptions& o) {
  if (o.run.plan_for.active())
    return o.run.plan_for.device + " has no FP8 GEMM in the device table (no \"fp8\" peak)";
  if (o.run.device.type == Device::cpu)
    return "this CPU has no FP8 GEMM: campo runs FP8 here only emulated (f32 kernels on the "
           "decoded codes, slower than f32 by construction), so cost-aware never chooses it; a "
           "--precision-policy rule with format fp8 still runs it, for its numerics";
  return "the profiling step on " + o.run.device.str() +
         " does not time FP8 GEMMs yet, so cost-aware has no FP8 time to weigh (a "
         "--precision-policy rule with format fp8 runs them, through cuBLASLt where it can; "
         "plan for a GPU of the device table with --for)";
}

// --allow-fp8: the GEMMs that could run on FP8 operands, with their predicted times in each
// form, whether the plan put them in FP8, and the gain; or the one line that says why none can.
nlohmann::json print_fp8_choice(const PlanOptions& o, const Graph& g, const TrainingGraphInfo& info,
                                DType low_type, std::ostream& out) {
  const CostTable& costs = *info.costs;
  const CostAwarePlan& plan = *info.cost_plan;
  struct Row {
    NodeId id;
    double f32, low, fp8, quantize;
    bool chosen;
  };
  std::vector<Row> rows;
  for (NodeId id = 0; id < g.num_nodes() && size_t(id) < costs.nodes.size(); ++id) {
    const NodeCost& c = costs.nodes[size_t(id)];
    if (!std::isfinite(c.fp8_ms)) continue;
    rows.push_back({id, c.fp32_ms, c.low_ms, c.fp8_ms, c.fp8_quantize_ms,
                    !plan.fp8.empty() && plan.fp8[size_t(id)] != 0});
  }
  if (rows.empty()) {
    const std::string why = no_fp8_reason(o);
    out << "fp8: no GEMM can run in FP8: " << why << "\n";
    return {{"candidates", 0}, {"chosen", 0}, {"reason", why}};
  }
  // The largest predicted gains first: each against the node's best form without FP8.
  auto gain = [](const Row& r) { return std::min(r.f32, r.low) - r.fp8; };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const Row& a, const Row& b) { return gain(a) > gain(b); });
  const char* low = dtype_name(low_type);
  int chosen = 0;
  double saved = 0;
  nlohmann::json nodes = nlohmann::json::array();
  std::ostringstream table;
  char line[320];
  std::snprintf(line, sizeof line, "  %-40s %-26s %10s %10s %10s %9s %7s  %s\n", "GEMM", "operands",
                "f32 ms", (std::string(low) + " ms").c_str(), "fp8 ms", "of which q", "speedup",
                "plan");
  table << line;
  for (const Row& r : rows) {
    const Node& n = g.node(r.id);
    std::string operands = compact_shape(g.value(n.inputs[0]).shape) + " x " +
                           compact_shape(g.value(n.inputs[1]).shape);
    const double best = std::min(r.f32, r.low);
    chosen += r.chosen;
    if (r.chosen) saved += r.f32 - r.fp8;  // a chosen node is in the f32 label otherwise
    std::snprintf(line, sizeof line, "  %-40s %-26s %10.4g %10.4g %10.4g %9.4g %6.2fx  %s\n",
                  n.name.c_str(), operands.c_str(), r.f32, r.low, r.fp8, r.quantize, best / r.fp8,
                  r.chosen                 ? "fp8"
                  : plan.low[size_t(r.id)] ? low
                                           : "f32");
    table << line;
    nodes.push_back({{"name", n.name},
                     {"op", op_name(n.kind)},
                     {"operands", operands},
                     {"fp32_ms", r.f32},
                     {"low_ms", r.low},
                     {"fp8_ms", r.fp8},
                     {"fp8_quantize_ms", r.quantize},
                     {"speedup", best / r.fp8},
                     {"chosen", r.chosen}});
  }
  std::snprintf(line, sizeof line,
                "fp8: %d of %zu GEMMs on FP8 operands (E4M3 forward, E5M2 gradients, delayed "
                "scaling), predicted %.4g ms a step faster than running them in f32 (the plan's "
                "label for them); speedup = a GEMM's best of f32 and %s / its FP8 time, its "
                "operands' quantization included:\n",
                chosen, rows.size(), saved, low);
  out << line << table.str();
  return {
      {"candidates", int(rows.size())}, {"chosen", chosen}, {"saved_ms", saved}, {"nodes", nodes}};
}

// A model of one training graph: its plan (built, not compiled), beside amp's under the same
// costs (cost-aware), and the executor's predicted memory.
void plan_training_graph(const PlanOptions& o, const std::shared_ptr<Backend>& backend,
                         std::ostringstream& header, nlohmann::json& j, std::ostream& out) {
  const Precision policy = o.precision;
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
    // With --precision-policy both keep the rules' nodes, as the guard's plans do.
    TrainingGraphSpec fp32 = spec;
    fp32.precision.policy = Precision::fp32;
    fp32.precision.rules = nullptr;
    Graph ga;
    VariableStore va(o.run.seed, backend);
    const TrainingGraphInfo ia = build_training_graph(ga, va, fp32);
    const PolicyAssignment* rules = info.rules.get();
    const std::vector<DType> amp_dtype = amp_dtypes(ga, spec.precision, rules);
    const std::vector<DType> fp32_dtype =
        rules ? rules->dtype : std::vector<DType>(size_t(ga.num_nodes()), DType::f32);
    // Each plan priced by one low type's model, or by auto's three-way one where a rule puts
    // nodes in f16 beside amp's bf16.
    auto predict = [&](const std::vector<DType>& dtype) {
      if (spec.precision.automatic() &&
          std::find(dtype.begin(), dtype.end(), DType::f16) != dtype.end())
        return predict_step_ms(ga, three_way_costs(*info.costs, *info.f16_costs), dtype);
      std::vector<char> low(dtype.size(), 0);
      for (size_t i = 0; i < dtype.size(); ++i) low[i] = dtype[i] != DType::f32;
      return predict_step_ms(ga, *info.costs, low);
    };
    const double amp_ms = predict(amp_dtype);
    const double fp32_ms = predict(fp32_dtype);
    apply_precision(ga, amp_dtype);
    const CastStats amp_casts = summarize_precision(ga, ia.fetches()).casts;
    char line[320];
    std::snprintf(line, sizeof line,
                  "predicted step: cost-aware %.2f ms, amp %.2f ms, fp32 %.2f ms; casts: "
                  "cost-aware %d, amp %d (cast model %.4f ms + %.3g ms/element)%s\n",
                  info.cost_plan->predicted_ms, amp_ms, fp32_ms, info.summary.casts.casts,
                  amp_casts.casts, info.costs->cast.fixed_ms, info.costs->cast.per_element_ms,
                  rules ? "; amp and fp32 with the policy's rules" : "");
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
    if (spec.precision.calibration)  // how it was made, and whether this graph fits it
      out << "calibration noise: " << describe_record(spec.precision.calibration->record) << "\n";
    if (const CalibrationFit& fit = info.costs->calibration;
        fit.verdict != CalibrationFit::Verdict::none) {
      out << fit.line << "\n";
      j["calibration_check"] = {{"verdict", verdict_name(fit.verdict)},
                                {"nodes", fit.nodes},
                                {"median_ratio", fit.median_ratio},
                                {"total_ratio", fit.total_ratio}};
    }
    if (o.run.plan_for.active())
      out << "padding: not decided for " << o.run.plan_for.device << " ("
          << info.padding_candidates << " candidates): it is timed on the device itself\n";
    else
      out << "padding: " << info.padded << " of " << info.padding_candidates
          << " low-precision GEMMs (unaligned K/N) and convolutions (unaligned channels) "
          << "padded to multiples of " << info.pad_to
          << " (where timing the node both ways showed a gain)\n";
    if (spec.precision.allow_fp8) j["fp8"] = print_fp8_choice(o, g, info, spec.precision.low, out);
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
      profiles ? backend_for(o.run.device, o.run.cuda_graph, o.run.deterministic)
               : default_cpu_backend();
  const DeviceReport device_report(backend);
  if (step_graph_count(o.run.model) > 1)
    plan_step_graphs(o, backend, header, j, out);
  else
    plan_training_graph(o, backend, header, j, out);
  if (profiles) device_report.add_to(j);  // where the profiling step ran
  if (!o.json_path.empty()) {
    write_file_atomically(o.json_path, j.dump(1) + "\n");
    out << "wrote " << o.json_path << "\n";
  }
}

}  // namespace campo
