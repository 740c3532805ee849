#include "perf/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include "graph/builder.h"
#include "graph/flops.h"
#include "perf/calibration_noise.h"
#include "perf/model_run.h"
#include "runtime/atomic_file.h"
#include "runtime/device.h"
#include "runtime/file_check.h"
#include "runtime/hardware_counters.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/make_session.h"
#include "train/model_array.h"
#include "train/profiling.h"
#include "train/trainer.h"

namespace campo {

namespace {

// Nodes faster than this are timer noise: left out of fits and scores.
constexpr double kMinSampleMs = 1e-3;
// Both the aligned and the unaligned GEMM path need this many training samples for a
// model of their own.
constexpr int kMinSplitSamples = 16;

// One model at one input shape; each gets several batch sizes. The model "attention" is
// not a network but BERT's six batched products of one attention layer (attention_graph):
// for it image_size is the sequence length T and channels the number of heads.
struct ModelShape {
  std::string model;
  int image_size, channels;
};

// The head size of the "attention" shapes: BERT's (768 / 12 and 256 / 4 alike).
constexpr int64_t kAttentionHeadSize = 64;

struct Configuration {
  ModelShape shape;
  int64_t batch = 0;
  bool heldout = false;
  bool minimal = false;  // part of the minimal set: run whatever the budget
  std::string describe() const {
    if (shape.model == "attention")
      return "attention T=" + std::to_string(shape.image_size) +
             " heads=" + std::to_string(shape.channels) +
             " d=" + std::to_string(kAttentionHeadSize) + " batch " + std::to_string(batch);
    return shape.model + " " + std::to_string(shape.image_size) + "x" +
           std::to_string(shape.image_size) + "x" + std::to_string(shape.channels) + " batch " +
           std::to_string(batch);
  }
};

struct Sample {
  std::string node;  // "<configuration> <graph> <node id> <node name>": unique in a calibration
  std::string op;    // OpKind name
  OpSample s;
  bool heldout = false;
};

struct Measurements {
  std::vector<Sample> ops;
  std::vector<CastTiming> casts;
  int dropped_fast = 0;  // nodes under kMinSampleMs
  // Hardware counters (runtime/hardware_counters.h): the graphs whose counters were read, of
  // all measured; what read them, or why they were not.
  int graphs = 0, counter_graphs = 0, counter_passes = 0;
  std::string counter_source, counters_unavailable;
  // Each timed graph's repeat spread (the larger of its two precisions'), in order.
  std::vector<double> spreads;

  // Adds `other`'s measurements (one accepted measurement's) to these.
  void add(Measurements&& other) {
    ops.insert(ops.end(), other.ops.begin(), other.ops.end());
    casts.insert(casts.end(), other.casts.begin(), other.casts.end());
    dropped_fast += other.dropped_fast;
    graphs += other.graphs;
    counter_graphs += other.counter_graphs;
    if (other.counter_graphs > 0) {
      counter_source = other.counter_source;
      counter_passes = other.counter_passes;
    }
    if (!other.counters_unavailable.empty()) counters_unavailable = other.counters_unavailable;
    spreads.insert(spreads.end(), other.spreads.begin(), other.spreads.end());
  }
};

DType parse_low(const std::string& s) {
  CAMPO_CHECK(s == "bf16" || s == "fp16" || s == "f16",
              "--low-precision must be bf16 or fp16, got '", s, "'");
  return s == "bf16" ? DType::bf16 : DType::f16;
}

// The calibration set: each model shape at batch sizes 4..64 and seeded random ones around
// them, ordered so that every shape's smallest batches come first (round robin over the
// shapes by batch rank); within a shape every fourth batch (ranks 1, 5, ...) is held out.
// The minimal set: every shape's smallest batch, and the second smallest (held out) of the
// first three shapes.
std::vector<Configuration> calibration_set(const CalibrateOptions& o) {
  std::vector<ModelShape> shapes;
  if (o.quick)
    shapes = {{"lenet", 28, 1}, {"resnet18", 32, 3}, {"dcgan", 32, 1}, {"attention", 64, 4}};
  else
    shapes = {{"lenet", 28, 1},    {"resnet18", 32, 3},  {"vgg16", 32, 3},      {"dcgan", 32, 1},
              {"resnet50", 32, 3}, {"lenet", 32, 3},     {"resnet18", 28, 1},   {"vgg16", 28, 1},
              {"dcgan", 32, 3},    {"attention", 64, 4}, {"attention", 128, 12}};
  if (!o.models.empty()) {
    for (const std::string& m : o.models)
      CAMPO_CHECK(m == "attention" || is_known_model(m), "unknown model '", m, "' for calibration");
    std::vector<ModelShape> kept;
    for (const ModelShape& s : shapes)
      if (std::find(o.models.begin(), o.models.end(), s.model) != o.models.end()) kept.push_back(s);
    shapes = kept;
    CAMPO_CHECK(!shapes.empty(), "no calibration shapes for the models given");
  }
  Rng rng(o.seed);
  std::vector<std::vector<int64_t>> batches;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::set<int64_t> b;
    if (!o.batches.empty()) {
      b.insert(o.batches.begin(), o.batches.end());
    } else if (o.quick) {
      b = {4, 8, 16};
      b.insert(int64_t(std::lround(6 * rng.uniform(0.8f, 1.3f))));
    } else {
      b = {4, 8, 16, 32, 64};
      for (int64_t around : {6, 12, 24, 48})
        b.insert(int64_t(std::lround(double(around) * rng.uniform(0.75f, 1.35f))));
    }
    for (int64_t v : b) CAMPO_CHECK(v > 0, "calibration batch sizes must be positive, got ", v);
    batches.emplace_back(b.begin(), b.end());
  }
  std::vector<Configuration> set;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (round >= batches[i].size()) continue;
      any = true;
      const bool minimal = round == 0 || (round == 1 && i < 3);
      set.push_back({shapes[i], batches[i][round], round % 4 == 1, minimal});
    }
    if (!any) break;
  }
  return set;
}

struct Timing {
  int warmup, steps;
};

