// Precision policy files, --precision-policy (amp/precision_policy.cc): the input is the JSON
// file, read and checked, then resolved against LeNet's training graph.
#include "amp/precision_policy.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"
#include "train/training_graph.h"

namespace campo::fuzz {

namespace {

// LeNet's training graph before any policy, built once.
const Graph& lenet_training_graph() {
  static const Graph* graph = [] {
    auto* g = new Graph;
    static VariableStore vars(0, default_cpu_backend());
    TrainingGraphSpec spec;
    spec.model = "lenet";
    spec.image_shape = {1, 28, 28};
    spec.batch = 2;
    build_training_graph(*g, vars, spec);
    return g;
  }();
  return *graph;
}

}  // namespace

void precision_policy_file(const uint8_t* data, size_t size) {
  TempInput input("precision-policy", data, size);
  reject_or_accept([&] {
    const PrecisionPolicy policy = read_precision_policy(input.path());
    for (const PrecisionRule& r : policy.rules) r.describe();
    const PolicyAssignment a = resolve_precision_policy(lenet_training_graph(), policy);
    int set = 0;
    for (int n : a.nodes_set) set += n;
    require(a.any() == (set > 0), "the nodes the rules set are counted once each");
  });
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::precision_policy_file)
