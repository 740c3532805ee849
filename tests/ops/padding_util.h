// Helpers shared by tests/ops/padding_test.cc and the kernel benchmarks
// (bench/kernels/padding_bench.cc): a GEMM's shape, its operands' shapes, and a graph of
// one MatMul on two placeholders.
#pragma once

#include <cstdint>
#include <string>

#include "graph/graph.h"

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

}  // namespace campo::testing
