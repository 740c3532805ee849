// Small helpers shared by op schemas (shape inference and gradient builders).
#pragma once

#include "graph/builder.h"
#include "graph/graph.h"

namespace campo {

inline const Shape& in_shape(const Graph& g, const Node& n, int i) {
  return g.value(n.inputs.at(size_t(i))).shape;
}
inline DType in_dtype(const Graph& g, const Node& n, int i) {
  return g.value(n.inputs.at(size_t(i))).dtype;
}

// Checks that input i has the node's compute dtype (or f32 when it is listed in the
// schema's fp32_inputs) — the invariant cast insertion maintains.
void check_input_dtype(const Graph& g, const Node& n, int i);
// check_input_dtype for every floating input.
void check_float_inputs(const Graph& g, const Node& n);

// Output = input 0's shape, node's compute dtype (element-wise ops).
std::vector<TensorDesc> infer_same_as_input0(const Graph& g, const Node& n);

}  // namespace campo
