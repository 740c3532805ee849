// Floating-point operations of a graph's nodes, counted from their shapes (the roofline of
// `campo bench`). A multiply-add counts 2 FLOPs.
//
// GEMM-like ops, exact:
//   Conv2D               {x, w} -> y [N, O, Ho, Wo], w [O, C/g, kh, kw]:
//                        2 N O (C/g) kh kw Ho Wo = 2 numel(y) numel(w) / O
//   Conv2DBackpropInput  {dy, w}: the same product as the Conv2D whose dx it computes,
//                        2 numel(dy) numel(w) / w[0] (also the transposed convolution)
//   Conv2DBackpropFilter {x, dy} -> dw: 2 numel(dy) numel(dw) / dw[0]
//   MatMul               C [M, N] = op(A) op(B), K the shared dimension: 2 M N K
//   BatchMatMulV2        z [..., M, N]: batch 2 M N K with batch = numel(z) / (M N)
// Every other op that computes: 1 FLOP per output element (all outputs), a deliberate
// round figure for the cheap ops (element-wise, BiasAdd, batch/layer norm, pooling, softmax,
// losses, reductions, optimizer updates); they are reported apart as "other" FLOPs.
// 0 FLOPs: ops that only move data (Placeholder, Variable, Const, Reshape, Transpose,
// ConcatV2, SplitV, GatherV2, BroadcastTo) and Cast, a conversion the precision policies add,
// not work the model asks for, so fp32, amp and cost-aware graphs of one model count the
// same FLOPs (apart from the few element-wise ops of dynamic loss scaling).
// Padding (Node::pad_to) is not counted: the FLOPs are those of the unpadded shapes.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace campo {

struct FlopCount {
  int64_t gemm = 0;      // Conv2D, its two backprops, MatMul, BatchMatMulV2
  int64_t gemm_low = 0;  // of which in nodes that compute in f16 or bf16
  int64_t other = 0;     // every other op, at the per-element count above
  int64_t total() const { return gemm + other; }
  FlopCount& operator+=(const FlopCount& b) {
    gemm += b.gemm;
    gemm_low += b.gemm_low;
    other += b.other;
    return *this;
  }
};

bool is_gemm_op(OpKind kind);

// The FLOPs of one node of `g` (the formulas above).
int64_t node_flops(const Graph& g, const Node& n);

// The FLOPs of one step that fetches `fetches`: the sum over the nodes it runs
// (live_nodes); dead code costs nothing.
FlopCount count_step_flops(const Graph& g, const std::vector<ValueId>& fetches);

}  // namespace campo
