// Calibration of the cost-aware policy (DESIGN.md "The cost-aware policy", steps 2 and 3):
// per-op models of the low-precision time of a node from what an FP32 step shows,
//   T_lp = sum_i w_i * PC_i + sigma * T_fp32 + bias,
// where the PC_i are node features known without timing (analytic FLOPs, bytes moved,
// arithmetic intensity, output elements, the oneDNN fast-path alignment) whose Spearman
// |rho| with T_lp over the calibration samples exceeds 0.75. A Calibration holds one model
// per op type (and per aligned / unaligned GEMM path where both have enough samples), the
// cast model, the identity of the machine it was measured on (the backend's, runtime/backend.h:
// stored and compared field by field, whatever the device) and the campo version that
// measured it; it is saved as versioned JSON and refused when corrupt, made on another
// machine, or stale.
//
// Hardware counters: where the device reads them per node (runtime/hardware_counters.h;
// CUDA: CUPTI's range profiler), they are features too, selected by the same Spearman test;
// a model that selects one keeps the analytic-only model beside it for nodes whose counters
// are not read (OpModel::analytic). What the calibration found is recorded in the file
// (`hardware_counters`): the counters read, or why none were (then analytic features are all
// the models use).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "amp/cost_aware.h"
#include "amp/lists.h"
#include "amp/shape_model.h"
#include "graph/graph.h"
#include "runtime/backend.h"
#include "runtime/hardware_counters.h"

