#include "graph/flops.h"

namespace campo {

bool is_gemm_op(OpKind kind) {
  switch (kind) {
    case OpKind::Conv2D:
    case OpKind::Conv2DBackpropInput:
    case OpKind::Conv2DBackpropFilter:
    case OpKind::MatMul:
    case OpKind::BatchMatMulV2:
      return true;
    default:
      return false;
  }
}

namespace {

bool moves_data_only(OpKind kind) {
  switch (kind) {
    case OpKind::Placeholder:
    case OpKind::Variable:
    case OpKind::Const:
    case OpKind::Reshape:
    case OpKind::Transpose:
    case OpKind::ConcatV2:
    case OpKind::SplitV:
    case OpKind::GatherV2:
    case OpKind::BroadcastTo:
    case OpKind::Cast:
      return true;
    default:
      return false;
  }
}

// 2 numel(y) numel(w) / w[0]: y [N, O, Ho, Wo] the Conv2D-side output of the geometry,
// w [O, C/g, kh, kw] its filter.
int64_t conv_flops(const Shape& y, const Shape& w) {
  return 2 * shape_numel(y) * (shape_numel(w) / w.at(0));
}

}  // namespace

int64_t node_flops(const Graph& g, const Node& n) {
  auto in = [&](int i) -> const Shape& { return g.value(n.inputs.at(size_t(i))).shape; };
  auto out = [&](int i) -> const Shape& { return g.value(n.outputs.at(size_t(i))).shape; };
  switch (n.kind) {
    case OpKind::Conv2D:
      return conv_flops(out(0), in(1));
    case OpKind::Conv2DBackpropInput:
      return conv_flops(in(0), in(1));
    case OpKind::Conv2DBackpropFilter:
      return conv_flops(in(1), out(0));
    case OpKind::MatMul: {
      const auto& t = attrs_as<MatMulAttrs>(n.attrs);
      const Shape& a = in(0);
      const int64_t k = t.transpose_a ? a.at(0) : a.at(1);
      return 2 * shape_numel(out(0)) * k;
    }
    case OpKind::BatchMatMulV2: {
      const auto& t = attrs_as<BatchMatMulAttrs>(n.attrs);
      const Shape& x = in(0);
      const int64_t k = t.adj_x ? x.at(x.size() - 2) : x.back();
      return 2 * shape_numel(out(0)) * k;
    }
    default:
      break;
  }
  if (moves_data_only(n.kind)) return 0;
  int64_t elements = 0;
  for (size_t i = 0; i < n.outputs.size(); ++i) elements += shape_numel(out(int(i)));
  return elements;
}

FlopCount count_step_flops(const Graph& g, const std::vector<ValueId>& fetches) {
  const std::vector<char> live = live_nodes(g, fetches);
  FlopCount c;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (!live[size_t(id)]) continue;
    const Node& n = g.node(id);
    const int64_t f = node_flops(g, n);
    if (is_gemm_op(n.kind)) {
      c.gemm += f;
      if (is_low_precision(n.dtype)) c.gemm_low += f;
    } else {
      c.other += f;
    }
  }
  return c;
}

}  // namespace campo
