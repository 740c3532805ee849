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

bool is_convolution(OpKind kind) {
  return kind == OpKind::Conv2D || kind == OpKind::Conv2DBackpropInput ||
         kind == OpKind::Conv2DBackpropFilter;
}

// A convolution's input channels C and output channels K from its filter [K, C/g, kh, kw]
// (w, the second input of Conv2D and Conv2DBackpropInput; dw, Conv2DBackpropFilter's
// output).
void conv_c_k(const Graph& g, const Node& n, int64_t& C, int64_t& K) {
  const Shape& w = n.kind == OpKind::Conv2DBackpropFilter ? g.value(n.outputs[0]).shape
                                                          : g.value(n.inputs[1]).shape;
  C = w[1] * attrs_as<ConvAttrs>(n.attrs).groups;
  K = w[0];
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
  // A folded cast (Node::f32_output) is part of the kernel timed: keep it and its output type.
  one.node(copy).f32_output = n.f32_output;
  for (size_t i = 0; i < n.outputs.size(); ++i)
    one.value(one.node(copy).outputs[i]).dtype = g.value(n.outputs[i]).dtype;
  return one;
}

}  // namespace

bool is_padding_candidate(const Graph& g, NodeId id, int pad_to) {
  const Node& n = g.node(id);
  if (!is_low_precision(n.dtype) || pad_to <= 0) return false;
  if (n.kind == OpKind::MatMul) {
    int64_t K = 0, N = 0;
    gemm_k_n(g, n, K, N);
    return K % pad_to != 0 || N % pad_to != 0;
  }
  // Grouped convolutions are not padded (ops/conv_padding.h).
  if (!is_convolution(n.kind) || attrs_as<ConvAttrs>(n.attrs).groups != 1) return false;
  int64_t C = 0, K = 0;
  conv_c_k(g, n, C, K);
  return C % pad_to != 0 || K % pad_to != 0;
}

std::vector<NodeId> padding_candidates(const Graph& g, int pad_to) {
  std::vector<NodeId> out;
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (is_padding_candidate(g, id, pad_to)) out.push_back(id);
  return out;
}

PaddingTiming time_padding(const Graph& g, NodeId id, const PaddingTimingOptions& options) {
  CAMPO_CHECK(id >= 0 && id < g.num_nodes(), "time_padding: no node ", id);
  const Node& n = g.node(id);
  CAMPO_CHECK(n.kind == OpKind::MatMul || is_convolution(n.kind), "time_padding: node '", n.name,
              "' is a ", op_name(n.kind),
              "; only MatMul and convolution (Conv2D and its backprops) nodes can be padded");
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
    // Values in [-1, 1), the same for both variants (GEMM and convolution times do not
    // depend on them, but zeros or denormals could).
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

int apply_padding(Graph& g, const std::function<bool(NodeId)>& pays, int pad_to) {
  int padded = 0;
  for (NodeId id : padding_candidates(g, pad_to)) {
    if (!pays(id)) continue;
    g.node(id).pad_to = pad_to;
    ++padded;
  }
  return padded;
}

}  // namespace campo
