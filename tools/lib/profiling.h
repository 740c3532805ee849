// The profiling step of the cost-aware policy: measured per-node costs on this machine.
#pragma once

#include "amp/cost_aware.h"
#include "tools/lib/trainer.h"

namespace campo {

// Builds the training graph of `spec` twice — all f32, and with every allow/infer/clear op
// in the low precision — runs `spec.precision.profile_warmup` untimed and
// `profile_steps` timed steps of each on random inputs (separate variables, so the
// model being trained is untouched), and returns each node's fastest time in both
// precisions plus the cast model C_I + r * n fitted by least squares on the casts of the
// low-precision graph. Node ids match those of build_training_graph(spec) before casts.
CostTable profile_costs(const TrainingGraphSpec& spec);

}  // namespace campo