namespace campo {

// Version 2 added the shape fits (amp/shape_model.h, OpModel::shape); version 1 files, which
// have none, still load.
constexpr int kCalibrationVersion = 2;
constexpr int kOldestCalibrationVersion = 1;

// ---- node features ----

// The analytic features, known from the graph, then the hardware counters of the node in the
// f32 profiling step (runtime/hardware_counters.h, in Counter's order), known where the
// device reads them (NaN where it does not).
enum class Feature : uint8_t {
  flops,
  bytes,
  intensity,
  elements,
  aligned,
  dram_bytes,
  achieved_occupancy,
  tensor_pipe,
  l2_hit_rate,
  instructions,
  kCount
};
constexpr int kNumFeatures = int(Feature::kCount);
constexpr int kFirstCounterFeature = int(Feature::dram_bytes);
static_assert(kNumFeatures - kFirstCounterFeature == kNumCounters);
// Feature repeats Counter's members in Counter's order (feature_name reads counter_name).
static_assert(int(Feature::achieved_occupancy) - kFirstCounterFeature ==
              int(Counter::achieved_occupancy));
static_assert(int(Feature::tensor_pipe) - kFirstCounterFeature == int(Counter::tensor_pipe));
static_assert(int(Feature::l2_hit_rate) - kFirstCounterFeature == int(Counter::l2_hit_rate));
static_assert(int(Feature::instructions) - kFirstCounterFeature == int(Counter::instructions));
// "flops", "bytes", "intensity", "elements", "aligned", then the counters' names.
const char* feature_name(Feature f);
Feature parse_feature(const std::string& name);  // throws on an unknown name
constexpr bool is_counter(Feature f) { return int(f) >= kFirstCounterFeature; }

// Features of one node, indexed by Feature.
//   flops     conv family 2 * N*K*Ho*Wo * (C/groups)*R*S (the same count for both
//             backprops); MatMul 2*M*N*K; BatchMatMulV2 2*B*M*N*K (B the product of the
//             batch dims); pooling output (or dy) elements * window area;
//             GatherV2 output elements (copies); UnsortedSegmentSum data + output elements;
//             every other op max(input, output) elements.
//   bytes     every input and output at 4 bytes (f32), whatever the node's dtype; GatherV2
//             counts the rows it reads (as many as it writes) instead of the whole params.
//   intensity flops / bytes.
//   elements  elements of output 0.
//   aligned   1 when the GEMM dimensions ((Batch)MatMul M, N, K; conv input and output channels)
//             are multiples of `alignment`, else 0; for other ops the channel dimension
//             (dim 1 of a 4-D output, the last of a 2-D one, else all elements). The
//             alignment is the device's fast-path block (Backend::padding_alignment: 16 for
//             oneDNN's AVX-512 BF16 on the CPU, 8 for tensor cores on CUDA), so that nothing
//             device-specific is fixed here.
// The counter features are NaN (unread) unless `counters` gives them.
using NodeFeatures = std::array<double, kNumFeatures>;
NodeFeatures node_features(const Graph& g, NodeId id, int alignment,
                           const CounterValues& counters = unread_counters());

// ---- statistics ----

// Spearman's rank correlation, ties given their average rank. 0 when either side is
// constant (no ranking) or there are fewer than two samples.
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// Weighted least squares: the x minimising sum_r weights[r] * (rows[r] . x - y[r])^2
// (weights empty: all 1). Columns are scaled to unit RMS and solved by Householder QR;
// a column that is (numerically) a combination of earlier ones gets coefficient 0.
// Needs rows.size() >= 1 and every row of the same length (<= ~8 unknowns in practice).
std::vector<double> least_squares(const std::vector<std::vector<double>>& rows,
                                  const std::vector<double>& y,
                                  const std::vector<double>& weights = {});

// Mean absolute percentage error of predictions against truths (truths > 0), in percent.
double mape_percent(const std::vector<double>& predicted, const std::vector<double>& truth);

// The median (the mean of the middle two for an even count); needs at least one value.
double median_of(std::vector<double> v);

// ---- per-op models ----

// One calibration sample: a node measured in both precisions.
struct OpSample {
  NodeFeatures features{};
  double fp32_ms = 0, low_ms = 0;
  NodeShape shape;  // for the shape fits; unknown (a default NodeShape): none is fitted
  // Samples of one group are left out together when the fits are cross-validated (the
  // calibration: the configuration's batch size, as whole batch sizes are held out).
  int64_t group = 0;
};

struct OpModel {
  std::string key;                // OpKind name, or "<name>:unaligned" for the slow GEMM path
  std::vector<Feature> features;  // selected: Spearman |rho| with T_lp > kFeatureRhoThreshold
  std::vector<double> rho;        // their rho over the training samples
  std::vector<double> weights;    // their coefficients (ms per unit of the feature)
  double sigma = 1.0;             // coefficient of T_fp32
  double bias = 0.0;              // ms
  // How it was fitted: "features" (the full model), "sigma+bias" (too few samples for the
  // features), "ratio" (T_lp = sigma * T_fp32 only: fewer samples still); or by shape,
  // "shape-features" / "shape-table" (`shape` holds it; sigma 1, bias 0, no features).
  std::string fit = "features";
  std::shared_ptr<const ShapeModel> shape;
  bool is_shape_fit() const { return shape != nullptr; }
  int train_samples = 0, heldout_samples = 0;
  double heldout_mape = -1;  // percent; -1 when nothing was held out
  double train_mape = -1;

  // A model that uses counter features also holds the model of the analytic features
  // alone, fitted on the same samples: what predicts a node whose counters were not read
  // (a device or a run that reads none).
  std::shared_ptr<const OpModel> analytic;
  bool uses_counters() const;
  // The model that predicts a node of features `f`: this one, or `analytic` where a counter
  // feature it uses is unread in `f`.
  const OpModel& for_features(const NodeFeatures& f) const;

