#include "train/numerics_watch.h"

#include "runtime/check.h"

namespace campo {

namespace {

const char* pass_name(Phase p) {
  switch (p) {
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::update:
      return "update";
  }
  return "?";
}

bool is_watched_cast(const Graph& g, const Node& n) {
  return n.kind == OpKind::Cast && !n.weight_copy && g.value(n.inputs[0]).dtype == DType::f32 &&
         is_low_precision(g.value(n.outputs[0]).dtype);
}

}  // namespace

void watch_numerics(const Graph& g, const std::vector<NodeId>& schedule,
                    NumericsRecorder& recorder) {
  const bool all = recorder.scope() == NumericsScope::all;
  for (NodeId id : schedule) {
    const Node& n = g.node(id);
    if (n.quant.enabled) {
      recorder.watch(n.name, "a", pass_name(n.phase), element_format_name(n.quant.element[0]));
      recorder.watch(n.name, "b", pass_name(n.phase), element_format_name(n.quant.element[1]));
    } else if (all && is_watched_cast(g, n)) {
      recorder.watch(n.name, "x", pass_name(n.phase), dtype_name(g.value(n.outputs[0]).dtype));
    }
  }
  CAMPO_CHECK(!recorder.entries().empty(),
              all ? "--numerics all: this run's step casts no tensor to f16 or bf16 and quantizes "
                    "no GEMM operand: there is nothing to record"
                  : "--numerics quantized: this run's step quantizes no GEMM operand (a "
                    "--precision-policy rule with an fp8 or mx format does; --numerics all also "
                    "records the f16/bf16 casts)");
}

}  // namespace campo
