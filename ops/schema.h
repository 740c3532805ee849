// Op schemas: everything graph code knows about an op (AMP list, arity, shape inference,
// gradient builder), registered by each op family's file ops/<family>.cc.
//
// Layering: ops/ sits below graph/ and never includes it. A schema still needs to read the
// shapes of a node's inputs and, for its gradient, to emit nodes, so ops/ declares those
// needs here as small interfaces that graph/ implements (dependency inversion):
//   OpNode          - the fields of a node a schema reads; graph's Node extends it.
//   ValueDescs      - shape and dtype of a value by id; graph's Graph implements it.
//   GradientBuilder - emitting nodes for a gradient; graph's Builder implements it.
// We chose this over moving the schemas up into graph/ so that an op keeps one home
// (STYLE.md principle 1: schema, AMP list and gradient in ops/<family>.cc), and over moving
// Graph down into ops/ so that the graph (phases, padding, weight copies) stays graph's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernel.h"  // TensorDesc
#include "ops/op.h"

namespace campo {

using ValueId = int32_t;
using NodeId = int32_t;
constexpr ValueId kNoValue = -1;

// What a schema sees of a node: its op, name, attributes, the values it reads and writes
// (ids into the graph's values) and its compute dtype (set by mixed-precision policies).
struct OpNode {
  OpKind kind;
  std::string name;
  Attrs attrs;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  DType dtype = DType::f32;
};

// Shape and dtype of the values of the graph a node lives in.
class ValueDescs {
 public:
  virtual const Shape& shape(ValueId v) const = 0;
  virtual DType dtype(ValueId v) const = 0;

 protected:
  ~ValueDescs() = default;
};

// What a gradient function may do: read values' shapes and dtypes and add nodes.
// The public entry points are non-virtual; an implementation provides add_op.
class GradientBuilder : public ValueDescs {
 public:
  // Adds a node of any kind; returns all its outputs.
  std::vector<ValueId> op_multi(OpKind kind, std::vector<ValueId> inputs, Attrs attrs = NoAttrs{},
                                const std::string& name = "") {
    return add_op(kind, std::move(inputs), std::move(attrs), name);
  }
  // Adds a node; returns its first output (kNoValue when it has none).
  ValueId op(OpKind kind, std::vector<ValueId> inputs, Attrs attrs = NoAttrs{},
             const std::string& name = "") {
    auto outs = add_op(kind, std::move(inputs), std::move(attrs), name);
    return outs.empty() ? kNoValue : outs[0];
  }
  ValueId matmul(ValueId a, ValueId b, bool transpose_a = false, bool transpose_b = false) {
    return op(OpKind::MatMul, {a, b}, MatMulAttrs{transpose_a, transpose_b});
  }
  // BatchMatMulV2 (ops/batch_matmul.cc): z [..., M, N] = adj(x) adj(y) per batch index.
  ValueId batch_matmul(ValueId x, ValueId y, bool adj_x = false, bool adj_y = false) {
    return op(OpKind::BatchMatMulV2, {x, y}, BatchMatMulAttrs{adj_x, adj_y});
  }
  // Transpose (ops/transpose.cc): y's dim d is x's dim perm[d].
  ValueId transpose(ValueId x, std::vector<int> perm) {
    return op(OpKind::Transpose, {x}, TransposeAttrs{std::move(perm)});
  }
  // Sets the compute dtype of the node that produced `v` (a Cast's is its source dtype).
  virtual void set_compute_dtype(ValueId v, DType dtype) = 0;

 protected:
  ~GradientBuilder() = default;
  // `name` is relative (the implementation may scope it); empty: the op's name.
  virtual std::vector<ValueId> add_op(OpKind kind, std::vector<ValueId> inputs, Attrs attrs,
                                      const std::string& name) = 0;
};

// Output descriptions of the node, from its attributes and its inputs' descriptions.
using InferFn = std::vector<TensorDesc> (*)(const ValueDescs& g, const OpNode& n);
// Gradients of the node's inputs given gradients of its outputs (kNoValue where none
// flows). Returns one entry per input, kNoValue for non-differentiable inputs.
using GradFn = std::vector<ValueId> (*)(GradientBuilder& b, const OpNode& n,
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
  // Its low-precision kernels can write output 0 in f32 (graph's Node::f32_output).
  bool can_write_f32_output = false;

  bool input_stays_f32(int slot) const {
    return std::find(fp32_inputs.begin(), fp32_inputs.end(), slot) != fp32_inputs.end();
  }
};

void register_schema(const OpSchema& schema);
const OpSchema& op_schema(OpKind kind);

struct SchemaRegistrar {
  explicit SchemaRegistrar(const OpSchema& s) { register_schema(s); }
};

}  // namespace campo