  // >= 0; through `analytic` where a counter feature it uses is unread in `f`. A shape fit
  // needs the node's shape (an internal error without it: every caller has the node).
  double predict_low_ms(const NodeFeatures& f, double fp32_ms,
                        const NodeShape* shape = nullptr) const;
};

constexpr double kFeatureRhoThreshold = 0.75;

// Fits T_lp by weighted least squares with weights 1/T_lp^2 (i.e. on relative error, as
// MAPE is what is reported), features selected on `train`; `heldout` only scores it.
// Fewer than max(8, 3 * unknowns) samples: sigma and bias only; fewer than 4: the ratio.
// A fit whose sigma comes out <= 0, or whose bias is below kMinOpModelBiasMs (noisy timings:
// it would predict 0 ms for every small op, and a file holding it is refused on load),
// falls back the same way.
inline constexpr double kMinOpModelBiasMs = -1.0;
OpModel fit_op_model(const std::string& key, const std::vector<OpSample>& train,
                     const std::vector<OpSample>& heldout);

// ---- per-op models by shape (amp/shape_model.h) ----

// The shape fits of one family's samples (known shapes, times > 0). "features" needs
// min_shape_feature_samples (max(24, 4 x its terms)) samples; with fewer it returns a model
// without a form. "table": one sample is enough.
int min_shape_feature_samples(ShapeFamily f);
ShapeModel fit_shape_features(const std::vector<ShapeSample>& train);
ShapeModel fit_shape_table(const std::vector<ShapeSample>& train);

// The three forms of one op model side by side: the linear model of the analytic features
// (fit_op_model), the shape features and the shape table. Each one's MAPE over a
// cross-validation on the training samples (kShapeFolds folds of whole groups: batch sizes),
// which chooses, and on the held-out samples, which is reported. -1: not fitted (too few
// samples or groups, shapes unknown) or nothing to score.
enum class FitForm : uint8_t { linear, shape_features, shape_table };
constexpr int kFitForms = 3;
const char* fit_form_name(FitForm f);  // "linear", "shape-features", "shape-table"
constexpr int kShapeFolds = 4;
struct FitComparison {
  std::string key;
  int train_samples = 0, heldout_samples = 0;
  std::array<double, kFitForms> cv_mape{-1, -1, -1}, heldout_mape{-1, -1, -1};
  FitForm chosen = FitForm::linear;
};
// fit_op_model, and where every sample has a shape, the two shape fits; the form with the
// lowest cross-validated MAPE is returned (ties and anything not cross-validated: the linear
// one). A linear model that uses hardware counters is kept as it is (its counters say what
// a shape would). `comparison`, when given, receives the scores.
OpModel fit_op_model_by_shape(const std::string& key, const std::vector<OpSample>& train,
                              const std::vector<OpSample>& heldout,
                              FitComparison* comparison = nullptr);

// ---- f32 models: what the profiling step checks a calibration with ----

// An op's f32 time from its analytic features, T_f32 = a * flops + b * bytes + c (a, b, c >= 0),
// fitted on the calibration's samples of that op (weights 1/T_f32^2, as the op models). Not
// used to decide anything: the profiling step and `campo calibrate --check` compare measured
// f32 times with it to see whether the calibration still describes this machine
// (f32_agreement). Files made before these models have none (then nothing is checked).
struct F32Model {
  std::string key;  // OpKind name (both GEMM paths together)
  double per_flop_ms = 0, per_byte_ms = 0, fixed_ms = 0;
  int train_samples = 0, heldout_samples = 0;
  double heldout_mape = -1;                        // percent; -1 when nothing was held out
  double predict_ms(const NodeFeatures& f) const;  // > 0
};
// Needs a non-empty `train` with positive f32 times.
F32Model fit_f32_model(const std::string& key, const std::vector<OpSample>& train,
                       const std::vector<OpSample>& heldout);

// Measured against predicted times of many nodes. The rule that a calibration fits: at least
// kMinAgreementNodes nodes of kMinAgreementMs or more, and both the median of the per-node
// ratios measured / predicted and the ratio of the totals within [kMinFitRatio,
// kMaxFitRatio]. Why 2x: the models' held-out error is ~17% (docs/mixed-precision.md) and a
// calibration refused above 10% spread; a factor of 2 on the median of many nodes is beyond
// what either explains, and is what a machine twice as busy or a different CPU gives.
inline constexpr double kMinFitRatio = 0.5, kMaxFitRatio = 2.0;
inline constexpr int kMinAgreementNodes = 5;
inline constexpr double kMinAgreementMs = 0.005;  // below: timer resolution
struct Agreement {
  int nodes = 0;
  double median_ratio = 0, total_ratio = 0;  // measured / predicted
  bool checked() const { return nodes >= kMinAgreementNodes; }
  bool fits() const;  // checked and both ratios within the rule
  // "median 1.04x, total 0.97x over 41 nodes"
  std::string describe() const;
};
// Pairs with measured < kMinAgreementMs are left out.
Agreement agreement_of(const std::vector<double>& measured, const std::vector<double>& predicted);

// ---- the calibration file ----

// A cast fit with how well it fits its own samples.
struct CastFit {
  CastCostModel model;
  int samples = 0;
  double mape = -1;  // percent over the samples it was fitted on
};

// C_I + r * n by weighted least squares on relative error (weights 1/t^2, as the op
// models): small casts, whose fixed cost matters when there are many, count as much as
// large ones. Needs samples of >= 2 distinct sizes (else samples = 0 and a zero model).
// A line with a negative slope or an intercept below kMinOpModelBiasMs (noise) becomes
// the proportional fit r * n.
CastFit fit_cast_relative(const std::vector<std::pair<int64_t, double>>& samples);

// How a calibration was made (issue 50): how noisy its measurements were and the limits it
// passed; the date, the duration and the CPU are the file's `created`, `seconds` and
// machine's. `recorded` is false for a file written before campo recorded this (it loads;
// plan and `calibrate --check` say it carries no noise record).
struct CalibrationRecord {
  bool recorded = false;
  int repeats = 0;       // timed steps of each measurement (a node's time: its fastest)
  int cores = 0;         // logical cores this process could run on
  int measurements = 0;  // configurations and cast sizes kept
  int redone = 0;        // measurements redone because they were too noisy
  // Cores' worth of CPU that other processes used while it measured: the mean over the
  // measurements kept and the worst one's; -1: unknown (no /proc/stat).
  double load = -1, max_load = -1;
  // Disagreement between repeats: (median - fastest) / fastest of a measurement's step times;
  // the median over the measurements kept and the worst one's.
  double repeat_spread = 0, max_repeat_spread = 0;
  // Identical shapes: mean |t - median| / median of the low times of GEMM nodes (convolutions,
  // matmuls) with identical features (groups of 3 or more); -1: no such group.
  double shape_spread = -1;
  // The limits it passed: load as a fraction of `cores`, spreads as fractions.
  double max_load_fraction = 0, max_spread = 0, max_shape_spread = 0;
};
// One line: "5 repeats, load 0.12 of 2 cores (max 0.30), spread 2.1% (max 4.0%), shapes
// 6.3%, 1 of 12 measurements redone" or "no noise record (made before campo recorded load
// and spread)".
std::string describe_record(const CalibrationRecord& r);

struct Calibration {
  int version = kCalibrationVersion;
  // The machine it was measured on: the file's `device` (machine.kind) and `machine` object
  // (machine.fields, each stored as a string; numbers and booleans of older files read as
  // their decimal / "true" / "false" text). A file read back holds the fields' values only
  // (is_version and set_by are the running backend's to say).
  BackendIdentity machine;
  // CAMPO_VERSION of the campo that measured and fitted it: the calibration's own, not the
  // machine's (the same code measures every device), so it sits beside the identity, and a
  // different one makes the file stale.
  std::string campo_version;
  DType low = DType::bf16;
  std::string created;            // UTC, ISO 8601
  std::string hardware_counters;  // read per node, and by what; or why not (calibrate's line)
  // The `aligned` feature's block (node_features): the measuring backend's
  // padding_alignment. Files without it were CPU calibrations: 16.
  int alignment = 16;
  CastCostModel cast;  // both directions together (what the policy uses)
  CastFit cast_all, cast_to_low, cast_to_f32;
  std::map<std::string, OpModel> ops;       // by OpModel::key
  std::map<std::string, F32Model> f32_ops;  // by op name; empty in older files
  CalibrationRecord record;
  // What was measured (for the report; not checked on load).
  int configurations = 0, heldout_configurations = 0;
  double seconds = 0;