// Times g in both precisions, reads its nodes' hardware counters in an f32 step where the
// device can, and adds its samples (with their counters) and casts to `m`.
void measure_graph(const std::string& label, const Graph& g, VariableStore& vars,
                   const std::vector<ValueId>& fetches, const TimingInputs& inputs,
                   const AmpLists& lists, DType low, const Timing& timing, uint64_t seed,
                   bool heldout, int64_t batch, Measurements& m) {
  const BothPrecisionTimes t = measure_both_precisions(g, vars, fetches, inputs, lists, low,
                                                       timing.warmup, timing.steps, seed);
  const NodeCounterRead counters = read_node_counters(g, vars, fetches, inputs, seed);
  m.spreads.push_back(std::max(repeat_spread(t.fp32_steps_ms), repeat_spread(t.low_steps_ms)));
  ++m.graphs;
  if (counters.by_node.empty()) {
    m.counters_unavailable = counters.unavailable;
  } else {
    ++m.counter_graphs;
    m.counter_source = counters.source;
    m.counter_passes = counters.passes;
  }
  const int alignment = vars.backend().padding_alignment();
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (!t.low[size_t(id)]) continue;
    const double t32 = t.fp32_ms[size_t(id)], tlow = t.low_ms[size_t(id)];
    if (t32 <= 0 && tlow <= 0) continue;  // not run (dead code)
    if (t32 < kMinSampleMs || tlow < kMinSampleMs) {
      ++m.dropped_fast;
      continue;
    }
    Sample s;
    s.node = label + " " + std::to_string(id) + " " + g.node(id).name;
    s.op = op_name(g.node(id).kind);
    s.s.features =
        node_features(g, id, alignment,
                      counters.by_node.empty() ? unread_counters() : counters.by_node[size_t(id)]);
    s.s.fp32_ms = t32;
    s.s.low_ms = tlow;
    s.s.shape = node_shape(g, id);
    s.s.group = batch;
    s.heldout = heldout;
    m.ops.push_back(s);
  }
  m.casts.insert(m.casts.end(), t.casts.begin(), t.casts.end());
}

// BERT's attention products at batch B, H heads, sequence length T (head size d =
// kAttentionHeadSize), as a training step has them (ops/batch_matmul.cc's gradients):
//   forward   scores = q k^T [B, H, T, T],         context = p v [B, H, T, d];
//   backward  dp = dcontext v^T, dv = p^T dcontext, dq = dscores k, dk = dscores^T q.
// Inputs are placeholders, every product is fetched: nothing else is timed.
std::vector<ValueId> attention_graph(Builder& b, int64_t batch, int64_t heads, int64_t T) {
  const Shape per_head = {batch, heads, T, kAttentionHeadSize}, square = {batch, heads, T, T};
  const ValueId q = b.placeholder("q", per_head), k = b.placeholder("k", per_head),
                v = b.placeholder("v", per_head), dcontext = b.placeholder("dcontext", per_head);
  const ValueId p = b.placeholder("p", square), dscores = b.placeholder("dscores", square);
  return {b.batch_matmul(q, k, false, true),
          b.batch_matmul(p, v),
          b.batch_matmul(dcontext, v, false, true),
          b.batch_matmul(p, dcontext, true, false),
          b.batch_matmul(dscores, k),
          b.batch_matmul(dscores, q, true, false)};
}

// Times one configuration: its nodes in both precisions, the casts of its low graphs.
void measure_configuration(const Configuration& c, DType low, const Timing& timing, uint64_t seed,
                           const std::shared_ptr<Backend>& backend, Measurements& m) {
  // The lists of the device it calibrates: its nodes are the ones a run there may lower.
  const AmpLists lists = AmpLists::defaults(backend->kernel_device(), low);
  if (c.shape.model == "attention") {
    Graph g;
    VariableStore vars(seed, backend);
    Builder b(g, vars);
    const std::vector<ValueId> fetches =
        attention_graph(b, c.batch, c.shape.channels, c.shape.image_size);
    measure_graph(c.describe(), g, vars, fetches, TimingInputs{}, lists, low, timing, seed,
                  c.heldout, c.batch, m);
    return;
  }
  ModelRunOptions r;
  r.model = c.shape.model;
  r.batch = c.batch;
  r.image_size = c.shape.image_size;
  r.channels = c.shape.channels;
  r.seed = seed;
  r.optimizer = training_defaults(r.model).optimizer.value_or(r.optimizer);  // dcgan: Adam
  if (step_graph_count(r.model) > 1) {
    // Several step graphs (DCGAN's): each timed alone, from the session that trains them.
    SessionSpec spec;
    spec.graph = model_run_spec(r, Precision::fp32);
    spec.models = one_model(spec.graph.optimizer, seed);
    spec.gan_samples = 1;
    std::unique_ptr<Session> session = make_session(spec, backend);
    for (const StepGraph& step : session->step_graphs()) {
      // No fetches: the optimizer updates (side effects) keep the whole step alive.
      measure_graph(c.describe() + " " + step.tag, *step.graph, session->variables(), {},
                    step.timing_inputs, lists, low, timing, seed, c.heldout, c.batch, m);
    }
    return;
  }
  const TrainingGraphSpec spec = model_run_spec(r, Precision::fp32);
  Graph g;
  VariableStore vars(seed, backend);
  const TrainingGraphInfo info = build_training_graph(g, vars, spec);
  measure_graph(c.describe(), g, vars, info.fetches(), training_timing_inputs(r.classes), lists,
                low, timing, seed, c.heldout, c.batch, m);
}

