#include "train/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "amp/calibration.h"
#include "amp/padding.h"
#include "models/dcgan.h"
#include "runtime/atomic_file.h"
#include "runtime/file_check.h"
#include "runtime/timer.h"
#include "train/gan_trainer.h"
#include "train/profiling.h"
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

std::string compact_shape(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
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
  TrainOptions t;
  t.precision = precision_name(policy);
  t.low_precision = o.low_precision;
  t.loss_scale = o.loss_scale;
  t.amp_lists_edit = o.amp_lists_edit;
  t.amp_lists_file = o.amp_lists_file;
  t.search = o.search;
  t.fold_casts = o.fold_casts;
  t.device = o.device;
  PrecisionConfig c = precision_config(t);
  c.costs = o.costs;
  if (policy == Precision::cost_aware && !o.costs && !o.calibration.empty())
    c.calibration = std::make_shared<const Calibration>(load_calibration(o.calibration));
  return c;
}

OptimizerConfig gan_optimizer(const ModelRunOptions& o) {
  CAMPO_CHECK(o.optimizer == "sgd" || o.optimizer == "adam", "unknown optimizer '", o.optimizer,
              "'");
  OptimizerConfig c;
  c.kind = o.optimizer == "adam" ? OptimizerConfig::Kind::adam : OptimizerConfig::Kind::sgd;
  c.beta1 = 0.5f;  // the DCGAN paper's (Adam only)
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
  CAMPO_CHECK(o.optimizer == "sgd" || o.optimizer == "adam", "unknown optimizer '", o.optimizer,
              "'");
  spec.optimizer.kind =
      o.optimizer == "adam" ? OptimizerConfig::Kind::adam : OptimizerConfig::Kind::sgd;
  spec.precision = model_run_precision(o, policy);
  return spec;
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
  out << title << "\n";
  out << std::left << std::setw(44) << "node" << std::setw(22) << "op" << std::setw(5) << "step"
      << std::setw(7) << "list" << std::setw(6) << "dtype";
  if (costed)
    out << std::right << std::setw(9) << "f32 ms" << std::setw(9) << "low ms"
        << "  " << std::left << std::setw(14) << "decided by";
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
    const double cast_ms = costed && n.kind == OpKind::Cast && !n.weight_copy
                               ? info->costs->cast_ms(is_low_precision(g.value(n.outputs[0]).dtype),
                                                      shape_numel(g.value(n.inputs[0]).shape))
                               : 0.0;
    const bool measured = costed && size_t(id) < info->costs->low_measured.size() &&
                          info->costs->low_measured[size_t(id)];
    if (has_cost) {
      node["fp32_ms"] = info->costs->nodes[size_t(id)].fp32_ms;
      node["low_ms"] = info->costs->nodes[size_t(id)].low_ms;
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
      if (has_cost)
        std::snprintf(buf, sizeof buf, "%9.3f%8.3f%c  %-14s",
                      info->costs->nodes[size_t(id)].fp32_ms, info->costs->nodes[size_t(id)].low_ms,
                      measured ? 'm' : ' ',
                      traversal_name(info->cost_plan->decided_by[size_t(id)]));
      else if (n.kind == OpKind::Cast)
        std::snprintf(buf, sizeof buf, "%9s%9.3f  %-14s", "", cast_ms,
                      n.weight_copy ? "(weight copy)" : "(cast)");
      else
        std::snprintf(buf, sizeof buf, "%9s%9s  %-14s", "", "", "");
      out << buf;
    }
    out << shapes << "\n";
  }
  const PrecisionSummary s = summarize_precision(g, fetches);
  out << "totals: " << s.low_nodes << " nodes in " << dtype_name(precision.low) << ", "
      << s.f32_nodes << " in f32; " << s.casts.casts << " casts, "
      << with_commas(s.casts.cast_elements) << " elements cast per step\n";
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