  // The model for a node: "<op>:unaligned" for an unaligned node when that model exists,
  // else "<op>"; null when the op has none.
  const OpModel* model_for(OpKind kind, const NodeFeatures& f) const;
  // The f32 model of `kind`, or null.
  const F32Model* f32_model_for(OpKind kind) const;
};

// Writes versioned JSON through write_file_atomically (checks every number is finite, and
// that the models are plausible: what is written always loads).
void save_calibration(const Calibration& cal, const std::string& path);

// Why a file cannot be used.
enum class CalibrationProblem : uint8_t { none, missing, corrupt, foreign, stale };
struct CalibrationCheck {
  CalibrationProblem problem = CalibrationProblem::none;
  std::string message;  // one line naming the file, the problem and how to recalibrate
  std::string what;     // the problem alone ("is stale (made with ...)"); for notes
};
// Reads `path` into `out` without comparing it with any machine; never throws for problems
// of the file itself (they are returned). `missing`: not a readable regular file (a FIFO or
// a directory is refused unread). `corrupt`: not JSON, a field missing, ill-typed or out of
// range, or a model no fit on real timings produces (sigma <= 0, a bias below -1 ms, a
// negative cast cost, ...: the rules are at check_plausible in calibration.cc); the message
// names the field, e.g. "implausible ops[MatMul].sigma = -1". `stale`: another format
// version. `device` only names the device in the advice ("run `campo calibrate --device
// cuda` to recalibrate").
CalibrationCheck read_calibration_file(const std::string& path, const std::string& device,
                                       Calibration& out);
// read_calibration_file, then the file against `machine` and `campo_version`: `foreign` when
// made for another device kind or on a machine whose identity differs in a field that is not
// a version (or that one of the two lacks); `stale` when made by another campo or with
// another library version. The message names the field and both values, e.g. "was made on
// another machine (cpu_model 'AMD EPYC' in the file, 'Intel Xeon' here)". On success `out`
// holds `machine` itself (the same values, with their is_version and set_by).
CalibrationCheck read_calibration(const std::string& path, const BackendIdentity& machine,
                                  Calibration& out,
                                  const std::string& campo_version = CAMPO_VERSION);
// read_calibration against `backend`'s identity and this campo; throws campo::Error with the
// check's message.
Calibration load_calibration(const std::string& path, const Backend& backend);

// Whether a node may run in low precision at all: an allow/infer/clear op, not a leaf.
bool may_run_low(const Node& n, const AmpLists& lists);

// Held-out MAPE above which an op model is not trusted (untrusted_nodes).
constexpr double kUntrustedMapePercent = 30.0;

// The nodes of g that may run low whose low-precision time the calibration says it cannot
// predict: no model for the op (or its GEMM path), a model without a held-out score, or
// one whose held-out MAPE exceeds kUntrustedMapePercent. The profiling step times these
// in low precision instead (train/profiling.h); on this project's CPU they are the
// filter gradients of unaligned convolutions (LeNet's 1-channel conv1: 3x slower in bf16,
// which no model of these features predicts), BiasAdd and a few small ops.
// `counters`: the nodes' hardware counters where read (by node id; empty: none), so that a
// model using them is judged, and predicts, as itself rather than as its analytic model.
std::vector<char> untrusted_nodes(const Graph& g, const Calibration& cal, const AmpLists& lists,
                                  const std::vector<CounterValues>& counters = {});

// The cost table of g (a graph without casts) from its measured f32 node times (and its
// nodes' counters where read, as above): low_ms predicted for every allow/infer/clear node
// that has a model, = fp32_ms otherwise; the cast model from the calibration.
CostTable predict_costs(const Graph& g, const std::vector<double>& fp32_ms, const Calibration& cal,
                        const AmpLists& lists, const std::vector<CounterValues>& counters = {});
// The profiling step's check of a calibration: the measured f32 times of g's nodes (by node
// id; 0: not run) against the calibration's f32 models, over the nodes whose op has one.
Agreement f32_agreement(const Graph& g, const std::vector<double>& fp32_ms, const Calibration& cal);
// The verdict and line of `a` for a run (CostTable::calibration): fits, misfit (the run then
// times both precisions), or unchecked (too few nodes, or a file without f32 models).
CalibrationFit calibration_fit(const Agreement& a, const Calibration& cal);

// Whether any op model of `cal` uses hardware counters (then the profiling step reads them
// where the device can, train/profiling.cc).
bool uses_counters(const Calibration& cal);

}  // namespace campo
