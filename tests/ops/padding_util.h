// Helpers shared by tests/ops/padding_test.cc, tests/ops/conv_padding_test.cc and the kernel
// benchmarks (bench/kernels/padding_bench.cc): a GEMM's shape, its operands' shapes, and a
// graph of one MatMul on two placeholders; a convolution's geometry and a graph of one of
// the convolution family's nodes on two placeholders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/kernel.h"
#include "tests/reference/conv.h"

namespace campo::testing {

// C [M, N] = op(A) op(B) with op(A) [M, K], op(B) [K, N].
struct Gemm {
  int64_t M, K, N;
  bool transpose_a = false, transpose_b = false;
};

inline std::string gemm_name(const Gemm& g) {
  return std::to_string(g.M) + "x" + std::to_string(g.K) + "x" + std::to_string(g.N) +
         (g.transpose_a ? "_ta" : "") + (g.transpose_b ? "_tb" : "");
}

inline Shape a_shape(const Gemm& g) { return g.transpose_a ? Shape{g.K, g.M} : Shape{g.M, g.K}; }
inline Shape b_shape(const Gemm& g) { return g.transpose_b ? Shape{g.N, g.K} : Shape{g.K, g.N}; }

// Placeholders a, b and one MatMul node; returns the MatMul's id.
inline NodeId add_matmul(Graph& g, const Gemm& m, DType dtype, const std::string& name) {
  const NodeId a =
      g.add_node(OpKind::Placeholder, {}, PlaceholderAttrs{a_shape(m), dtype}, name + ".a");
  const NodeId b =
      g.add_node(OpKind::Placeholder, {}, PlaceholderAttrs{b_shape(m), dtype}, name + ".b");
  return g.add_node(OpKind::MatMul, {g.node(a).outputs[0], g.node(b).outputs[0]},
                    MatMulAttrs{m.transpose_a, m.transpose_b}, name, dtype);
}

// x [N, C, H, W] * w [K, C, kh, kw] -> y [N, K, Ho, Wo], one group.
struct ConvCase {
  std::string name;
  Shape x, w;
  int stride = 1, pad = 0;
  Layout y_layout = Layout::plain;  // y (Conv2D's output, the backprops' dy) in kernel specs
};

// The attributes of `kind` on case c (the backprops' output_shape: dx's, dw's).
inline ConvAttrs attrs_of(const ConvCase& c, OpKind kind) {
  ConvAttrs a;
  a.stride_h = a.stride_w = c.stride;
  a.pad_h = a.pad_w = c.pad;
  if (kind == OpKind::Conv2DBackpropInput) a.output_shape = c.x;
  if (kind == OpKind::Conv2DBackpropFilter) a.output_shape = c.w;
  return a;
}

inline Shape y_shape(const ConvCase& c) {
  return reference::conv2d_output_shape(c.x, c.w, attrs_of(c, OpKind::Conv2D));
}

// Placeholders and one node of `kind` on case c: {x, w} -> y, {dy, w} -> dx, {x, dy} -> dw,
// with `groups` groups (w then [K, C / groups, kh, kw]). Returns the node.
inline NodeId add_conv(Graph& g, OpKind kind, const ConvCase& c, DType dtype,
                       const std::string& name, int groups = 1) {
  ConvAttrs a = attrs_of(c, kind);
  a.groups = groups;
  const Shape y = reference::conv2d_output_shape(c.x, c.w, a);
  auto placeholder = [&](const Shape& s, const std::string& n) {
    return g.node(g.add_node(OpKind::Placeholder, {}, PlaceholderAttrs{s, dtype}, n)).outputs[0];
  };
  std::vector<ValueId> in;
  if (kind == OpKind::Conv2D) in = {placeholder(c.x, name + ".x"), placeholder(c.w, name + ".w")};
  if (kind == OpKind::Conv2DBackpropInput)
    in = {placeholder(y, name + ".dy"), placeholder(c.w, name + ".w")};
  if (kind == OpKind::Conv2DBackpropFilter)
    in = {placeholder(c.x, name + ".x"), placeholder(y, name + ".dy")};
  return g.add_node(kind, in, a, name, dtype);
}

}  // namespace campo::testing
