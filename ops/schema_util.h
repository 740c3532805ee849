// Small helpers shared by op schemas (shape inference and gradient builders).
#pragma once

#include "ops/schema.h"

namespace campo {

inline const Shape& in_shape(const ValueDescs& g, const OpNode& n, int i) {
  return g.shape(n.inputs.at(size_t(i)));
}
inline DType in_dtype(const ValueDescs& g, const OpNode& n, int i) {
  return g.dtype(n.inputs.at(size_t(i)));
}

// Checks that input i has the node's compute dtype (or f32 when it is listed in the
// schema's fp32_inputs) — the invariant cast insertion maintains.
void check_input_dtype(const ValueDescs& g, const OpNode& n, int i);
// check_input_dtype for every floating input.
void check_float_inputs(const ValueDescs& g, const OpNode& n);

// Output = input 0's shape, node's compute dtype (element-wise ops).
std::vector<TensorDesc> infer_same_as_input0(const ValueDescs& g, const OpNode& n);

}  // namespace campo
