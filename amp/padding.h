// Padding of low-precision GEMMs and convolutions (DESIGN.md, the cost-aware policy, item 7):
// a MatMul that runs in low precision with K or N not a multiple of the fast path's
// alignment, or a convolution (Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter) whose
// input or output channel count is not, may run on zero-padded operands inside its kernel
// (Node::pad_to; ops/cpu/matmul.cc, ops/conv_padding.h), transparently to the model and its
// results. Whether that pays depends on the shape, the CPU and the
// GEMM library, and the copies of the operands count against it (docs/kernels.md,
// "Padding": pre-padded operands paid for PyTorch's GEMM, copies did not for campo's). It is
// therefore decided per node: this file finds the candidates, times a candidate unpadded
// and padded in isolation, and sets pad_to where a decision says so.
// amp/ sees graphs, never kernels: the timing compiles a one-node graph with the executor.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "graph/graph.h"
#include "runtime/backend.h"

namespace campo {

// The CPU's alignment (Backend::padding_alignment, runtime/cpu_backend.h): padded GEMM
// dimensions and convolution channels are rounded up to a multiple of it. The policy takes
// the training backend's own (8 on CUDA); this is the default of the functions below.
constexpr int kPadTo = 16;

// A node computing in a low-precision dtype (bf16, f16) that is
//  - a MatMul whose K or N is not a multiple of pad_to (M does not count: the kernels do
//    not pad it), or
//  - a convolution with one group whose input channels C or output channels K are not a
//    multiple of pad_to (batch and image sizes do not count: they are not padded).
bool is_padding_candidate(const Graph& g, NodeId id, int pad_to = kPadTo);
// The candidates of the graph, in id order.
std::vector<NodeId> padding_candidates(const Graph& g, int pad_to = kPadTo);

struct PaddingTimingOptions {
  int pad_to = kPadTo;
  int warmup = 2;       // untimed runs of each variant first
  int repetitions = 5;  // timed runs of each variant; the minimum counts
  // Padding pays only when it is faster by more than this fraction (noise on a shared
  // machine, and on an emulated kernel where pad_to changes nothing, must not decide).
  double min_gain = 0.05;
  // Where the node is timed: the backend the model will train on (required).
  std::shared_ptr<Backend> backend;
};

// Wall-clock kernel times (ms, minimum over repetitions) of one node without and with
// padding, measured side by side: the two variants' runs alternate. With several OpenMP
// threads on a busy machine the times are the scheduler's, not the GEMM's (2 threads on 2
// loaded cores: a 6 us GEMM timed at 5-10 ms), so measure on a quiet machine or with
// OMP_NUM_THREADS=1, where the minimum is stable.
struct PaddingTiming {
  double unpadded_ms = 0.0;
  double padded_ms = 0.0;
  bool pays(double min_gain) const { return padded_ms < unpadded_ms * (1.0 - min_gain); }
};

// Times node `id` (a padding candidate: a MatMul or a convolution) in isolation on
// options.backend: a graph of two placeholders of its inputs' shapes and dtypes and a copy of
// the node (its output dtype too), compiled twice (pad_to = 0 and options.pad_to), inputs
// filled with fixed pseudo-random values.
PaddingTiming time_padding(const Graph& g, NodeId id, const PaddingTimingOptions& options);
// time_padding(...).pays(options.min_gain); the times go to *timing when given.
bool padding_pays(const Graph& g, NodeId id, const PaddingTimingOptions& options,
                  PaddingTiming* timing = nullptr);

// Sets pad_to on every padding candidate (for that pad_to) for which pays(id) is true and
// returns how many; other nodes are left as they are. With measurements:
//   apply_padding(g, [&](NodeId id) { return padding_pays(g, id, {.backend = backend}); });
int apply_padding(Graph& g, const std::function<bool(NodeId)>& pays, int pad_to = kPadTo);

}  // namespace campo
