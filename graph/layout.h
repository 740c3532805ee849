// The layout pass: which physical layout (ops/kernel.h Layout) each value of a compiled
// schedule is stored in, and the conversions between layouts the executor runs.
//
// The graph's semantics stay NCHW; the layout is a compile-time, physical decision. One
// blocked layout serves a schedule: the one the device's convolution kernels use natively
// (on the CPU cpu_blocked_layout, ops/kernel.h: nChw16c with AVX-512, nChw8c with AVX2;
// none on CUDA). A value is stored blocked (by B = 8 or 16 channels) only when it is
//  - a 4-D floating (f32, bf16, f16) activation with C % B == 0 (then its bytes are those of
//    the plain tensor, permuted, so the memory plan does not change),
//  - not fetched, not a variable, placeholder or weight copy (those are read from outside
//    the step, always plain),
//  - and written by a kernel that can write it blocked (layout_role):
//      producers: the convolution family (Conv2D's y, Conv2DBackpropInput's dx); they
//                 read their activations (x, dy) in whatever layout those have, with no
//                 conversion (oneDNN builds the primitive for it); BiasAddGrad reads dy so
//                 too;
//      followers: FusedBatchNorm / FusedBatchNormGrad (x, dy -> y, dx), BiasAdd (x -> y)
//                 and the element-wise
//                 ops whose inputs all have the output's shape (flat loops: any layout works
//                 as long as every operand shares it). A follower picks one layout for all
//                 its data operands: blocked when its output may be blocked and at least
//                 half of those inputs are blocked (the other inputs are converted);
//      every other op reads and writes plain.
// Rules, in schedule order (a value's producer is decided before its consumers):
//  1. each node's layout as above; every input whose layout differs from what its consumer
//     reads gets ONE conversion per (value, layout), shared by all consumers that need it,
//     run just before the first of them;
//  2. a producer's blocked output that only plain-reading consumers read is stored plain
//     instead (the producer's kernel reorders internally, as without the pass: the same
//     copy, and no extra buffer).
// So a chain conv -> BN -> Relu -> conv stays blocked, and a conversion sits only where a
// blocked value meets an op that reads plain (pooling, Reshape, a global Mean) or a plain
// value meets a follower with blocked inputs (a gradient coming from such an op).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"

namespace campo {

// --conv-layout: whether the executor keeps convolution activations blocked between
// kernels (ConvLayout::blocked, the default) or stores every value plain (each
// convolution then reorders its operands itself, every step).
enum class ConvLayout : uint8_t { plain, blocked };
const char* conv_layout_name(ConvLayout layout);
// "blocked" or "plain"; anything else throws naming the option.
ConvLayout parse_conv_layout(const std::string& name);

// A copy of `value` into layout `to`, run before schedule position `first_reader`; read by
// the positions in `readers` (ascending).
struct LayoutConversion {
  ValueId value = -1;
  Layout to = Layout::plain;
  std::vector<int> readers;
};

struct LayoutAssignment {
  std::vector<Layout> value_layout;  // by ValueId: how the value itself is stored
  // By schedule position, one per node input: the layout the node reads (the value's own,
  // or a conversion's) and the conversion read (-1: the value itself).
  std::vector<std::vector<Layout>> input_layout;
  std::vector<std::vector<int>> input_conversion;
  std::vector<LayoutConversion> conversions;
  int num_blocked_values() const;
};

// The layouts of a schedule (positions of graph nodes, topological) whose blocked values
// are stored in `blocked_layout` (nChw8c or nChw16c). With Layout::plain, everything is
// plain and there are no conversions.
LayoutAssignment assign_layouts(const Graph& graph, const std::vector<NodeId>& schedule,
                                const std::vector<ValueId>& fetches, Layout blocked_layout);
// The blocked layout of a step on `kernel_device` under --conv-layout `mode`: plain, or the
// device's native one (the CPU's cpu_blocked_layout; CUDA kernels take plain data only).
Layout blocked_layout_for(ConvLayout mode, Device kernel_device);

}  // namespace campo