// Standalone casts x (f32) -> low -> f32 of 2^10 .. 2^max_log2 elements.
void measure_standalone_casts(DType low, int max_log2, int log2_step, const Timing& timing,
                              const std::shared_ptr<Backend>& backend, Measurements& m) {
  for (int p = 10; p <= max_log2; p += log2_step) {
    const int64_t n = int64_t(1) << p;
    Graph g;
    VariableStore vars(0, backend);
    Builder b(g, vars);
    ValueId x = b.placeholder("x", {n});
    NodeId to_low = g.add_node(OpKind::Cast, {x}, CastAttrs{low}, "to_low", DType::f32);
    ValueId y = g.node(to_low).outputs[0];
    NodeId to_f32 = g.add_node(OpKind::Cast, {y}, CastAttrs{DType::f32}, "to_f32", low);
    ValueId z = g.node(to_f32).outputs[0];
    std::vector<double> steps_ms;
    const std::vector<double> t =
        measure_node_times(g, vars, {z}, TimingInputs{}, timing.warmup, timing.steps, 7, &steps_ms);
    // Below 0.1 ms a step is a few microseconds of two casts: its spread is the timer's. The
    // fastest step is kept, so the fastest quarter's spread is what decides (calibration_noise.h).
    if (!steps_ms.empty() && *std::min_element(steps_ms.begin(), steps_ms.end()) >= 0.1)
      m.spreads.push_back(fastest_quarter_spread(steps_ms));
    m.casts.push_back({n, DType::f32, low, t[size_t(to_low)]});
    m.casts.push_back({n, low, DType::f32, t[size_t(to_f32)]});
  }
}

CastFit fit_casts(const std::vector<CastTiming>& casts,
                  const std::function<bool(const CastTiming&)>& keep) {
  std::vector<std::pair<int64_t, double>> samples;
  for (const CastTiming& c : casts)
    if (keep(c)) samples.push_back({c.elements, c.ms});
  return fit_cast_relative(samples);
}

std::string utc_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What the measurements kept so far said of the machine's noise (CalibrationRecord).
struct NoiseTally {
  std::vector<double> loads;    // known loads of the measurements kept
  std::vector<double> spreads;  // their repeat spreads
  int measurements = 0, redone = 0;
};

