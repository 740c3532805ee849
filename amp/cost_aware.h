// The cost-aware policy (Campo): low precision only where the predicted gain beats the
// cost of the casts it needs. The traversals see a CostTable (per-node predicted times in
// f32 and in low precision, and a cast cost model) and the graph; never kernels.
//
// Cost of a node in a precision = its predicted time in that precision + the casts that
// precision would need at its boundary given the neighbours' current precisions: every
// floating input produced in the other precision needs a cast (a value's cast is paid
// once, however many nodes read it), and so does every output read by a node that is
// decided in the other precision.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "amp/lists.h"
#include "graph/graph.h"

namespace campo {

// Cast time = fixed_ms + per_element_ms * n, fitted by least squares (fit_cast_model).
struct CastCostModel {
  double fixed_ms = 0.0;
  double per_element_ms = 0.0;
  double cost_ms(int64_t elements) const { return fixed_ms + per_element_ms * double(elements); }
};

// Least-squares fit of time = C + r * n over (n, time) samples (>= 2 distinct sizes).
CastCostModel fit_cast_model(const std::vector<std::pair<int64_t, double>>& samples);

struct NodeCost {
  double fp32_ms = 0.0;
  double low_ms = 0.0;
  // --allow-fp8: the node as a GEMM on FP8 operands (Node::quant, the "fp8" format), its
  // operands' quantization included (of which fp8_quantize_ms); infinite where it cannot run
  // so (not a GEMM, or a device without FP8 GEMMs). Such a node computes in f32 on quantized
  // operands: a form of the f32 label, which the search prices at min(fp32_ms, fp8_ms).
  double fp8_ms = std::numeric_limits<double>::infinity();
  double fp8_quantize_ms = 0.0;
};

// What the profiling step found when it compared its measured f32 node times with the f32
// times the calibration predicts for them (amp/calibration.h's f32_agreement): the run's
// banner says `line` when the calibration was not used or not checked, and its result JSON
// records the numbers. `none`: no calibration was given to check.
struct CalibrationFit {
  enum class Verdict : uint8_t { none, fits, misfit, unchecked };
  Verdict verdict = Verdict::none;
  int nodes = 0;                             // nodes compared
  double median_ratio = 0, total_ratio = 0;  // measured / predicted
  std::string line;                          // one line for the run's log; empty for `none`
};
const char* verdict_name(CalibrationFit::Verdict v);  // "none", "fits", "misfit", "unchecked"

struct CostTable {
  std::vector<NodeCost> nodes;  // by NodeId; nodes beyond the table cost nothing
  // By NodeId (may be empty): low_ms was timed in the profiling step rather than predicted
  // by a calibration's model (untrusted_nodes, amp/calibration.h). For plans only.
  std::vector<char> low_measured;
  CastCostModel cast;  // f32 -> low, and low -> f32 unless cast_to_f32 is set
  // low -> f32 when the two directions cost differently (on the Zen 4 CPU of this project
  // f32 -> bf16 costs ~2x bf16 -> f32 per element; the paper's GPU had them equal).
  std::optional<CastCostModel> cast_to_f32;
  // Where the calibration's models use hardware counters: whether the profiling step read
  // them ("read (CUPTI range profiler, 2 passes)") or not ("unavailable (<why>): predicted
  // from the analytic features"); empty otherwise. For plans and the run's banner.
  std::string hardware_counters;
  // With a calibration: whether it agreed with this graph's measured f32 times, and so was
  // used (fits, unchecked) or replaced by timing both precisions (misfit).
  CalibrationFit calibration;
  double cast_ms(bool to_low, int64_t elements) const {
    return (!to_low && cast_to_f32 ? *cast_to_f32 : cast).cost_ms(elements);
  }
};

// Which traversal decided a node (for plans): 0 = default f32.
// `exact`: changed by the exact search after the traversals. `rule`: pinned by a precision
// policy file's rule (CostAwareOptions::pins), which no traversal or search changes.
enum class Traversal : uint8_t {
  none = 0,
  allow = 1,
  deny = 2,
  neighbour = 3,
  clear_chain = 4,
  exact = 5,
  rule = 6
};
const char* traversal_name(Traversal t);

struct CostAwarePlan {
  std::vector<char> low;  // by NodeId: runs in low precision
  // --low-precision auto (amp/three_way.h): by NodeId, the type each node runs in (f32, f16
  // or bf16; `low` is then "not f32"). Empty for a plan over one low type.
  std::vector<DType> dtype;
  std::vector<Traversal> decided_by;  // by NodeId
  // --allow-fp8: by NodeId, an f32-labelled GEMM that runs on FP8 operands (empty: none).
  std::vector<char> fp8;
  double predicted_ms = 0.0;          // predicted step time with casts
  double traversals_ms = 0.0;         // the same for the four traversals' plan alone
  int exact_changes = 0;              // nodes the exact search flipped
};

// How the plan is searched.
//  traversals: the paper's four greedy traversals, as below.
//  exact: the traversals, then the assignment of least predicted step time over the same
//    free nodes (allow/infer/clear ops that deny propagation left alone), found exactly as
//    a minimum cut: node times are unary terms, and a value's cast (paid once, however
//    many consumers need it) is a pair term through one helper variable per direction.
//    The traversals decide one node or region at a time with its neighbours' current
//    precisions, so an allow op whose neighbours become low only later can stay f32 with
//    casts around it; the exact search cannot do worse than them, nor than the amp or
//    fp32 assignment, under the same costs. Ties go to fewer casts (each cast counts
//    kCastTieBreakMs more in the search only).
enum class CostAwareSearch : uint8_t { traversals, exact };
constexpr double kCastTieBreakMs = 1e-6;
const char* search_name(CostAwareSearch s);
CostAwareSearch parse_search(const std::string& s);  // "traversals" or "exact"

// The four traversals over the graph in data-flow order:
//  1. allow-list ops: low where cost(low) < cost(f32);
//  2. deny ops and everything downstream of them through infer/clear ops up to the next
//     deny/infer op: f32 (as the amp policy's deny propagation);
//  3. remaining infer/clear ops with a low-precision neighbour: low where
//     cost(low) <= cost(f32) (adopting removes boundary casts). Tried first for each whole
//     region of infer/clear ops connected through infer/clear ops that holds an infer op
//     (with a fixed cost per cast, a run between two low nodes often pays only as a
//     whole), then node by node;
//  4. chains of clear ops connected (through clear ops) to a low-precision node: low
//     when the whole chain costs less in low precision, its boundary casts included.
struct CostAwareOptions {
  CostAwareSearch search = CostAwareSearch::exact;
  // The runtime folds a low -> f32 cast into its producer where the producer's op can write
  // f32 (OpSchema::can_write_f32_output) and every consumer reads f32 (apply_precision):
  // such a cast costs nothing. In the exact search only where every consumer is f32
  // whatever the plan (optimizer updates: weight gradients). Likewise the f32 -> low cast
  // of a weight the graph's optimizer updates, which becomes a weight copy that update
  // writes (Node::weight_copy).
  bool fold_casts = false;
  // By NodeId (empty: none): kUnpinned, or the precision a precision policy file's rule pins
  // the node to (kPinnedF32, kPinnedLow). Pinned nodes are constraints: the traversals and the
  // search keep them and decide the others around them (their casts included), whatever list
  // the node's op is on (a pinned deny op runs low too).
  std::vector<int8_t> pins;
};
constexpr int8_t kUnpinned = -1, kPinnedF32 = 0, kPinnedLow = 1;
CostAwarePlan plan_cost_aware(const Graph& g, const AmpLists& lists, const CostTable& costs,
                              const CostAwareOptions& options = {});

// Shared with the three-way search (amp/three_way.h):
// Traversal 2's nodes: deny ops and what deny propagates to, forward through infer ops and
// through clear ops that lead into deny/infer ops (the amp policy's rule).
std::vector<char> deny_painted(const Graph& g, const AmpLists& lists);
// The nodes the exact search may make low under `lists`: allow/infer/clear ops that deny
// propagation left alone (no leaves, no casts).
std::vector<char> cost_aware_free_nodes(const Graph& g, const AmpLists& lists);
// Output i of a node runs in the node's precision: output 0 always; Dropout's mask and every
// piece of a SplitV too. Other extra outputs (batch-norm statistics, max-pool indices) keep
// their own type.
bool output_follows_node(const Node& n, int output_index);
// A low -> f32 cast of this output can be folded into its producer (CostAwareOptions).
bool cast_folds_into_producer(const Node& producer, int output_index);

// Predicted step time of `g` with `low` nodes in low precision (casts included).
double predict_step_ms(const Graph& g, const CostTable& costs, const std::vector<char>& low,
                       bool fold_casts = false);

}  // namespace campo
