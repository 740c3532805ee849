#include "graph/memory_report.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace campo {

MemoryReport memory_report(const VariableStore& vars,
                           const std::vector<const Executable*>& executables) {
  MemoryReport m;
  for (const std::string& name : vars.names()) {
    const Tensor& t = vars.at(name);
    const size_t bytes = size_t(t.numel()) * dtype_size(t.dtype());
    const VariableKind kind = vars.kind(name);
    (kind == VariableKind::optimizer_state      ? m.optimizer_state
     : kind == VariableKind::quantization_state ? m.quantization_state
                                                : m.weights) += bytes;
  }
  // An arena shared by several executables (SharedArena) counts once, with the largest of
  // their lower bounds.
  std::vector<std::pair<const SharedArena*, size_t>> arenas;  // (arena, largest live peak)
  for (const Executable* e : executables) {
    if (!e) continue;
    ExecutableMemory x = e->memory();
    const SharedArena* arena = e->arena().get();
    auto it =
        std::find_if(arenas.begin(), arenas.end(), [&](const auto& a) { return a.first == arena; });
    if (it == arenas.end()) it = arenas.insert(arenas.end(), {arena, 0});
    it->second = std::max(it->second, x.live_peak);
    x.arena = x.live_peak = 0;  // added per arena below
    m.graphs += x;
  }
  for (const auto& [arena, live_peak] : arenas) {
    m.graphs.arena += arena->bytes();
    m.graphs.live_peak += live_peak;
  }
  return m;
}

namespace {

double mib(size_t bytes) { return double(bytes) / double(1 << 20); }

}  // namespace

std::string memory_line(const MemoryReport& m) {
  const ExecutableMemory& g = m.graphs;
  char line[400];
  std::snprintf(line, sizeof line,
                "arena %.1f MiB (live peak %.1f, x%.2f; gradients %.1f), weights %.1f, "
                "optimizer state %.1f, "
                "weight copies %.1f, inputs %.1f, kernel workspace %.1f, kernel buffers %.1f; "
                "total %.1f MiB",
                mib(g.arena), mib(g.live_peak),
                g.live_peak > 0 ? double(g.arena) / double(g.live_peak) : 0.0, mib(g.gradients),
                mib(m.weights), mib(m.optimizer_state), mib(g.weight_copies), mib(g.inputs),
                mib(g.workspace), mib(g.kernel_buffers), mib(m.total()));
  std::string text = line;
  if (m.quantization_state > 0) {  // said only where a policy quantizes GEMMs
    std::snprintf(line, sizeof line, " (with quantized GEMMs' state %.1f MiB)",
                  mib(m.quantization_state));
    text += line;
  }
  return text;
}

nlohmann::json memory_json(const MemoryReport& m) {
  const ExecutableMemory& g = m.graphs;
  return {{"arena_mib", mib(g.arena)},
          {"live_peak_mib", mib(g.live_peak)},
          {"gradients_mib", mib(g.gradients)},
          {"weights_mib", mib(m.weights)},
          {"optimizer_state_mib", mib(m.optimizer_state)},
          {"quantization_state_mib", mib(m.quantization_state)},
          {"weight_copies_mib", mib(g.weight_copies)},
          {"inputs_mib", mib(g.inputs)},
          {"workspace_mib", mib(g.workspace)},
          {"kernel_buffers_mib", mib(g.kernel_buffers)},
          {"total_mib", mib(m.total())}};
}

}  // namespace campo