// One measurement judged for noise: `measure` runs into a fresh Measurements with the load of
// other processes read around it; while its load or repeat spread passes `limits` it is
// redone after a pause, at most limits.retries times; the kept one is added to `m`. Throws
// CalibrationRefused, naming `what` and why, when every attempt was too noisy. Returns the
// seconds the kept attempt took.
double measure_quietly(const std::string& what, const NoiseLimits& limits,
                       const std::function<void(Measurements&)>& measure, Measurements& m,
                       NoiseTally& tally, std::ostream& log) {
  for (int attempt = 1;; ++attempt) {
    Measurements one;
    const CpuSnapshot before = cpu_snapshot();
    const Timer t;
    measure(one);
    const double seconds = t.seconds();
    const CpuSnapshot after = cpu_snapshot();
    const double load = foreign_load(before, after);
    const double spread =
        one.spreads.empty() ? 0.0 : *std::max_element(one.spreads.begin(), one.spreads.end());
    const int cores = after.known ? after.cores : int(std::thread::hardware_concurrency());
    const std::string problem = noise_problem(load, cores, spread, limits);
    if (problem.empty()) {
      m.add(std::move(one));
      if (load >= 0) tally.loads.push_back(load);
      tally.spreads.push_back(spread);
      ++tally.measurements;
      return seconds;
    }
    const int attempts = 1 + limits.retries;
    if (attempt >= attempts)
      throw CalibrationRefused(
          "calibration refused, nothing written: " + what + " stayed too noisy in " +
          std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts") + " (" + problem +
          "); calibrate when the machine is quiet, or allow more noise with --max-load / "
          "--max-spread");
    log << "  " << what << ": too noisy (" << problem << "), redoing it (attempt " << attempt + 1
        << " of " << attempts << ")\n"
        << std::flush;
    ++tally.redone;
    // A burst of other work (a compile, a test) often passes within a second or two.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000 * attempt));
  }
}

// Identical shapes: the mean |t - median| / median of the low-precision times of GEMM-like
// samples (graph/flops.h's is_gemm_op: convolutions, matmuls) of one op with identical
// features, over the groups of 3 or more; -1 without such a group. Only the GEMMs: they run
// long enough that what the cache holds when they start matters little, so on a quiet machine
// identical ones agree within ~10% (docs/mixed-precision.md), where memory-bound ops at
// different places of a step differ by 20-55% for that reason alone, noise or not.
double shape_spread(const Measurements& m) {
  std::map<std::pair<std::string, NodeFeatures>, std::vector<double>> groups;
  for (const Sample& s : m.ops)
    if (is_gemm_op(*parse_op_kind(s.op))) groups[{s.op, s.s.features}].push_back(s.s.low_ms);
  double sum = 0;
  int count = 0;
  for (auto& [key, times] : groups) {
    if (times.size() < 3) continue;
    const double median = median_of(times);
    for (double t : times) sum += std::fabs(t - median) / median;
    count += int(times.size());
  }
  return count > 0 ? sum / count : -1.0;
}

// Every op model, each in the form its cross-validation chooses (fit_op_model_by_shape), and
// how the forms compared.
struct FittedModels {
  std::map<std::string, OpModel> models;
  std::vector<FitComparison> comparisons;
};

// Fits every op model; GEMM ops get an unaligned model of their own when both paths have
// enough training samples.
FittedModels fit_models(const std::vector<Sample>& ops, std::ostream& log) {
  std::map<std::string, std::vector<const Sample*>> by_op;
  for (const Sample& s : ops) by_op[s.op].push_back(&s);
  FittedModels fitted;
  std::map<std::string, OpModel>& models = fitted.models;
  auto fit = [&](const std::string& key, const std::vector<const Sample*>& samples) {
    std::vector<OpSample> train, heldout;
    for (const Sample* s : samples) (s->heldout ? heldout : train).push_back(s->s);
    if (train.empty()) {
      log << "  " << key << ": only held-out samples (" << heldout.size()
          << "), no model: its nodes keep their f32 time as low-precision estimate\n";
      return;
    }
    FitComparison comparison;
    models[key] = fit_op_model_by_shape(key, train, heldout, &comparison);
    fitted.comparisons.push_back(comparison);
  };
  for (const auto& [op, samples] : by_op) {
    const bool gemm = op == "Conv2D" || op == "Conv2DBackpropInput" ||
                      op == "Conv2DBackpropFilter" || op == "MatMul" || op == "BatchMatMulV2";
    std::vector<const Sample*> aligned, unaligned;
    int aligned_train = 0, unaligned_train = 0;
    for (const Sample* s : samples) {
      const bool a = s->s.features[size_t(Feature::aligned)] != 0;
      (a ? aligned : unaligned).push_back(s);
      if (!s->heldout) ++(a ? aligned_train : unaligned_train);
    }
    if (gemm && aligned_train >= kMinSplitSamples && unaligned_train >= kMinSplitSamples) {
      fit(op, aligned);
      fit(op + ":unaligned", unaligned);
    } else {
      fit(op, samples);
    }
  }
  return fitted;
}

// Every op's f32 model (amp/calibration.h's F32Model), both GEMM paths together.
std::map<std::string, F32Model> fit_f32_models(const Measurements& m) {
  std::map<std::string, std::pair<std::vector<OpSample>, std::vector<OpSample>>> by_op;
  for (const Sample& s : m.ops) (s.heldout ? by_op[s.op].second : by_op[s.op].first).push_back(s.s);
  std::map<std::string, F32Model> models;
  for (const auto& [op, sets] : by_op)
    if (!sets.first.empty()) models[op] = fit_f32_model(op, sets.first, sets.second);
  return models;
}

// Held-out scores for the report: the model's median absolute percentage error (MAPE is a
// mean, and a few timings hit by a scheduling hiccup can dominate it), and the MAPE of
// simpler predictors, T_lp = T_fp32 (no change) and the ratio model alone.
struct Baselines {
  double median = -1, same = -1, ratio = -1;
  // The noise floor: samples of one op with identical features (the same layer shape at
  // the same batch, at several places of a graph), each against their group's median low
  // time, mean absolute percentage; -1 without a group of 3 or more.
  double spread = -1;
};
Baselines baselines(const Calibration& cal, const std::string& key, const Measurements& m) {
  std::vector<OpSample> train, heldout;
  for (const Sample& s : m.ops) {
    const OpModel* model = cal.model_for(*parse_op_kind(s.op), s.s.features);
    if (!model || model->key != key) continue;  // another op, or the other GEMM path
    (s.heldout ? heldout : train).push_back(s.s);
  }
  Baselines b;
  {
    std::map<NodeFeatures, std::vector<double>> groups;
    for (const auto* set : {&train, &heldout})
      for (const OpSample& s : *set) groups[s.features].push_back(s.low_ms);
    double sum = 0;
    int count = 0;
    for (auto& [features, times] : groups) {
      if (times.size() < 3) continue;
      const double median = median_of(times);
      for (double t : times) sum += 100 * std::fabs(t - median) / median;
      count += int(times.size());
    }
    if (count > 0) b.spread = sum / count;
  }
  if (heldout.empty() || train.empty()) return b;
  std::vector<double> same, truth, errors;
  const OpModel& model = cal.ops.at(key);
  for (const OpSample& s : heldout) {
    same.push_back(s.fp32_ms);
    truth.push_back(s.low_ms);
    errors.push_back(100 *
                     std::fabs(model.predict_low_ms(s.features, s.fp32_ms, &s.shape) - s.low_ms) /
                     s.low_ms);
  }
  b.median = median_of(errors);
  b.same = mape_percent(same, truth);
  // The ratio fit on the training samples (fit_op_model's last resort).
  double sxy = 0, sxx = 0;
  for (const OpSample& s : train) {
    const double r = s.fp32_ms / s.low_ms;
    sxy += r;
    sxx += r * r;
  }
  const double sigma = sxx > 0 ? sxy / sxx : 1.0;
  std::vector<double> p;
  for (const OpSample& s : heldout) p.push_back(sigma * s.fp32_ms);
  b.ratio = mape_percent(p, truth);
  return b;
}

void print_report(const Calibration& cal, const Measurements& m, std::ostream& log) {
  char line[512];
  log << "\nper-op models (T_lp = sum w_i PC_i + sigma T_fp32 + bias; features kept where "
         "Spearman |rho| > 0.75 on the training samples):\n";
  std::snprintf(line, sizeof line, "  %-30s %-10s %5s %5s %8s %9s %8s %8s %8s %8s %8s  %s\n",
                "op model", "fit", "train", "held", "sigma", "bias ms", "MAPE %", "median %",
                "=f32 %", "ratio %", "spread %", "features (rho)");
  log << line;
  // Held-out T_lp per op model, for the time-share weighting.
  std::map<std::string, double> heldout_ms;
  double heldout_total = 0;
  for (const Sample& s : m.ops) {
    if (!s.heldout) continue;
    const OpModel* model = cal.model_for(*parse_op_kind(s.op), s.s.features);
    if (!model) continue;
    heldout_ms[model->key] += s.s.low_ms;
    heldout_total += s.s.low_ms;
  }
  double mape_sum = 0, median_sum = 0, weighted = 0, weight = 0;
  int scored = 0;
  for (const auto& [key, model] : cal.ops) {
    std::string features;
    for (size_t i = 0; i < model.features.size(); ++i) {
      char f[64];
      std::snprintf(f, sizeof f, "%s%s (%.2f)", i ? ", " : "", feature_name(model.features[i]),
                    model.rho[i]);
      features += f;
    }
    if (features.empty()) features = "-";
    if (model.analytic)  // the model of nodes whose counters are not read
      features += "; analytic alone: held-out MAPE " +
                  (model.analytic->heldout_mape < 0
                       ? std::string("-")
                       : std::to_string(model.analytic->heldout_mape).substr(0, 6) + "%");
    const Baselines b = baselines(cal, key, m);
    auto pct = [](double v) { return v < 0 ? std::string("-") : std::to_string(v).substr(0, 6); };
    std::snprintf(line, sizeof line, "  %-30s %-10s %5d %5d %8.3f %9.4f %8s %8s %8s %8s %8s  %s\n",
                  key.c_str(), model.fit.c_str(), model.train_samples, model.heldout_samples,
                  model.sigma, model.bias, pct(model.heldout_mape).c_str(), pct(b.median).c_str(),
                  pct(b.same).c_str(), pct(b.ratio).c_str(), pct(b.spread).c_str(),
                  features.c_str());
    log << line;
    if (model.heldout_mape >= 0) {
      mape_sum += model.heldout_mape;
      median_sum += b.median;
      ++scored;
      weighted += model.heldout_mape * heldout_ms[key];
      weight += heldout_ms[key];
    }
  }
  log << "  (MAPE and median: the model's absolute percentage error on held-out "
         "configurations; =f32: MAPE of predicting T_lp = T_fp32; ratio: of T_lp = sigma T_fp32 "
         "alone; spread: how far the low-precision times of identical shapes in one graph lie "
         "from their median, the noise no model of these features can go below)\n";
  if (scored > 0) {
    std::snprintf(line, sizeof line,
                  "held-out MAPE over %d op models: mean %.1f%%, weighted by time share %.1f%% "
                  "(%.1f ms of held-out low-precision time); mean of the median errors %.1f%%\n",
                  scored, mape_sum / scored, weight > 0 ? weighted / weight : 0.0, heldout_total,
                  median_sum / scored);
    log << line;
  } else {
    log << "held-out MAPE: nothing was held out\n";
  }
  auto cast_line = [&](const char* name, const CastFit& f) {
    std::snprintf(line, sizeof line,
                  "  %-12s %4d samples  C_I %.5f ms  r %.4g ms/element  (%.3f ms at 2^20)  "
                  "fit MAPE %.1f%%\n",
                  name, f.samples, f.model.fixed_ms, f.model.per_element_ms,
                  f.model.cost_ms(int64_t(1) << 20), f.mape);
    log << line;
  };
  log << "cast model C_I + r n (least squares on relative error, in-graph and standalone "
         "casts):\n";
  cast_line("both", cal.cast_all);
  cast_line(("f32->" + std::string(dtype_name(cal.low))).c_str(), cal.cast_to_low);
  cast_line((std::string(dtype_name(cal.low)) + "->f32").c_str(), cal.cast_to_f32);
  const double a = cal.cast_to_low.model.per_element_ms, b = cal.cast_to_f32.model.per_element_ms;
  if (a > 0 && b > 0) {
    const double diff = std::fabs(a - b) / std::max(a, b);
    std::snprintf(line, sizeof line,
                  "cast directions: per-element cost differs by %.0f%% (%s within 10%%; the "
                  "paper found the two directions equal)\n",
                  100 * diff, diff <= 0.10 ? "agree" : "do NOT agree");
    log << line;
  }
}

// The held-out MAPE of each op model's forms side by side (Markdown), and their means: over
// the models, and weighted by the held-out low-precision time each model predicts.
void print_fit_comparison(const std::vector<FitComparison>& comparisons,
                          const std::vector<Sample>& ops, std::ostream& out) {
  std::map<std::string, double> heldout_ms;  // by model key
  for (const Sample& s : ops) {
    if (!s.heldout) continue;
    const bool unaligned_split =
        std::any_of(comparisons.begin(), comparisons.end(),
                    [&](const FitComparison& c) { return c.key == s.op + ":unaligned"; });
    const bool unaligned = unaligned_split && s.s.features[size_t(Feature::aligned)] == 0;
    heldout_ms[unaligned ? s.op + ":unaligned" : s.op] += s.s.low_ms;
  }
  auto pct = [](double v) {
    char t[16];
    std::snprintf(t, sizeof t, "%.1f", v);
    return v < 0 ? std::string("-") : std::string(t);
  };
  out << "\nheld-out MAPE of each fit (%; the fit a model uses is chosen by a " << kShapeFolds
      << "-fold cross-validation over the training batch sizes, not by these):\n\n"
      << "| op model | shape | train | held out | linear (before) | shape features | shape table "
         "| chosen | after | cross-validated: linear / features / table |\n"
      << "|---|---|---:|---:|---:|---:|---:|---|---:|---|\n";
  double before_sum = 0, after_sum = 0, before_w = 0, after_w = 0, weight = 0;
  int scored = 0;
  for (const FitComparison& c : comparisons) {
    const double before = c.heldout_mape[0], after = c.heldout_mape[size_t(c.chosen)];
    const OpKind kind = *parse_op_kind(c.key.substr(0, c.key.find(':')));
    out << "| " << c.key << " | " << shape_family_name(shape_family_of(kind)) << " | "
        << c.train_samples << " | " << c.heldout_samples << " | " << pct(before) << " | "
        << pct(c.heldout_mape[1]) << " | " << pct(c.heldout_mape[2]) << " | "
        << fit_form_name(c.chosen) << " | " << pct(after) << " | " << pct(c.cv_mape[0]) << " / "
        << pct(c.cv_mape[1]) << " / " << pct(c.cv_mape[2]) << " |\n";
    if (before < 0 || after < 0) continue;
    ++scored;
    before_sum += before;
    after_sum += after;
    const double w = heldout_ms[c.key];
    before_w += w * before;
    after_w += w * after;
    weight += w;
  }
  if (scored == 0) {
    out << "\nnothing was held out\n";
    return;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "\nmean over %d op models: before %.1f%%, after %.1f%%; weighted by held-out "
                "time: before %.1f%%, after %.1f%%\n",
                scored, before_sum / scored, after_sum / scored,
                weight > 0 ? before_w / weight : 0.0, weight > 0 ? after_w / weight : 0.0);
  out << line;
}

}  // namespace

