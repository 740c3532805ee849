// Reverse-mode automatic differentiation on the graph: appends backward nodes, built by
// each op's gradient builder, to the same graph.
// Only nodes on a path from a `wrt` value to `loss` are differentiated (unused branches
// are pruned); a value consumed several times gets the AddN of its gradient contributions.
#pragma once

#include <vector>

#include "graph/builder.h"

namespace campo {

// Returns d(loss)/d(wrt[i]) for each i (kNoValue when wrt[i] does not influence loss).
// `seed` is the gradient fed into `loss` (same shape as loss): 1 for plain training,
// the loss scale for mixed precision.
std::vector<ValueId> append_gradients(Builder& b, ValueId loss, ValueId seed,
                                      const std::vector<ValueId>& wrt);

}  // namespace campo
