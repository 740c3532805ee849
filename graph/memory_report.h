// Where a training session's memory goes: its variables by kind and its compiled graphs by
// category (graph/executor.h, ExecutableMemory). campo bench prints one line per policy,
// campo train --profile one at the end, and both put the figures in their JSON
// (docs/usage.md, "Memory").
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "graph/variables.h"

namespace campo {

struct MemoryReport {
  size_t weights = 0;          // parameters and buffers (batch-norm running statistics)
  size_t optimizer_state = 0;  // momentum, Adam's moments
  size_t quantization_state =
      0;  // quantized GEMMs' scales and amax histories (runtime/gemm_quant.h)
  // The compiled graphs, summed: the training step (a GAN's D step, G step and sample
  // graph) and, once evaluation has run, its inference graphs.
  ExecutableMemory graphs;
  size_t total() const { return weights + optimizer_state + quantization_state + graphs.total(); }
};

MemoryReport memory_report(const VariableStore& vars,
                           const std::vector<const Executable*>& executables);

// "arena 12.3 MiB (live peak 11.0, x1.12), weights ..." in MiB, one line without a newline.
std::string memory_line(const MemoryReport& m);
// The same figures in MiB, keys as in the line ("arena_mib", "live_peak_mib", ...).
nlohmann::json memory_json(const MemoryReport& m);

}  // namespace campo
