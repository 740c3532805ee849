// Precision policy files (--precision-policy FILE, docs/mixed-precision.md): rules that set the
// format of training-graph nodes chosen by op type, node-name glob and layer position. The rules
// apply in order, so a later rule overrides an earlier one on the nodes both match. What a rule
// means under each --precision (amp: it replaces the lists' choice; cost-aware: it pins the
// node and the search decides the others) is apply_policy's (train/training_graph.h); here the
// file is read and checked, and the rules are resolved against a graph.
//
// Layers. A model's layers are its trainable GEMMs: the forward Conv2D, Conv2DBackpropInput
// (a transposed convolution), MatMul and BatchMatMulV2 nodes that read a weight the optimizer
// updates, numbered 1..L in the order the model builds them (campo plan's order). A node
// belongs to a layer when it is
//  - the layer's GEMM;
//  - a forward node computed from the layer's output before any later layer's: the layer of
//    a forward node is the largest layer among its own (if it is a GEMM) and its inputs'
//    producers'; so conv1's batch norm, ReLU and pooling are conv1's layer, a residual Add the
//    later of its two branches', the loss the last layer's; nodes before the first GEMM
//    (BERT's embeddings) belong to none;
//  - a backward node of the gradient of such a forward node (graph/autodiff.h's
//    gradient_sources): the layer's data and weight gradients, and its bias/norm gradients.
// Optimizer updates, leaves and casts belong to none: no rule ever sets them (they stay f32).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "runtime/dtype.h"
#include "runtime/gemm_quant.h"

namespace campo {

// One rule of a policy file. A node is selected when it matches every selector given (ops,
// names, layers); within one selector any entry may match.
struct PrecisionRule {
  int index = 0;                   // 1-based, in the file's order
  std::vector<OpKind> ops;         // "op": op names; empty: any op
  std::vector<std::string> names;  // "name": shell globs (* ? [...]) over node names; empty: any
  int first_layers = 0;            // "layers": {"first": N, "last": M}; 0: not given
  int last_layers = 0;
  DType format = DType::f32;  // f32, bf16 or f16 (f32 for a GEMM operand format)
  // A GEMM operand format (fp8, mxfp4, ...: runtime/gemm_quant.h): `gemm.enabled`, with its
  // recipe (the file's "recipe" under the rule's) and rounding. The rule then sets only the
  // GEMMs it selects (is_quantizable_gemm); the other nodes keep their formats. Operands that
  // are gradients take `gradient_element`, the others `forward_element`; gemm.element is
  // filled per node (resolve_precision_policy).
  GemmQuant gemm;
  ElementFormat forward_element = ElementFormat::e4m3;
  ElementFormat gradient_element = ElementFormat::e5m2;
  std::string note;  // "note": the file's words for it, or ""
  bool selects_layers() const { return first_layers > 0 || last_layers > 0; }
  // A short description for plans: "op MatMul, name fc*, first 1 layer -> f32".
  std::string describe() const;
  // The format alone: "f32", or "fp8 (e4m3/e5m2, delayed (history 1024, max, margin 0))".
  std::string format_text() const;
};

struct PrecisionPolicy {
  std::string path;         // the file, for messages
  std::string description;  // "description": the file's words for itself, or ""
  std::vector<PrecisionRule> rules;
  bool sets(DType t) const;  // some rule sets format t
  bool sets_gemm_format() const;  // some rule sets an FP8 / MX format
};

// Reads and checks a policy file. One error line, naming the file and the rule, for: a path that
// is not a readable regular file, text that is not JSON, a key given twice in one object, an
// unknown key, a value of the wrong type, no rules, a rule without a selector, an unknown op
// name or one that always runs in f32 (leaves, casts, optimizer updates), an empty glob, a layer
// count that is not a positive integer, an unknown format, a format campo knows but cannot
// compute in (FP6 / FP4 per tensor, element names alone: docs/formats.md), a "recipe" or
// "rounding" that is malformed or does not fit the format (per-tensor scaling for an MX
// format, "history" without delayed scaling, ...), a GEMM format on a rule whose "op" names
// an op that is not a GEMM.
PrecisionPolicy read_precision_policy(const std::string& path);
// The same checks on JSON text (`path` names it in messages).
PrecisionPolicy parse_precision_policy(const std::string& text, const std::string& path);

// The format names a rule may give, for messages and help: "f32, bf16 or f16".
const char* policy_format_names();

// The layers of a training graph (before casts), as the file comment defines them.
struct ModelLayers {
  std::vector<NodeId> gemms;  // layer k is gemms[k - 1]
  std::vector<int> layer_of;  // by NodeId: 1..L, or 0 for none
  int count() const { return int(gemms.size()); }
};
ModelLayers model_layers(const Graph& g);

// Whether a rule may set node n's format: nodes with kernels, but not casts, optimizer
// updates, the finiteness check or data-parallel reductions (AmpLists::may_be_listed).
bool rule_may_set(const Node& n);

// The rules resolved against a training graph before casts.
struct PolicyAssignment {
  std::vector<int> rule;       // by NodeId: the index of the last rule selecting it, 0 for none
  std::vector<DType> dtype;    // by NodeId: that rule's format; f32 where rule is 0
  std::vector<GemmQuant> quant;  // by NodeId: the GEMM operand format (enabled) or none
  std::vector<int> nodes_set;  // by rule index - 1: the nodes whose format the rule sets in the end
  int layers = 0;              // the graph's layer count
  bool is_set(NodeId id) const { return rule[size_t(id)] > 0; }
  bool any() const;
};
// One error line, naming the file and the rule, for a rule that selects no node of `g` (a glob
// or an op that matches nothing, or selectors that match nothing together) and a layer count
// beyond the graph's layers.
PolicyAssignment resolve_precision_policy(const Graph& g, const PrecisionPolicy& policy);
// A quantized GEMM node's operand elements: `gradient` for an operand the backward pass makes
// (the dY of data and weight gradients), `forward` for the others (activations, weights).
void set_operand_elements(const Graph& g, const Node& node, ElementFormat forward,
                          ElementFormat gradient, GemmQuant& q);

}  // namespace campo
