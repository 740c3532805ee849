#include "perf/bench.h"

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
#include "perf/roofline.h"
#include "runtime/atomic_file.h"
#include "runtime/device_energy.h"
#include "runtime/energy.h"
#include "runtime/file_check.h"
#include "runtime/memory_info.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/make_session.h"
#include "train/model_array.h"
#include "train/policy_guard.h"
#include "train/profiling.h"
#include "train/trainer.h"

namespace campo {

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
  GuardVerdict guard;                 // cost-aware's
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
  SessionSpec spec;
  spec.graph = model_run_spec(run, policy);
  spec.models = bench_models(run, spec.graph.optimizer, bench_lr(run.model, o.lr));
  spec.conv_layout = run.conv_layout;
  spec.data_parallel = ranks;
  spec.gan_samples = 1;
  if (policy == Precision::cost_aware) {
    const SessionFactory make = [&](const SessionSpec& s) { return make_session(s, backend); };
    std::ostringstream log;  // the verdict goes in the table
    const std::string not_run_because =
        run.plan_for.active()
            ? "--for: the plan predicted for " + run.plan_for.device + " is benched as it is"
        : o.guard ? ""
                  : "--no-guard";
    p.guard = guard_run(spec, make, not_run_because, log);
    apply_guard(spec, p.guard);
  }
  p.session = make_session(spec, std::move(backend));
  if (ranks.on()) check_ranks_agree(*ranks.comm, p.session->step_graphs()[0].graph->to_text());
  p.batch = p.session->random_batch(rng);
  p.classifier = dynamic_cast<TrainingSession*>(p.session.get());
  p.lr = spec.models.lr;
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
  if (p.guard.reported()) {
    res.guard_line = p.guard.line();
    res.guard = p.guard.json();
  }
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

namespace {

// The step time of a policy's median throughput, in ms (0 when nothing was measured).
double measured_step_ms(const BenchOptions& o, const BenchResult& res, int ranks) {
  const double per_step = double(samples_per_step(o.run) * ranks);
  return res.median > 0 ? 1000.0 * per_step / res.median : 0;
}

// Every figure finish_bench prints and writes, from the repetitions: medians, the ratios to
// fp32 and amp, --data-parallel's scaling, the prediction's error, the roofline and the
// energy per step. Returns fp32's median (0 when fp32 was not run).
double summarize_results(const BenchOptions& o, std::vector<BenchResult>& results,
                         const BenchMachine& machine) {
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
  const double peak_f32 = machine.peak_f32 ? machine.peak_f32->gflops : 0;
  const double peak_low = machine.peak_low ? machine.peak_low->gflops : 0;
  for (BenchResult& res : results) {
    res.ratio_to_fp32 = fp32_median > 0 ? res.median / fp32_median : 0;
    const double per_step = double(samples_per_step(o.run) * ranks);
    const double measured_ms = measured_step_ms(o, res, ranks);
    if (res.predicted_ms > 0 && measured_ms > 0)
      res.prediction_error_pct = 100.0 * (res.predicted_ms - measured_ms) / measured_ms;
    // Roofline: the counted FLOPs at the median rate, against the peak of the step's GEMM mix.
    const double steps_per_sec = res.median / per_step;
    res.achieved_gflops = double(res.flops.total()) * steps_per_sec * 1e-9;
    res.peak_gflops = mixed_gemm_peak_gflops(res.flops, peak_f32, peak_low);
    res.pct_of_peak = res.peak_gflops > 0 ? 100.0 * res.achieved_gflops / res.peak_gflops : 0;
    if (!res.joules.empty()) {
      res.joules_per_step = median_of(res.joules) / double(o.steps);
      res.samples_per_joule = res.joules_per_step > 0 ? per_step / res.joules_per_step : 0;
      CAMPO_CHECK(res.energy_seconds.size() == res.joules.size(), "internal: ", res.joules.size(),
                  " energy readings of ", res.energy_seconds.size(), " windows");
      const double shortest =
          *std::min_element(res.energy_seconds.begin(), res.energy_seconds.end());
      res.energy_reliable = shortest >= kReliableEnergyRefreshes * machine.energy_update_period_s;
    }
  }
  return fp32_median;
}

// The lines above the table: the job, where its costs came from, the ranks, the GEMM peaks,
// energy, the device, determinism and the cuDNN algorithm search.
void print_bench_header(const BenchOptions& o, size_t repetitions, const BenchMachine& machine,
                        std::ostream& out) {
  const int ranks = machine.world_size();
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
  char line[512];
  if (machine.peak_f32 && machine.peak_low) {
    std::snprintf(line, sizeof line,
                  "peak: one %lldx%lldx%lld GEMM (campo's MatMul kernel, best of %d): f32 %.1f "
                  "GFLOP/s, %s %.1f GFLOP/s\n",
                  (long long)machine.peak_f32->m, (long long)machine.peak_f32->n,
                  (long long)machine.peak_f32->k, machine.peak_f32->reps, machine.peak_f32->gflops,
                  dtype_name(machine.peak_low->dtype), machine.peak_low->gflops);
    out << line;
  } else {
    out << "peak: not measured (--no-peak)\n";
  }
  if (!machine.energy_unavailable.empty())
    out << "energy: not available (" << machine.energy_unavailable << ")\n";
  // What the figures were measured on (Backend::describe of the benchmarked device).
  out << "device: " << machine.device << "\n";
  if (machine.device_report) {
    const Backend& backend = *machine.device_report->backend();
    if (backend.deterministic()) out << "deterministic: on (--deterministic)\n";
    // One cache for every policy: a problem another policy searched is reused.
    if (const ConvAlgoCache* cache = backend.conv_algo_cache()) {
      const ConvAlgoCache::Counts c = cache->counts();
      std::snprintf(line, sizeof line,
                    "cuDNN algorithm search: %lld problems searched in %.1f s, %lld reused "
                    "(one cache for every policy)\n",
                    static_cast<long long>(c.searches), c.search_seconds,
                    static_cast<long long>(c.hits));
      out << line;
    }
  }
}

// --data-parallel: the timed steps' communication per step (every repetition's); null for a
// result without ranks.
nlohmann::json result_communication(const BenchOptions& o, const BenchResult& res,
                                    const BenchMachine& machine, size_t repetitions) {
  if (!res.scaling) return nlohmann::json();
  return communication_json(*machine.ranks, res.communication,
                            double(o.steps) * double(repetitions));
}

// One policy's lines of the table.
void print_bench_result(const BenchOptions& o, const BenchResult& res, const BenchMachine& machine,
                        double fp32_median, const nlohmann::json& communication,
                        std::ostream& out) {
  const int ranks = machine.world_size();
  char line[512];
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
                  res.predicted_ms, measured_step_ms(o, res, ranks), res.prediction_error_pct);
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
                  "%-8s %-11s roofline: %.3f GFLOP/step (%.3f in GEMMs), %.2f GFLOP/s%s\n", "", "",
                  double(res.flops.total()) * 1e-9, double(res.flops.gemm) * 1e-9,
                  res.achieved_gflops, peak);
    out << line;
  }
  if (res.scaling) {
    const PairedRatio& p = *res.scaling;
    const nlohmann::json& reduce = communication["reduce_ms_per_step"];
    char reduced[32] = "(not timed)";
    if (!reduce.is_null()) std::snprintf(reduced, sizeof reduced, "%.2f", reduce.get<double>());
    std::snprintf(line, sizeof line,
                  "%-8s %-11s %.1f samples/s per rank, one process %.1f: scaling efficiency "
                  "%.2f (median of %zu paired repetitions); gradients %.1f MiB/step in %.0f "
                  "buckets, reduced in %s ms/step, waited %.2f ms/step\n",
                  "", "", res.median / ranks, median_of(res.one_process_samples_per_sec), p.median,
                  p.ratios.size(), communication["bytes_per_step"].get<double>() / (1 << 20),
                  communication["buckets"].get<double>(), reduced,
                  communication["wait_ms_per_step"].get<double>());
    out << line;
  }
  out << std::string(21, ' ') << "memory: " << memory_line(res.memory) << "\n";
  if (!res.guard_line.empty()) out << std::string(21, ' ') << res.guard_line << "\n";
  if (machine.device_report && machine.device_report->backend()->capture_unsupported().empty())
    out << std::string(21, ' ') << res.cuda_graph_line << "\n";
  if (!res.joules.empty()) {
    std::string source = machine.energy_source;
    for (char& c : source) c = char(std::toupper(static_cast<unsigned char>(c)));
    char reliability[160] = "";
    if (!res.energy_reliable) {
      // The --steps whose shortest window would span kReliableEnergyRefreshes refreshes.
      const double shortest =
          *std::min_element(res.energy_seconds.begin(), res.energy_seconds.end());
      const double needed = kReliableEnergyRefreshes * machine.energy_update_period_s;
      const double steps_for_energy =
          std::ceil(double(o.steps) * needed / std::max(shortest, 1e-9));
      std::snprintf(reliability, sizeof reliability,
                    "; not reliable: windows from %.3g ms, under %.0f of the counter's %.3g ms "
                    "refreshes; --steps %.0f or more",
                    1e3 * shortest, kReliableEnergyRefreshes, 1e3 * machine.energy_update_period_s,
                    steps_for_energy);
    }
    std::snprintf(line, sizeof line, "%-8s %-11s energy: %.3f J/step, %.2f samples/J (%s%s)\n", "",
                  "", res.joules_per_step, res.samples_per_joule, source.c_str(), reliability);
    out << line;
  }
}

