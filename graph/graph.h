// The static dataflow graph: nodes (ops with typed attributes) producing values.
// Invariant: nodes are stored in insertion order and every node's inputs are produced by
// earlier nodes, so node-id order is a valid topological order. Optimizer updates are
// appended last, after every read of the variables they write.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "ops/op.h"
#include "ops/schema.h"

namespace campo {

struct Value {
  Shape shape;
  DType dtype = DType::f32;
  NodeId producer = -1;
  int output_index = 0;
};

// Where in the training step a node belongs (for plans and reports).
enum class Phase : uint8_t { forward, backward, update };

// A node: what its schema sees (OpNode: kind, name, attrs, inputs, outputs, compute dtype)
// and what only graph code and its users read.
struct Node : OpNode {
  Phase phase = Phase::forward;
  // Padding request of the cost-aware policy (amp/padding.h): 0 = none; p > 0 = the kernel
  // runs the op on operands zero-padded to multiples of p in its GEMM dimensions (MatMul)
  // or channels (the convolutions) and hands back the valid part, so shapes and results
  // seen by the graph do not change. Only kernels that implement it read it (low-precision
  // MatMul, ops/cpu/matmul.cc; low-precision convolutions, ops/conv_padding.h); others
  // ignore it.
  int pad_to = 0;
  // A cast folded into the node (the cost-aware policy, amp/policy.h): the node computes in
  // `dtype` and writes output 0 in f32, so that its f32 consumers need no Cast. Only for
  // ops whose schema says can_write_f32_output (their kernels read the output's dtype).
  bool f32_output = false;
  // A Cast of a variable whose result persists across steps (the cost-aware policy,
  // amp/policy.h): the optimizer update of that variable rewrites it after each update
  // (its weight-copy input, ops/optimizer.cc), so the executor runs the Cast itself only
  // when the variables may have been changed from outside the step (VariableStore::
  // generation): before the first step and after a checkpoint load.
  bool weight_copy = false;
  // A GEMM whose operands are quantized to an FP8 or MX format (runtime/gemm_quant.h; set by
  // a --precision-policy rule): it computes in `dtype` (f32) on its operands' decoded codes.
  // Its per-operand state lives in the VariableStore under gemm_quant_state_name(name, i).
  GemmQuant quant;
};

// Graph implements ValueDescs so that op schemas (ops/schema.h) read its values' shapes.
class Graph final : public ValueDescs {
 public:
  // Adds a node, runs the op's shape inference and creates its output values.
  NodeId add_node(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, std::string name,
                  DType dtype = DType::f32, Phase phase = Phase::forward);

  const Node& node(NodeId id) const { return nodes_.at(size_t(id)); }
  Node& node(NodeId id) { return nodes_.at(size_t(id)); }
  const Value& value(ValueId id) const { return values_.at(size_t(id)); }
  Value& value(ValueId id) { return values_.at(size_t(id)); }
  const Shape& shape(ValueId id) const override { return value(id).shape; }
  DType dtype(ValueId id) const override { return value(id).dtype; }
  int num_nodes() const { return int(nodes_.size()); }
  int num_values() const { return int(values_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Nodes that read the value, in id order.
  std::vector<NodeId> consumers(ValueId v) const;
  // Finds a Placeholder / Variable node by name; -1 when absent.
  NodeId find_node(const std::string& name) const;
  std::vector<NodeId> nodes_of_kind(OpKind kind) const;

  // Re-runs shape/dtype inference of one node after its dtype or inputs changed.
  void reinfer(NodeId id);
  // Replaces input `slot` of node `consumer` with value `v`.
  void set_input(NodeId consumer, int slot, ValueId v);
  // A topological order of all nodes (stable: id order where dependencies allow). Nodes
  // added after the fact (casts) are placed right before their first consumer;
  // AllReduceStart (and casts only it reads) as soon as its inputs exist.
  std::vector<NodeId> topological_order() const;

  std::string to_text() const;
  std::string to_dot() const;

  // Unique name: appends ".1", ".2", ... when taken.
  std::string unique_name(const std::string& base);

 private:
  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::map<std::string, NodeId> names_;
};

// The nodes a step that fetches `fetches` runs: those the fetched values and the
// side-effecting nodes (optimizer updates) depend on, by node id. The others are dead
// code, which the compiler removes.
std::vector<char> live_nodes(const Graph& g, const std::vector<ValueId>& fetches);

inline TensorDesc desc_of(const Graph& g, ValueId v) {
  return {g.value(v).shape, g.value(v).dtype};
}

}  // namespace campo
