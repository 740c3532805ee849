// `campo bench`: training throughput of precision policies side by side, interleaved
// repetitions on one backend, with their statistics (paired ratios), roofline, energy and
// memory, printed as a table and written as JSON; and the same run driven step by step
// from outside (--lockstep).
#pragma once

#include <iosfwd>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "graph/flops.h"
#include "graph/layout.h"
#include "graph/memory_report.h"
#include "perf/model_run.h"
#include "perf/roofline.h"
#include "runtime/energy.h"
#include "runtime/nvml_energy.h"
#include "train/data_parallel.h"
#include "train/training_graph.h"

namespace campo {

struct BenchOptions {
  ModelRunOptions run;
  std::vector<std::string> precisions = {"fp32", "amp", "cost-aware"};
  int steps = 20;    // timed steps per repetition
  int warmup = 3;    // untimed steps before the first repetition
  int repeats = 3;   // interleaved repetitions (policy A, B, ..., A, B, ...)
  float lr = 1e-3f;  // small, so that weights stay sane over the benchmark
  std::string json_path;
  // The roofline's GEMM peak (perf/roofline.h), measured once before the policies are
  // built; false (--no-peak): not measured, no percentages.
  bool measure_peak = true;
  // Where the energy counters are read (runtime/energy.h): the CPU's RAPL tree (tests fake
  // one) and, on --device cuda, the NVML library (runtime/nvml_energy.h).
  std::string powercap_root = kPowercapRoot;
  std::string nvml_library = nvml_library_path();
  // --data-parallel under mpirun (train/data_parallel.h): every policy's step runs on every
  // rank, --batch samples each, its gradients averaged; each repetition also times the same
  // policy in one process (rank 0 alone, the others waiting) for the scaling efficiency.
  DataParallelOptions data_parallel;
  // cost-aware: the measured guard (train/policy_guard.h) before its timed steps, as campo
  // train runs it; false (--no-guard): the plan as chosen.
  bool guard = true;
};

// Throughput ratios b[r] / a[r] of paired repetitions: their median, a distribution-free
// 95% confidence interval for the median (order statistics of the sign test; NaN below 6
// pairs, where no pair of order statistics covers 95%) and in how many pairs b was faster.
struct PairedRatio {
  std::vector<double> ratios;
  double median = 0, ci_low = 0, ci_high = 0;
  int faster = 0;
};
PairedRatio paired_ratio(const std::vector<double>& a, const std::vector<double>& b);

// Time per step of one op kind in one compute type (the profiled steps).
struct OpTime {
  std::string op, dtype;
  double ms = 0;
};

struct BenchResult {
  std::string precision;
  std::vector<double> samples_per_sec;  // one per repetition
  double median = 0, min = 0, max = 0;
  double ratio_to_fp32 = 0;  // median / fp32 median (0 when fp32 was not run)
  int casts = 0;
  int folded = 0;         // casts folded away (cost-aware): into producers or weight copies
  int weight_copies = 0;  // of which weight copies the optimizer updates write
  int64_t cast_elements = 0;
  double cast_ms_per_step = 0, step_ms = 0;  // from a few timed steps after the measurement
  std::vector<OpTime> op_ms;                 // the same steps by (op, compute type)
  int low_nodes = 0;
  // cost-aware: the plan's predicted step time (ms) and its error against the measured
  // median step time, in percent (0 when not cost-aware).
  double predicted_ms = 0, prediction_error_pct = 0;
  // Against amp, repetition by repetition (policies other than fp32 and amp, when amp ran):
  // the interleaved repetitions r of both policies ran back to back, under the same load.
  std::optional<PairedRatio> vs_amp;
  // Roofline: the FLOPs of one step (dcgan: D step + G step; graph/flops.h), their rate at
  // the median throughput, the peak of the step's GEMM mix (mixed_gemm_peak_gflops: f32
  // GEMMs at the f32 peak, low-precision ones at the low peak; 0 when not measured) and
  // the achieved rate as a percentage of it.
  FlopCount flops;
  double achieved_gflops = 0, peak_gflops = 0, pct_of_peak = 0;
  // Energy of each repetition's o.steps steps, in joules (the CPU packages' from RAPL, the
  // GPU's from NVML; empty when the counters cannot be read), and the seconds each window
  // lasted; the median per step and samples per joule at that median. Reliable: every
  // window spans kReliableEnergyRefreshes of the counter's refreshes or more.
  std::vector<double> joules, energy_seconds;
  double joules_per_step = 0, samples_per_joule = 0;
  bool energy_reliable = false;
  MemoryReport memory;  // the policy's session (graph/memory_report.h)
  // --cuda-graph: whether its timed steps were replayed (train/loop.h, cuda_graph_json), and
  // the line saying so.
  nlohmann::json cuda_graph;
  std::string cuda_graph_line;
  // cost-aware: the guard's verdict (its line and JSON); empty for the other policies.
  std::string guard_line;
  nlohmann::json guard;
  // --data-parallel: samples_per_sec above is every rank's samples together (the step time
  // the slowest rank took); these are the same steps in one process, rank 0 alone, timed
  // just before in each repetition, and the efficiency N ranks' samples/s / (N x one
  // process's), paired by repetition. The gradient buckets of the timed steps, summed.
  std::vector<double> one_process_samples_per_sec;
  std::optional<PairedRatio> scaling;
  Communicator::Stats communication;
};

// What a bench run measured about the machine besides the policies.
class DeviceReport;
struct BenchMachine {
  std::string device;                           // Backend::describe of the device measured
  const DeviceReport* device_report = nullptr;  // its fields go into every JSON entry
  std::optional<GemmPeak> peak_f32, peak_low;   // unset: --no-peak
  std::string energy_unavailable;               // why there is no energy (empty: there is)
  // The counter read (EnergyMeter::source, "rapl" or "nvml") and its refresh period.
  std::string energy_source;
  double energy_update_period_s = 0;
  // --data-parallel: the ranks (null: one process).
  const Communicator* ranks = nullptr;
  int world_size() const { return ranks ? ranks->size() : 1; }
};

// Builds, compiles and warms up every policy on `backend` (--device's, made once by the
// caller), then runs o.repeats interleaved repetitions (policy A, B, ..., A, B, ...), prints
// the table to `out`, writes JSON.
std::vector<BenchResult> run_bench(const BenchOptions& o, std::shared_ptr<Backend> backend,
                                   std::ostream& out);

// The same run driven from outside (`campo bench --lockstep`, for an orchestrator that
// interleaves campo with other frameworks' processes). After building, compiling and
// warming up every policy it writes one JSON line to `protocol`:
//   {"ready": true, "framework": "campo <version>", "model": ..., "array": N, "precisions": [...],
//    "flops_per_step": ..., "gemm_flops_per_step": ..., "params": <trainable parameters>}
// (the FLOPs of the first policy's step), then reads `commands` line by line: "run" runs one
// repetition (each policy in turn, o.steps steps each) and writes
//   {"samples_per_sec": {"<policy>": x, ...}}
// "quit" or the end of the input ends the run: the table goes to `out`, the JSON file (every
// repetition run) is written. Any other command is an error. o.repeats is not used. Every
// protocol line is flushed.
std::vector<BenchResult> run_bench_lockstep(const BenchOptions& o, std::shared_ptr<Backend> backend,
                                            std::istream& commands, std::ostream& protocol,
                                            std::ostream& out);

// An energy window is read at its two ends; the counter stands still between refreshes, so
// each end may miss up to one refresh period's energy: a window of n periods is off by up
// to 2/n. Ten periods (NVML: 1 s; RAPL: 10 ms) bound that to 20%; a shorter window's figure
// is reported as not reliable, with the --steps that would make it long enough.
inline constexpr double kReliableEnergyRefreshes = 10;

// Fills median/min/max, the ratios, the roofline and the energy figures of measured results,
// prints the table, writes JSON. No repetition run: says so, writes an empty JSON array.
std::vector<BenchResult> finish_bench(const BenchOptions& o, std::vector<BenchResult>& results,
                                      const BenchMachine& machine, std::ostream& out);

// The options that need no graph (numbers, the policy names, that the JSON file can be
// written, --for's agreement with --device), checked before a calibration or a graph is
// built; run_bench checks them too. (Bench's backend is made by its caller, once, and given
// to run_bench.)
void check_bench_options(const BenchOptions& o);

}  // namespace campo