void compare_fits(const std::string& samples_path, std::ostream& out) {
  const std::string where = "--compare-fits " + samples_path;
  require_input_file(samples_path, "--compare-fits samples file");  // a FIFO would hang
  std::ifstream in(samples_path, std::ios::binary);
  CAMPO_CHECK(in, where, ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception&) {
    CAMPO_FAIL(where, ": not JSON (campo calibrate --samples FILE writes what it reads)");
  }
  CAMPO_CHECK(!(j.is_object() && j.contains("format") && j["format"] == "campo-calibration"), where,
              ": is a calibration file, not its samples (campo calibrate --samples FILE "
              "writes them)");
  CAMPO_CHECK(j.is_object() && j.contains("ops") && j["ops"].is_array(), where,
              ": not a calibration's samples (no 'ops' list; campo calibrate --samples FILE "
              "writes one)");
  std::vector<Sample> ops;
  for (const nlohmann::json& o : j["ops"]) {
    CAMPO_CHECK(o.is_object() && o.contains("shape") && o.contains("group"), where,
                ": a sample without its shape or group (written before campo recorded them; "
                "run campo calibrate --samples again)");
    try {
      Sample s;
      s.op = o.at("op").get<std::string>();
      CAMPO_CHECK(parse_op_kind(s.op).has_value(), where, ": unknown op '", s.op, "'");
      s.heldout = o.at("heldout").get<bool>();
      s.s.fp32_ms = o.at("fp32_ms").get<double>();
      s.s.low_ms = o.at("low_ms").get<double>();
      CAMPO_CHECK(s.s.fp32_ms > 0 && s.s.low_ms > 0, where, ": a sample of ", s.op,
                  " with a time <= 0");
      s.s.group = o.at("group").get<int64_t>();
      for (int f = 0; f < kNumFeatures; ++f) {
        const char* name = feature_name(Feature(f));
        s.s.features[size_t(f)] = o.at("features").contains(name)
                                      ? o.at("features").at(name).get<double>()
                                      : std::numeric_limits<double>::quiet_NaN();
      }
      const std::string family = o.at("shape").at("family").get<std::string>();
      const ShapeFamily expected = shape_family_of(*parse_op_kind(s.op));
      s.s.shape.family = family == "gemm"   ? ShapeFamily::gemm
                         : family == "conv" ? ShapeFamily::conv
                                            : ShapeFamily::other;
      const nlohmann::json& dims = o.at("shape").at("dims");
      CAMPO_CHECK(dims.is_array() && dims.size() == size_t(kShapeDims), where, ": a shape of ",
                  dims.size(), " dimensions, not ", kShapeDims);
      for (int d = 0; d < kShapeDims; ++d)
        s.s.shape.dims[size_t(d)] = dims[size_t(d)].get<double>();
      CAMPO_CHECK(s.s.shape.family == expected || s.s.shape.family == ShapeFamily::other, where,
                  ": a ", s.op, " sample described as a '", family, "' shape");
      ops.push_back(std::move(s));
    } catch (const nlohmann::json::exception& e) {
      CAMPO_FAIL(where, ": a sample with a missing or ill-typed field (", e.what(), ")");
    }
  }
  CAMPO_CHECK(!ops.empty(), where, ": no samples");
  std::ostringstream quiet;  // fit_models' notes on keys without training samples
  const FittedModels fitted = fit_models(ops, quiet);
  out << "compare-fits: " << ops.size() << " samples of " << samples_path << "\n" << quiet.str();
  print_fit_comparison(fitted.comparisons, ops, out);
}

