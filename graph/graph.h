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

namespace campo {

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;

struct Value {
  Shape shape;
  DType dtype = DType::f32;
  NodeId producer = -1;
  int output_index = 0;
};

// Where in the training step a node belongs (for plans and reports).
enum class Phase : uint8_t { forward, backward, update };

struct Node {
  OpKind kind;
  std::string name;
  Attrs attrs;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  DType dtype = DType::f32;  // compute type; set by mixed-precision policies
  Phase phase = Phase::forward;
  // Padding request of the cost-aware policy (amp/padding.h): 0 = none; p > 0 = the kernel
  // runs the op on operands zero-padded to multiples of p in its GEMM dimensions and hands
  // back the valid part, so shapes and results seen by the graph do not change. Only
  // kernels that implement it read it (bf16 MatMul, ops/cpu/matmul.cc); others ignore it.
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
};

class Graph {
 public:
  // Adds a node, runs the op's shape inference and creates its output values.
  NodeId add_node(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, std::string name,
                  DType dtype = DType::f32, Phase phase = Phase::forward);

  const Node& node(NodeId id) const { return nodes_.at(size_t(id)); }
  Node& node(NodeId id) { return nodes_.at(size_t(id)); }
  const Value& value(ValueId id) const { return values_.at(size_t(id)); }
  Value& value(ValueId id) { return values_.at(size_t(id)); }
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
  // added after the fact (casts) are placed right before their first consumer.
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

// ---- op schemas: everything graph code knows about an op ----

class Builder;

// Output descriptions from the node (inputs are in the graph).
using InferFn = std::vector<TensorDesc> (*)(const Graph& g, const Node& n);
// Gradients of the node's inputs given gradients of its outputs (kNoValue where none
// flows). Returns one entry per input, kNoValue for non-differentiable inputs.
using GradFn = std::vector<ValueId> (*)(Builder& b, const Node& n,
                                        const std::vector<ValueId>& output_grads);

struct OpSchema {
  OpKind kind;
  AmpList amp_list = AmpList::fp32;
  int num_inputs = -1;  // -1: variadic
  InferFn infer = nullptr;
  GradFn gradient = nullptr;  // nullptr: no gradient flows through (labels, optimizers)
  bool is_tensor_core_candidate = false;
  bool has_side_effects = false;  // never removed by dead-code elimination
  std::vector<int> fp32_inputs;   // inputs that stay f32 when the node runs in low precision
  // Its low-precision kernels can write output 0 in f32 (Node::f32_output).
  bool can_write_f32_output = false;

  bool input_stays_f32(int slot) const {
    return std::find(fp32_inputs.begin(), fp32_inputs.end(), slot) != fp32_inputs.end();
  }
};

void register_schema(const OpSchema& schema);
const OpSchema& op_schema(OpKind kind);

// The nodes a step that fetches `fetches` runs: those the fetched values and the
// side-effecting nodes (optimizer updates) depend on, by node id. The others are dead
// code, which the compiler removes.
std::vector<char> live_nodes(const Graph& g, const std::vector<ValueId>& fetches);

struct SchemaRegistrar {
  explicit SchemaRegistrar(const OpSchema& s) { register_schema(s); }
};

inline TensorDesc desc_of(const Graph& g, ValueId v) { return {g.value(v).shape, g.value(v).dtype}; }

}  // namespace campo
