// Padding candidates, their isolated timing, and the pad_to decision (amp/padding.h).
#include "amp/padding.h"

#include <algorithm>
#include <string>

#include "graph/executor.h"
#include "graph/variables.h"
#include "runtime/rng.h"

namespace campo {
namespace {

// The GEMM's K and N from the node's (logical) operands: op(A) is [M, K], op(B) is [K, N].
void gemm_k_n(const Graph& g, const Node& n, int64_t& K, int64_t& N) {
  const auto& t = attrs_as<MatMulAttrs>(n.attrs);
  const Shape& a = g.value(n.inputs[0]).shape;
  const Shape& b = g.value(n.inputs[1]).shape;
  K = t.transpose_a ? a[0] : a[1];
  N = t.transpose_b ? b[0] : b[1];
}

// A graph holding placeholders of node `id`'s inputs and a copy of the node with the
// given pad_to; the copy is its last node.
Graph isolate(const Graph& g, NodeId id, int pad_to) {
  const Node& n = g.node(id);
  Graph one;
  std::vector<ValueId> inputs;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value& v = g.value(n.inputs[i]);
    const NodeId p = one.add_node(OpKind::Placeholder, {}, PlaceholderAttrs{v.shape, v.dtype},
                                  "input" + std::to_string(i));
    inputs.push_back(one.node(p).outputs[0]);
  }
  const NodeId copy = one.add_node(n.kind, inputs, n.attrs, n.name, n.dtype, n.phase);
  one.node(copy).pad_to = pad_to;
  return one;
}

}  // namespace

bool is_padding_candidate(const Graph& g, NodeId id, int pad_to) {
  const Node& n = g.node(id);
  if (n.kind != OpKind::MatMul || !is_low_precision(n.dtype) || pad_to <= 0) return false;
  int64_t K = 0, N = 0;
  gemm_k_n(g, n, K, N);
  return K % pad_to != 0 || N % pad_to != 0;
}

std::vector<NodeId> padding_candidates(const Graph& g) {
  std::vector<NodeId> out;
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (is_padding_candidate(g, id)) out.push_back(id);
  return out;
}

PaddingTiming time_padding(const Graph& g, NodeId id, const PaddingTimingOptions& options) {
  CAMPO_CHECK(id >= 0 && id < g.num_nodes(), "time_padding: no node ", id);
  const Node& n = g.node(id);
  CAMPO_CHECK(n.kind == OpKind::MatMul, "time_padding: node '", n.name, "' is a ", op_name(n.kind),
              "; only MatMul nodes can be padded");
  CAMPO_CHECK(options.pad_to > 0 && options.repetitions > 0 && options.warmup >= 0,
              "time_padding: pad_to and repetitions must be positive, warmup non-negative");
  CAMPO_CHECK(options.backend != nullptr, "time_padding: no backend to time node '", n.name,
              "' on");
  const Graph plain = isolate(g, id, 0), padded = isolate(g, id, options.pad_to);
  const NodeId node = plain.num_nodes() - 1;
  VariableStore vars(0, options.backend);
  auto compile = [&](const Graph& one) {
    CompileOptions co;
    co.fetches = {one.node(node).outputs[0]};
    auto exe = std::make_unique<Executable>(one, vars, co);
    // Values in [-1, 1), the same for both variants (GEMM time does not depend on them,
    // but zeros or denormals could).
    Rng rng(1);
    for (size_t i = 0; i < one.node(node).inputs.size(); ++i) {
      const std::string name = "input" + std::to_string(i);
      const Tensor& t = exe->input(name);
      std::vector<float> v(size_t(t.numel()));
      for (float& x : v) x = rng.uniform(-1.0f, 1.0f);
      Tensor host = Tensor::empty(t.shape(), t.dtype());
      convert(v.data(), DType::f32, host.data(), t.dtype(), v.size());
      exe->feed(name, host);  // through the backend's copy
    }
    exe->set_timing(true);
    return exe;
  };
  auto exe_plain = compile(plain), exe_padded = compile(padded);
  const auto& sched = exe_plain->schedule();
  const size_t pos = size_t(std::find(sched.begin(), sched.end(), node) - sched.begin());

  for (int r = 0; r < options.warmup; ++r) {
    exe_plain->run();
    exe_padded->run();
  }
  PaddingTiming t{1e300, 1e300};
  for (int r = 0; r < options.repetitions; ++r) {
    exe_plain->run();
    t.unpadded_ms = std::min(t.unpadded_ms, exe_plain->node_times_ms()[pos]);
    exe_padded->run();
    t.padded_ms = std::min(t.padded_ms, exe_padded->node_times_ms()[pos]);
  }
  return t;
}

bool padding_pays(const Graph& g, NodeId id, const PaddingTimingOptions& options,
                  PaddingTiming* timing) {
  const PaddingTiming t = time_padding(g, id, options);
  if (timing) *timing = t;
  return t.pays(options.min_gain);
}

int apply_padding(Graph& g, const std::function<bool(NodeId)>& pays) {
  int padded = 0;
  for (NodeId id : padding_candidates(g)) {
    if (!pays(id)) continue;
    g.node(id).pad_to = kPadTo;
    ++padded;
  }
  return padded;
}

}  // namespace campo