void check_model_run_numbers(const ModelRunOptions& o) {
  CAMPO_CHECK(o.model == "dcgan" || is_known_model(o.model), "unknown model '", o.model, "'");
  CAMPO_CHECK(o.batch > 0, "--batch must be a positive number of samples, got ", o.batch);
  CAMPO_CHECK(o.image_size > 0, "--image-size must be positive, got ", o.image_size);
  CAMPO_CHECK(o.channels > 0, "--channels must be positive, got ", o.channels);
  CAMPO_CHECK(o.classes > 1, "--classes must be at least 2, got ", o.classes);
}

}  // namespace

void check_plan_options(const PlanOptions& o) {
  const Precision policy = parse_precision(o.precision);
  check_model_run_numbers(o.run);
  // Costs of this machine's CPU say nothing about a GPU: cost-aware needs a calibration made
  // on a CUDA machine (and its profiling step runs there), which cannot be made before the
  // CUDA backend has kernels. fp32 and amp need no costs.
  const DeviceSpec& device = o.run.device;
  CAMPO_CHECK(policy != Precision::cost_aware || device.type == Device::cpu || o.run.costs,
              "--precision cost-aware --device ", device.str(), " needs the costs of a ",
              device_name(device.type),
              " machine, from a calibration made on one, and there is "
              "none (`campo calibrate --device ",
              device_name(device.type),
              "` needs the CUDA backend's kernels, issue 12; this CPU's calibrations do not "
              "apply); plan --precision amp or fp32 for it");
  if (o.run.model == "dcgan") {  // one file per step graph
    for (const char* suffix : {"_d", "_g"})
      if (!o.dot_path.empty()) require_output_file(with_suffix(o.dot_path, suffix), "--dot file");
  } else if (!o.dot_path.empty()) {
    require_output_file(o.dot_path, "--dot file");
  }
  if (!o.json_path.empty()) require_output_file(o.json_path, "--json file");
}

void check_bench_options(const BenchOptions& o) {
  // One error line, before anything is built, for a device this build or machine lacks.
  (void)make_backend(o.run.device);
  CAMPO_CHECK(!o.precisions.empty(), "--precision needs at least one policy");
  for (const std::string& p : o.precisions) (void)parse_precision(p);
  check_model_run_numbers(o.run);
  CAMPO_CHECK(o.steps > 0, "--steps must be a positive number of timed steps, got ", o.steps);
  CAMPO_CHECK(o.repeats > 0, "--repeats must be positive, got ", o.repeats);
  CAMPO_CHECK(o.warmup >= 0, "--warmup must be zero or positive, got ", o.warmup);
  if (!o.json_path.empty()) require_output_file(o.json_path, "--json file");
}