nlohmann::json paired_json(const PairedRatio& p) {
  return nlohmann::json{{"ratios", p.ratios},
                        {"median", p.median},
                        {"ci95", std::isnan(p.ci_low) ? nlohmann::json(nullptr)
                                                      : nlohmann::json{p.ci_low, p.ci_high}},
                        {"faster", p.faster}};
}

// One policy's entry of --json.
nlohmann::json bench_result_json(const BenchOptions& o, const BenchResult& res,
                                 const BenchMachine& machine, const nlohmann::json& communication) {
  const int ranks = machine.world_size();
  nlohmann::json e = {{"model", o.run.model},
                      {"machine", machine.device},
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
                      {"measured_ms", measured_step_ms(o, res, ranks)},
                      {"prediction_error_pct", res.prediction_error_pct},
                      {"flops_per_step", res.flops.total()},
                      {"gemm_flops_per_step", res.flops.gemm},
                      {"gemm_flops_low_per_step", res.flops.gemm_low},
                      {"other_flops_per_step", res.flops.other},
                      {"achieved_gflops", res.achieved_gflops}};
  if (!res.op_ms.empty()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTime& t : res.op_ms)
      ops.push_back({{"op", t.op}, {"dtype", t.dtype}, {"ms", t.ms}});
    e["op_ms"] = ops;
  }
  if (res.precision == "cost-aware" && o.run.plan_for.active()) {
    e["for"] = o.run.plan_for.device;  // its plan: from costs predicted for that device
    e["costs"] = o.run.costs_note;
  }
  e["memory"] = memory_json(res.memory);
  e["cuda_graph"] = res.cuda_graph;
  if (!res.guard.is_null()) e["guard"] = res.guard;
  e["peak_rss_mib"] = double(peak_resident_memory_bytes()) / double(1 << 20);
  if (machine.device_report) machine.device_report->add_to(e);
  auto or_null = [](bool known, double v) { return known ? nlohmann::json(v) : nlohmann::json(); };
  const double peak_f32 = machine.peak_f32 ? machine.peak_f32->gflops : 0;
  const double peak_low = machine.peak_low ? machine.peak_low->gflops : 0;
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
  if (res.vs_amp) e["vs_amp"] = paired_json(*res.vs_amp);
  if (res.scaling) {
    e["transport"] = machine.ranks->transport();
    e["samples_per_sec_per_rank"] = res.median / ranks;
    e["one_process_samples_per_sec"] = res.one_process_samples_per_sec;
    e["scaling_efficiency"] = paired_json(*res.scaling);
    e["communication"] = communication;
  }
  return e;
}

}  // namespace

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
  const double fp32_median = summarize_results(o, results, machine);
  print_bench_header(o, repetitions, machine, out);
  nlohmann::json j = nlohmann::json::array();
  for (const BenchResult& res : results) {
    const nlohmann::json communication = result_communication(o, res, machine, repetitions);
    print_bench_result(o, res, machine, fp32_median, communication, out);
    j.push_back(bench_result_json(o, res, machine, communication));
  }
  // Every policy's session is alive at once: the process's peak is theirs together.
  char line[128];
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
