// Per-op models by shape (issue 50, "costs you can trust"): how much faster (or slower) a
// node runs in low precision than in f32, as a function of its shape, where the analytic
// features of amp/calibration.h (FLOPs, bytes) miss it: small-map convolutions far below the
// GEMM peak, channel counts that fill a kernel's blocks badly, element-wise ops whose rate
// depends on the op and its size. Two forms:
//
//   "features" (after NeuSight's tile utilisation and Habitat's MLP inputs, as a linear
//              model) models the ratio, so that the node's measured f32 time carries what the
//              shape does not say: T_lp = T_fp32 * exp(r), r = sum_j w_j * term_j, the terms
//              of the node's shape family
//              (shape_term_names): logs of the GEMM dimensions or the convolution's
//              batch, channels, map, window and stride, the utilisation of the kernels'
//              blocks u_b(x) = x / (b * ceil(x / b)) for b = 16 and 64 (useful over padded
//              work), and log T_fp32 (a small node's ratio is its fixed costs'); fitted by
//              least squares on log(T_lp / T_fp32) (relative error, as MAPE). With the
//              weight of log T_fp32 at -1 the f32 time drops out: the fit decides how much
//              of it to trust.
//   "table"    measured efficiencies with interpolation: T_lp = work / e, log e the
//              inverse-distance weighted mean of log(work / T_lp) at the
//              kShapeTableNeighbours nearest measured shapes, distance in log2 of the shape's
//              dimensions (one unit: a factor of two); work (shape_work) the FLOPs of a GEMM
//              or convolution, the elements of another op. It does not read the node's f32
//              time: a node timed high in f32 by a hiccup is not predicted high.
//
// A shape is known from a node's input and output shapes alone (no attributes), so a
// recorded profile (perf/predict.h) has it as a graph does.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/op.h"

namespace campo {

// How a node's shape is described. gemm: MatMul, BatchMatMulV2; conv: Conv2D and its two
// backprops; other: every other op.
enum class ShapeFamily : uint8_t { gemm, conv, other };
const char* shape_family_name(ShapeFamily f);  // "gemm", "conv", "other"
ShapeFamily shape_family_of(OpKind kind);

constexpr int kShapeDims = 7;
// The dimensions, by family (unused ones 0):
//   gemm   batch (product of the batch dims, 1 for MatMul), M, N, K
//   conv   N (batch), C (input channels), K (output channels), map (Ho * Wo of the output
//          side), window (R * S), stride (input height over output height, rounded, >= 1),
//          groups (C over the filter's channels)
//   other  elements (of the largest operand), channels (its dim 1 when 2-D or 4-D, else its
//          elements), window (a pool's window area, from the input over the output; else 1)
struct NodeShape {
  ShapeFamily family = ShapeFamily::other;
  std::array<double, kShapeDims> dims{};
  bool known() const { return dims[0] > 0; }  // false: not described (a default NodeShape)
  auto operator<=>(const NodeShape&) const = default;
};
// From the node's op and its input and output shapes (in the node's order).
NodeShape node_shape(OpKind kind, const std::vector<Shape>& inputs,
                     const std::vector<Shape>& outputs);
NodeShape node_shape(const Graph& g, NodeId id);
// "conv N=8 C=64 K=64 map=256 window=9 stride=1 groups=1"
std::string describe_shape(const NodeShape& s);

// The "features" form's terms of a node of family `f`: their names, and their values for a
// shape and f32 time.
const std::vector<std::string>& shape_term_names(ShapeFamily f);
std::vector<double> shape_terms(const NodeShape& s, double fp32_ms);
// The "table" form's coordinates: log2 of the family's dimensions.
std::vector<double> shape_coordinates(const NodeShape& s);
// The work a node of shape `s` does: 2 batch M N K for a GEMM, 2 N K map (C / groups) window
// for a convolution, its elements for another op.
double shape_work(const NodeShape& s);

constexpr int kShapeTableNeighbours = 4;
// Inverse-distance weights 1 / (d + kShapeTableSoftening): an exact match dominates, two
// shapes a factor of two apart count about alike.
constexpr double kShapeTableSoftening = 0.25;

struct ShapeModel {
  std::string form;  // "features" or "table"
  ShapeFamily family = ShapeFamily::other;
  std::vector<double> weights;  // features: by shape_term_names(family)
  // table: distinct coordinates (shape_coordinates) and the mean log(work / T_lp) measured
  // there (work per ms)
  std::vector<std::vector<double>> points;
  std::vector<double> log_efficiencies;
  // T_lp predicted for a node of shape `s` (of this family) and f32 time `fp32_ms` (> 0).
  double low_ms(const NodeShape& s, double fp32_ms) const;
};

// One sample for the shape fits (amp/calibration.h's fit_shape_*): a node's shape, both times.
struct ShapeSample {
  NodeShape shape;
  double fp32_ms = 0, low_ms = 0;
};

}  // namespace campo
