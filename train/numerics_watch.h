// Which tensors of a training step --numerics records (runtime/numerics.h): the session's
// side of the recorder, which knows the graph (the kernels know only their node's name).
#pragma once

#include <vector>

#include "graph/graph.h"
#include "runtime/numerics.h"

namespace campo {

// Adds to `recorder` the tensors of `schedule` (an executable's nodes, in the order they run)
// it records: each quantized GEMM's operands "a" and "b" in their element formats; with scope
// all, also the input "x" of every Cast from f32 to f16 or bf16 in the step (weight copies
// aside: they run when the weights change from outside a step, not in one). One error line
// when the step has none (nothing would be recorded).
void watch_numerics(const Graph& g, const std::vector<NodeId>& schedule,
                    NumericsRecorder& recorder);

}  // namespace campo
