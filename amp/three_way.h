// The cost-aware search over three precisions per node, f32, f16 and bf16 (issue 26): the
// assignment of least predicted step time, casts included, found exactly by one minimum cut.
//
// Cost model. A node costs its predicted time in its type (kNoKernel: it has no kernel in
// that type). A floating value made in type S and read in the set of types T (a consumer's
// f32-only slot reads f32) costs its casts, each paid once per (value, target type):
//   f16 -> f32   when S = f16  and T holds a type other than f16,
//   bf16 -> f32  when S = bf16 and T holds a type other than bf16,
//   f32 -> f16   when f16 is in T and S != f16,
//   f32 -> bf16  when bf16 is in T and S != bf16.
// That is, f16 <-> bf16 goes through f32, and the f32 copy is shared with every f32 reader:
// a value made in f16 and read in f32 and bf16 costs f16 -> f32 + f32 -> bf16. Cast insertion
// must route such a cast the same way for the runtime to run what was priced.
//
// Why exact. Order the labels f16 < f32 < bf16 and write each node's label as two bits,
// u = [label != f16] and w = [label == bf16], with w <= u (Ishikawa's layered graph for three
// labels; Schlesinger & Flach 2006 for the general Monge case). Each cast above is then a term
// of one layer only: f16 -> f32 is "u_p = 0 and some reader's u = 1", f32 -> f16 is "u_p = 1
// and some reader's u = 0", and the same two in w for bf16. "x = 0 and some y = 1" (and its
// mirror) is a submodular term that one helper variable and infinite edges represent exactly
// (the binary search's construction, amp/cost_aware.h); a node's time is
// [u = 0] t_f16 + [u = 1, w = 0] t_f32 + [w = 1] t_bf16, and w <= u one infinite edge. Every
// term is submodular, so the s-t minimum cut (BinaryCut) is the exact minimum over all 3^n
// assignments: O(n + m) variables and edges for n nodes and m value reads, and Dinic's
// max-flow on them (polynomial; a fraction of a second on ResNet-18's training graph).
//
// What it does not cover: a direct f16 <-> bf16 cast priced below the route through f32.
// For one read, c(f16 -> bf16) < c(f16 -> f32) + c(f32 -> bf16) breaks the Monge condition
// theta(f16, f32) + theta(f32, bf16) <= theta(f16, bf16) of the order f16 < f32 < bf16, the
// other orders break it through their f32 casts, and with one equal cost for every cast the
// problem holds 3-terminal multiway cut (a Potts energy), which is NP-hard. So the model
// prices f16 <-> bf16 as the two casts through f32, an upper bound of any direct kernel.
//
// Folded casts (fold_casts) follow the binary search: the search folds a low -> f32 cast only
// where every reader reads f32 whatever the plan; predict_step_ms folds it where every reader
// reads f32 in the plan (as predict_step_ms of amp/cost_aware.h). The two agree on plans
// whose folded values have only fixed-f32 readers, and the search is exact without folding.
// With fold_casts, an f32 -> low cast of a weight the optimizer updates is a weight copy and
// costs nothing (CostAwareOptions), for each low type it is read in.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "amp/cost_aware.h"
#include "amp/lists.h"
#include "graph/graph.h"

namespace campo {

// --low-precision: fp16 and bf16 search {f32, that type} per node (the binary search's plans);
// automatic ("auto") searches {f32, f16, bf16}, f16 only for ops that do not need range.
enum class LowPrecisionMode : uint8_t { fp16, bf16, automatic };
const char* low_precision_mode_name(LowPrecisionMode m);
LowPrecisionMode parse_low_precision_mode(const std::string& s);  // fp16 | bf16 | auto
// The one low type of a mode: f16 for fp16; bf16 for bf16 and for auto (auto's primary type:
// amp paints it, its calibration and GEMM peak are bf16's).
DType low_type_of(LowPrecisionMode m);

// A node's time in a type it has no kernel for.
constexpr double kNoKernel = std::numeric_limits<double>::infinity();

struct NodeCost3 {
  double f32_ms = 0.0, f16_ms = 0.0, bf16_ms = 0.0;  // >= 0, or kNoKernel
  double ms(DType t) const;
};

// One cast model per direction between f32 and each low type; f16 <-> bf16 goes through f32.
struct CastCosts {
  CastCostModel f32_to_f16, f16_to_f32, f32_to_bf16, bf16_to_f32;
  // One cast of `elements` between f32 and a low type (either direction).
  double cost_ms(DType from, DType to, int64_t elements) const;
};

struct ThreeWayCostTable {
  std::vector<NodeCost3> nodes;  // by NodeId; nodes beyond the table cost nothing
  CastCosts casts;
};

// Which types each node may take: a bit per type (f32 always where the node is not free).
enum : uint8_t { kAllowF32 = 1, kAllowF16 = 2, kAllowBF16 = 4 };

struct ThreeWayPlan {
  std::vector<DType> dtype;   // by NodeId: f32, f16 or bf16 (leaves and casts f32)
  double predicted_ms = 0.0;  // predict_step_ms of `dtype`
  int f16_nodes = 0, bf16_nodes = 0;
  // Some node runs in f16: the caller turns dynamic loss scaling on (bf16 has f32's range).
  bool needs_loss_scaling = false;
};

struct ThreeWayOptions {
  LowPrecisionMode mode = LowPrecisionMode::automatic;
  bool fold_casts = false;  // as CostAwareOptions::fold_casts
};

// The types each node may take: f16 where the f16 lists leave it free (cost_aware_free_nodes)
// and, in auto mode, its op does not need range (needs_range); bf16 where the bf16 lists leave
// it free; f32 always. fp16 mode allows no bf16, bf16 mode no f16.
std::vector<uint8_t> allowed_types(const Graph& g, const AmpLists& f16_lists,
                                   const AmpLists& bf16_lists, LowPrecisionMode mode);

// The exact minimum of predict_step_ms over every assignment within `allowed` (by NodeId) and
// the table's kernels. One error line when a node has no type it may run in.
ThreeWayPlan minimize_three_way(const Graph& g, const ThreeWayCostTable& costs,
                                const std::vector<uint8_t>& allowed, bool fold_casts = false);

// allowed_types, then minimize_three_way.
ThreeWayPlan plan_three_way(const Graph& g, const AmpLists& f16_lists, const AmpLists& bf16_lists,
                            const ThreeWayCostTable& costs, const ThreeWayOptions& options = {});

// Predicted step time of `g` with each node in `dtype` (by NodeId), casts included as above;
// kNoKernel where a node runs in a type it has no kernel for.
double predict_step_ms(const Graph& g, const ThreeWayCostTable& costs,
                       const std::vector<DType>& dtype, bool fold_casts = false);

}  // namespace campo