Calibration run_calibration(const CalibrateOptions& o, std::ostream& log) {
  // Every measurement runs on this backend, made once before any: one error line for a
  // device this build or machine lacks.
  const std::shared_ptr<Backend> backend =
      backend_for(o.device, CudaGraphMode::automatic, false);  // timed: launched
  const DType low = parse_low(o.low_precision);
  CAMPO_CHECK(o.budget_minutes >= 0 && std::isfinite(o.budget_minutes),
              "--budget-minutes must be positive, got ", o.budget_minutes);
  const double budget_minutes = o.budget_minutes > 0 ? o.budget_minutes : o.quick ? 1 : 10;
  const std::string out = o.out.empty() ? default_calibration_path(*backend, low) : o.out;
  CAMPO_CHECK(!out.empty(),
              "no --out given and no cache folder (neither XDG_CACHE_HOME nor HOME "
              "is set)");
  // The outputs can be written: checked before minutes of measurement are spent. Only the
  // default cache folder is created when missing (on a new machine); --out's folder must
  // exist, as every output's.
  if (!o.out.empty()) {
    require_output_file(out, "--out calibration file");
  } else {
    const std::filesystem::path parent = std::filesystem::path(out).parent_path();
    if (parent.empty() || std::filesystem::exists(parent))
      require_output_file(out, "calibration file");
    else
      require_output_directory(parent.string(), "calibration file " + out + ": its folder");
  }
  if (!o.samples_out.empty()) require_output_file(o.samples_out, "--samples file");
  if (!o.counters_out.empty()) {
    const std::string why = backend->counters_unavailable();
    CAMPO_CHECK(why.empty(), "--counters ", o.counters_out, ": ", why);
    require_output_file(o.counters_out, "--counters file");
  }
  const DeviceReport device_report(backend);
  const Timer wall;
  const double budget_s = 60.0 * budget_minutes;
  const NoiseLimits& limits = o.noise;
  CAMPO_CHECK(limits.max_load_fraction > 0 && std::isfinite(limits.max_load_fraction),
              "--max-load must be a positive fraction of the cores, got ",
              limits.max_load_fraction);
  CAMPO_CHECK(limits.max_spread > 0 && std::isfinite(limits.max_spread),
              "--max-spread must be a positive percentage, got ", 100 * limits.max_spread);
  CAMPO_CHECK(limits.max_shape_spread > 0 && std::isfinite(limits.max_shape_spread),
              "the identical-shape spread limit must be positive, got ",
              100 * limits.max_shape_spread);
  CAMPO_CHECK(limits.retries >= 0 && limits.retries <= 10, "--retries must be 0 to 10, got ",
              limits.retries);
  CAMPO_CHECK(limits.repeats >= 3 && limits.repeats <= 1000,
              "--repeats must be 3 to 1000 (a spread needs a median and a fastest), got ",
              limits.repeats);
  // Each measurement's steps are repeated so that their spread is known (NoiseLimits).
  const Timing timing{1, limits.repeats};

  Calibration cal;
  cal.machine = backend->identity();
  cal.campo_version = CAMPO_VERSION;
  cal.low = low;
  cal.created = utc_now();
  cal.alignment = backend->padding_alignment();
  log << "calibrate: " << backend->describe() << "; low precision " << dtype_name(low)
      << ", budget " << budget_minutes << " min" << (o.quick ? " (quick)" : "") << "\n";
  log << "identity: device " << cal.machine.kind;
  for (const BackendIdentity::Field& f : cal.machine.fields)
    log << ", " << f.name << " " << f.value;
  log << "\n";
  // The host runs the steps on any device: a busy one delays kernel launches too. Each
  // measurement is judged on its own (measure_quietly); this says what to expect.
  {
    const CpuSnapshot now = cpu_snapshot();
    const double load = sample_foreign_load(0.3);
    const int cores = now.known ? now.cores : int(std::thread::hardware_concurrency());
    if (load > limits.max_load_fraction * cores) {
      char line[320];
      std::snprintf(line, sizeof line,
                    "machine busy: other processes use %.2f of %d cores (limit %.2f): a "
                    "measurement that stays this noisy is redone up to %d times, and the "
                    "calibration refused if it does not calm down\n",
                    load, cores, limits.max_load_fraction * cores, limits.retries);
      log << line << std::flush;
    }
  }
  NoiseTally tally;

  const std::vector<Configuration> set = calibration_set(o);  // checks the models first
  Measurements m;
  // Casts are cheap: more timed steps, whose minimum rides out scheduling hiccups.
  measure_quietly(
      "the standalone casts", limits,
      [&](Measurements& one) {
        measure_standalone_casts(low, o.quick ? 22 : 24, o.quick ? 2 : 1,
                                 Timing{2, std::max(10, limits.repeats)}, backend, one);
      },
      m, tally, log);
  log << "standalone casts (ms, f32->" << dtype_name(low) << " / " << dtype_name(low) << "->f32):";
  for (size_t i = 0; i + 1 < m.casts.size(); i += 2) {
    char c[80];
    std::snprintf(c, sizeof c, "%s2^%d %.4g/%.4g", i % 8 == 0 ? "\n  " : "  ",
                  int(std::lround(std::log2(double(m.casts[i].elements)))), m.casts[i].ms,
                  m.casts[i + 1].ms);
    log << c;
  }
  log << "\n";

  // A configuration's time is estimated before it starts from the last one of its model
  // shape (seconds per sample: time grows about linearly with the batch, and the fixed part
  // makes the estimate err on the long side), so that none starts that would overrun the
  // budget; the minimal set runs whatever the budget.
  std::map<std::string, double> seconds_per_sample;
  int skipped = 0;
  for (const Configuration& c : set) {
    const std::string shape = c.describe().substr(0, c.describe().rfind(" batch"));
    if (!c.minimal) {
      const double estimate =
          seconds_per_sample.count(shape) ? seconds_per_sample[shape] * double(c.batch) : 0.0;
      if (wall.seconds() + estimate > budget_s) {
        ++skipped;
        continue;
      }
    }
    const double seconds = measure_quietly(
        c.describe(), limits,
        [&](Measurements& one) { measure_configuration(c, low, timing, o.seed, backend, one); }, m,
        tally, log);
    seconds_per_sample[shape] = seconds / double(c.batch);
    ++cal.configurations;
    cal.heldout_configurations += c.heldout;
    char line[256];
    std::snprintf(line, sizeof line, "  %-34s %s %6.1f s  (%zu samples so far, %.0f s elapsed)\n",
                  c.describe().c_str(), c.heldout ? "held-out" : "train   ", seconds, m.ops.size(),
                  wall.seconds());
    log << line << std::flush;
  }
  if (skipped > 0)
    log << skipped << " of " << set.size()
        << " configurations left out to stay within the budget\n";
  log << m.ops.size() << " node samples";
  if (m.dropped_fast > 0) log << " (" << m.dropped_fast << " nodes under 1 us left out)";
  log << ", " << m.casts.size() << " casts\n";
  // What the models may use besides the analytic features, in one line.
  if (m.counter_graphs > 0) {
    std::string names;
    for (int c = 0; c < kNumCounters; ++c)
      names += std::string(c ? ", " : "") + counter_name(Counter(c));
    cal.hardware_counters = "read per node by the " + m.counter_source + " (" +
                            std::to_string(m.counter_passes) + " passes a step) in " +
                            std::to_string(m.counter_graphs) + " of " + std::to_string(m.graphs) +
                            " graphs: " + names +
                            "; features of a model where Spearman |rho| > 0.75";
  } else {
    cal.hardware_counters =
        "unavailable: " + m.counters_unavailable + "; the models use analytic features only";
  }
  log << "hardware counters: " << cal.hardware_counters << "\n";

  if (!o.samples_out.empty()) {
    nlohmann::json ops = nlohmann::json::array(), casts = nlohmann::json::array();
    for (const Sample& s : m.ops) {
      nlohmann::json features;
      for (int f = 0; f < kNumFeatures; ++f)  // unread counters are left out
        if (std::isfinite(s.s.features[size_t(f)]))
          features[feature_name(Feature(f))] = s.s.features[size_t(f)];
      nlohmann::json dims = nlohmann::json::array();
      for (double d : s.s.shape.dims) dims.push_back(d);
      ops.push_back({{"op", s.op},
                     {"heldout", s.heldout},
                     {"group", s.s.group},
                     {"shape", {{"family", shape_family_name(s.s.shape.family)}, {"dims", dims}}},
                     {"fp32_ms", s.s.fp32_ms},
                     {"low_ms", s.s.low_ms},
                     {"features", features}});
    }
    for (const CastTiming& c : m.casts)
      casts.push_back({{"elements", c.elements},
                       {"from", dtype_name(c.from)},
                       {"to", dtype_name(c.to)},
                       {"ms", c.ms}});
    write_file_atomically(
        o.samples_out,
        nlohmann::json{{"low_precision", dtype_name(low)}, {"ops", ops}, {"casts", casts}}.dump(1));
    log << "wrote the raw samples to " << o.samples_out << "\n";
  }
  if (!o.counters_out.empty()) {
    CounterTable table;
    table.device = backend->describe();
    for (const Sample& s : m.ops) {
      NodeCounters n{.node = s.node, .fp32_ms = s.s.fp32_ms, .low_ms = s.s.low_ms};
      for (int c = 0; c < kNumCounters; ++c)
        n.values[size_t(c)] = s.s.features[size_t(kFirstCounterFeature + c)];
      if (std::any_of(n.values.begin(), n.values.end(), [](double v) { return std::isfinite(v); }))
        table.nodes.push_back(std::move(n));
    }
    write_counter_table(o.counters_out, table);
    log << "wrote the hardware counters of " << table.nodes.size() << " samples to "
        << o.counters_out << "\n";
  }
  const FittedModels fitted = fit_models(m.ops, log);
  cal.ops = fitted.models;
  cal.cast_all = fit_casts(m.casts, [](const CastTiming&) { return true; });
  cal.cast_to_low = fit_casts(m.casts, [](const CastTiming& c) { return c.to != DType::f32; });
  cal.cast_to_f32 = fit_casts(m.casts, [](const CastTiming& c) { return c.to == DType::f32; });
  // What the policy uses: the joint fit, with no negative part (a negative intercept only
  // says the smallest casts were faster than the line, not that casts pay back).
  cal.cast.fixed_ms = std::max(0.0, cal.cast_all.model.fixed_ms);
  cal.cast.per_element_ms = std::max(0.0, cal.cast_all.model.per_element_ms);
  cal.f32_ops = fit_f32_models(m);
  cal.seconds = wall.seconds();
  print_report(cal, m, log);
  print_fit_comparison(fitted.comparisons, m.ops, log);

  // How it was made, and the last judgement: identical shapes must agree.
  CalibrationRecord& r = cal.record;
  r.recorded = true;
  r.repeats = timing.steps;
  const CpuSnapshot end = cpu_snapshot();
  r.cores = end.known ? end.cores : int(std::max(1u, std::thread::hardware_concurrency()));
  r.measurements = tally.measurements;
  r.redone = tally.redone;
  if (!tally.loads.empty()) {
    double sum = 0;
    for (double l : tally.loads) sum += l;
    r.load = sum / double(tally.loads.size());
    r.max_load = *std::max_element(tally.loads.begin(), tally.loads.end());
  }
  if (!tally.spreads.empty()) {
    r.repeat_spread = median_of(tally.spreads);
    r.max_repeat_spread = *std::max_element(tally.spreads.begin(), tally.spreads.end());
  }
  r.shape_spread = shape_spread(m);
  r.max_load_fraction = limits.max_load_fraction;
  r.max_spread = limits.max_spread;
  r.max_shape_spread = limits.max_shape_spread;
  log << "noise: " << describe_record(r) << "\n";
  if (r.shape_spread > limits.max_shape_spread) {
    char why[200];
    std::snprintf(why, sizeof why,
                  "calibration refused, nothing written: the low-precision times of identical "
                  "shapes spread %.0f%% (limit %.0f%%)",
                  100 * r.shape_spread, 100 * limits.max_shape_spread);
    throw CalibrationRefused(std::string(why) +
                             "; calibrate when the machine is quiet, or allow more noise with "
                             "--max-shape-spread");
  }

  if (o.out.empty()) {  // the cache folder
    std::error_code ec;
    const std::filesystem::path parent = std::filesystem::path(out).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    CAMPO_CHECK(!ec, "cannot create the folder of ", out, ": ", ec.message());
  }
  save_calibration(cal, out);
  log << "wrote " << out << " (" << std::lround(cal.seconds) << " s)\n";
  nlohmann::json j = {{"event", "calibrate"},
                      {"out", out},
                      {"configurations", cal.configurations},
                      {"seconds", cal.seconds}};
  device_report.add_to(j);
  log << j.dump() << "\n";
  return cal;
}

