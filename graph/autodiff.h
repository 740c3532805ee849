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

// By NodeId: the forward node whose gradient each backward node computes, read from the names
// append_gradients gives (node names are unique): "<forward>_grad.<op>" for the nodes of a
// node's gradient builder, "<forward>/grad_sum" for the AddN of the gradient contributions of a
// value <forward> made. -1 for every other node (forward and update nodes, the seed's readers'
// unscaling, the reductions of data-parallel runs). The precision policy files' layers use it
// (amp/precision_policy.h).
std::vector<NodeId> gradient_sources(const Graph& g);

}  // namespace campo