void print_plan(const PlanOptions& o, std::ostream& out) {
  check_plan_options(o);
  const Precision policy = parse_precision(o.precision);
  std::ostringstream header;
  header << "plan: " << o.run.model << ", precision " << precision_name(policy) << ", device "
         << o.run.device.str();
  nlohmann::json j = {{"model", o.run.model},
                      {"precision", precision_name(policy)},
                      {"device", o.run.device.str()},
                      {"low_precision", o.run.low_precision},
                      {"batch", o.run.batch}};
  if (o.run.model == "dcgan") {
    // Two step graphs: the discriminator's and the generator's.
    const PrecisionConfig precision = model_run_precision(o.run, policy);
    DcganOptions m;
    m.image_size = o.run.image_size;
    m.channels = o.run.channels;
    GanSession session(m, o.run.batch, gan_optimizer(o.run), o.run.seed, 1, precision);
    header << ", batch " << o.run.batch << ", " << m.image_size << "x" << m.image_size << "x"
           << m.channels;
    out << header.str() << "\n";
    TrainingGraphInfo d_info, g_info;  // cost-aware: the costs and decisions to show
    d_info.costs = session.d_costs();
    d_info.cost_plan = session.d_plan();
    g_info.costs = session.g_costs();
    g_info.cost_plan = session.g_plan();
    j["graphs"] = {
        print_graph_plan(session.d_graph(), "discriminator step", precision, o,
                         with_suffix(o.dot_path, "_d"), out, session.d_fetches(), &d_info),
        print_graph_plan(session.g_graph(), "generator step", precision, o,
                         with_suffix(o.dot_path, "_g"), out, session.g_fetches(), &g_info)};
    PrecisionSummary s = session.precision_summary();
    j["low_nodes"] = s.low_nodes;
    j["f32_nodes"] = s.f32_nodes;
    j["casts"] = s.casts.casts;
    j["cast_elements"] = s.casts.cast_elements;
  } else {
    TrainingGraphSpec spec = model_run_spec(o.run, policy);
    Graph g;
    VariableStore vars(o.run.seed);
    TrainingGraphInfo info = build_training_graph(g, vars, with_profiled_costs(spec));
    header << ", batch " << o.run.batch << ", input " << compact_shape(spec.image_shape);
    j["graphs"] = {print_graph_plan(g, header.str(), spec.precision, o, o.dot_path, out,
                                    info.fetches(), &info)};
    if (info.cost_plan) {
      // Compare with amp under the same costs: same graph before casts, amp's painting.
      TrainingGraphSpec fp32 = spec;
      fp32.precision.policy = Precision::fp32;
      Graph ga;
      VariableStore va(o.run.seed);
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
      out << line;
      if (info.costs->cast_to_f32)
        out << "cast model low -> f32: " << info.costs->cast_to_f32->fixed_ms << " ms + "
            << info.costs->cast_to_f32->per_element_ms
            << " ms/element (the line above: f32 -> low)\n";
      if (spec.precision.search == CostAwareSearch::exact) {
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
      out << "padding: " << info.padded << " of " << info.padding_candidates
          << " low-precision GEMMs with unaligned K/N padded to multiples of " << kPadTo
          << " (where timing the node both ways showed a gain)\n";
      j["padding_candidates"] = info.padding_candidates;
      j["padded"] = info.padded;
      j["predicted_ms"] = info.cost_plan->predicted_ms;
      j["amp_predicted_ms"] = amp_ms;
      j["fp32_predicted_ms"] = fp32_ms;
      j["amp_casts"] = amp_casts.casts;
      j["search"] = search_name(spec.precision.search);
      j["traversals_predicted_ms"] = info.cost_plan->traversals_ms;
      j["exact_changes"] = info.cost_plan->exact_changes;
    }
    j["low_nodes"] = info.summary.low_nodes;
    j["f32_nodes"] = info.summary.f32_nodes;
    j["casts"] = info.summary.casts.casts;
    j["cast_elements"] = info.summary.casts.cast_elements;
  }
  if (!o.json_path.empty()) {
    write_file_atomically(o.json_path, j.dump(1) + "\n");
    out << "wrote " << o.json_path << "\n";
  }
}

namespace {

struct BenchSession {
  std::string precision;
  Graph graph;
  VariableStore vars;
  TrainingGraphInfo info;
  std::unique_ptr<Executable> exe;
  LossScaler scaler;
  explicit BenchSession(uint64_t seed, const LossScalerOptions& so) : vars(seed), scaler(so) {}

  void step() {
    if (info.all_finite == kNoValue) {
      exe->run();
      return;
    }
    exe->feed_scalar("loss_scale", scaler.scale());
    exe->feed_scalar("inv_loss_scale", 1.0f / scaler.scale());
    exe->run();
    scaler.update(exe->fetch_scalar(info.all_finite) != 0.0f);
  }
};

// DCGAN: one iteration = the discriminator step and the generator step (GanSession).
std::vector<BenchResult> run_gan_bench(const BenchOptions& o) {
  DcganOptions m;
  m.image_size = o.run.image_size;
  m.channels = o.run.channels;
  const OptimizerConfig optimizer = gan_optimizer(o.run);
  std::vector<std::unique_ptr<GanSession>> sessions;
  Rng rng(o.run.seed);
  Tensor real = Tensor::empty({o.run.batch, m.channels, m.image_size, m.image_size}, DType::f32);
  for (int64_t i = 0; i < real.numel(); ++i) real.data_as<float>()[i] = rng.uniform(-1, 1);
  for (const std::string& p : o.precisions) {
    const PrecisionConfig precision = model_run_precision(o.run, parse_precision(p));
    sessions.push_back(std::make_unique<GanSession>(m, o.run.batch, optimizer, o.run.seed, 1,
                                                    precision, o.run.conv_layout));
    for (int i = 0; i < o.warmup; ++i) sessions.back()->step(real, 2e-4f);
  }
  std::vector<BenchResult> results(sessions.size());
  for (int r = 0; r < o.repeats; ++r)
    for (size_t k = 0; k < sessions.size(); ++k) {
      Timer t;
      for (int i = 0; i < o.steps; ++i) sessions[k]->step(real, 2e-4f);
      results[k].samples_per_sec.push_back(double(o.steps) * double(o.run.batch) / t.seconds());
    }
  for (size_t k = 0; k < sessions.size(); ++k) {
    results[k].precision = o.precisions[k];
    PrecisionSummary s = sessions[k]->precision_summary();
    results[k].casts = s.casts.casts;
    results[k].folded = s.casts.folded;
    results[k].weight_copies = s.casts.weight_copies;
    results[k].cast_elements = s.casts.cast_elements;
    results[k].low_nodes = s.low_nodes;
    results[k].cast_ms_per_step = -1;  // not profiled for GAN steps
    if (sessions[k]->d_plan())
      results[k].predicted_ms =
          sessions[k]->d_plan()->predicted_ms + sessions[k]->g_plan()->predicted_ms;
  }
  return results;
}

}  // namespace

std::vector<BenchResult> run_bench(const BenchOptions& o, std::ostream& out) {
  check_bench_options(o);
  if (o.run.model == "dcgan") {
    std::vector<BenchResult> results = run_gan_bench(o);
    return finish_bench(o, results, out);
  }
  std::vector<std::unique_ptr<BenchSession>> sessions;
  Rng rng(o.run.seed);
  Tensor images, labels;
  for (const std::string& p : o.precisions) {
    TrainingGraphSpec spec = model_run_spec(o.run, parse_precision(p));
    auto s = std::make_unique<BenchSession>(o.run.seed, spec.precision.scaler);
    s->precision = p;
    s->info = build_training_graph(s->graph, s->vars, with_profiled_costs(spec));
    CompileOptions co;
    co.fetches = s->info.fetches();
    co.seed = o.run.seed;
    co.conv_layout = o.run.conv_layout;
    s->exe = std::make_unique<Executable>(s->graph, s->vars, co);
    const char* input = input_placeholder(o.run.model);
    if (!images.defined()) {
      // One fixed batch of synthetic data for every policy: data loading is not measured.
      // Token models: random ids and every position a target.
      images = Tensor::empty(s->exe->input(input).shape(), s->exe->input(input).dtype());
      labels = Tensor::empty(s->exe->input("labels").shape(), DType::i32);
      for (int64_t i = 0; i < images.numel(); ++i) {
        if (images.dtype() == DType::i32)
          images.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(o.run.classes)));
        else
          images.data_as<float>()[i] = rng.normal();
      }
      for (int64_t i = 0; i < labels.numel(); ++i)
        labels.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(o.run.classes)));
    }
    s->exe->feed(input, images);
    s->exe->feed("labels", labels);
    if (s->exe->has_input("inv_num_targets"))
      s->exe->feed_scalar("inv_num_targets", 1.0f / float(labels.numel()));
    s->exe->feed_scalar("lr", o.lr);
    s->exe->feed_scalar("loss_scale", 1.0f);
    if (s->exe->has_input("step")) s->exe->feed_scalar("step", 1.0f);
    for (int i = 0; i < o.warmup; ++i) s->step();
    sessions.push_back(std::move(s));
  }
  std::vector<BenchResult> results(sessions.size());
  for (int r = 0; r < o.repeats; ++r) {
    for (size_t k = 0; k < sessions.size(); ++k) {
      Timer t;
      for (int i = 0; i < o.steps; ++i) sessions[k]->step();
      results[k].samples_per_sec.push_back(double(o.steps) * double(o.run.batch) / t.seconds());
    }
  }
  for (size_t k = 0; k < sessions.size(); ++k) {
    BenchResult& res = results[k];
    BenchSession& s = *sessions[k];
    res.precision = s.precision;
    res.casts = s.info.summary.casts.casts;
    res.folded = s.info.summary.casts.folded;
    res.weight_copies = s.info.summary.casts.weight_copies;
    res.cast_elements = s.info.summary.casts.cast_elements;
    res.low_nodes = s.info.summary.low_nodes;
    if (s.info.cost_plan) res.predicted_ms = s.info.cost_plan->predicted_ms;
    // Time spent in casts: a few timed steps after the measurement.
    double cast_ms = 0, total_ms = 0;
    s.exe->set_timing(true);
    s.exe->set_node_hook([&](NodeId id, double ms) {
      total_ms += ms;
      if (s.graph.node(id).kind == OpKind::Cast) cast_ms += ms;
    });
    const int profiled = 3;
    for (int i = 0; i < profiled; ++i) s.step();
    s.exe->set_timing(false);
    res.cast_ms_per_step = cast_ms / profiled;
    res.step_ms = total_ms / profiled;
  }
  return finish_bench(o, results, out);
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
                                      std::ostream& out) {
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
  const bool tokens = is_known_model(o.run.model) && model_input(o.run.model) == ModelInput::tokens;
  out << "bench: " << o.run.model << ", batch " << o.run.batch << ", input "
      << (tokens ? "[" + std::to_string(o.run.seq_len) + "] tokens"
                 : "[" + std::to_string(o.run.channels) + "," + std::to_string(o.run.image_size) +
                       "," + std::to_string(o.run.image_size) + "]")
      << ", " << o.steps << " steps x " << o.repeats << " interleaved repetitions, low precision "
      << o.run.low_precision << "\n";
  nlohmann::json j = nlohmann::json::array();
  // What the figures were measured on (Backend::describe of the benchmarked device).
  const std::string machine = make_backend(o.run.device)->describe();
  for (BenchResult& res : results) {
    res.ratio_to_fp32 = fp32_median > 0 ? res.median / fp32_median : 0;
    const double measured_ms = res.median > 0 ? 1000.0 * double(o.run.batch) / res.median : 0;
    if (res.predicted_ms > 0 && measured_ms > 0)
      res.prediction_error_pct = 100.0 * (res.predicted_ms - measured_ms) / measured_ms;
    char line[512];
    char cast_time[64] = "cast time n/a";
    if (res.cast_ms_per_step >= 0)
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
    j.push_back({{"model", o.run.model},
                 {"machine", machine},
                 {"precision", res.precision},
                 {"low_precision", o.run.low_precision},
                 {"batch", o.run.batch},
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
                 {"prediction_error_pct", res.prediction_error_pct}});
    if (res.vs_amp)
      j.back()["vs_amp"] = {{"ratios", res.vs_amp->ratios},
                            {"median", res.vs_amp->median},
                            {"ci95", std::isnan(res.vs_amp->ci_low)
                                         ? nlohmann::json(nullptr)
                                         : nlohmann::json{res.vs_amp->ci_low, res.vs_amp->ci_high}},
                            {"faster", res.vs_amp->faster}};
  }
  if (!o.json_path.empty()) {
    write_file_atomically(o.json_path, j.dump(1) + "\n");
    out << "wrote " << o.json_path << "\n";
  }
  return results;
}

}  // namespace campo