TimedSample time_calibration_sample(const std::shared_ptr<Backend>& backend, DType low,
                                    const std::vector<std::string>& models, int64_t batch,
                                    int repeats, uint64_t seed) {
  CAMPO_CHECK(batch > 0, "the batch size to re-time must be positive, got ", batch);
  CAMPO_CHECK(repeats >= 3, "re-timing needs 3 or more repeats, got ", repeats);
  CalibrateOptions o;
  o.quick = true;  // its shapes: LeNet, ResNet-18, DCGAN, the attention products
  o.models = models;
  o.batches = {batch};
  const std::vector<Configuration> set = calibration_set(o);  // checks the names
  TimedSample sample;
  Measurements m;
  const Timer t;
  const CpuSnapshot before = cpu_snapshot();
  for (const Configuration& c : set) {
    measure_configuration(c, low, Timing{1, repeats}, seed, backend, m);
    sample.configurations.push_back(c.describe());
  }
  const CpuSnapshot after = cpu_snapshot();
  sample.seconds = t.seconds();
  sample.load = foreign_load(before, after);
  sample.cores = after.known ? after.cores : int(std::thread::hardware_concurrency());
  for (double s : m.spreads) sample.spread = std::max(sample.spread, s);
  for (const Sample& s : m.ops)
    sample.nodes.push_back(
        {*parse_op_kind(s.op), s.s.features, s.s.shape, s.s.fp32_ms, s.s.low_ms});
  return sample;
}

// ---- where `campo calibrate` writes by default ----

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

const char* low_name(DType low) { return low == DType::f16 ? "fp16" : "bf16"; }

}  // namespace

std::string default_calibration_path(const Backend& backend, DType low) {
  std::string dir = env("XDG_CACHE_HOME");
  if (dir.empty()) {
    const std::string home = env("HOME");
    if (home.empty()) return "";
    dir = home + "/.cache";
  }
  return dir + "/campo/calibration-" + backend.identity().hardware_hash() + "-" + low_name(low) +
         ".json";
}

}  // namespace campo
