// Op kinds, their TensorFlow names, and the typed attributes each op carries.
// Names are TensorFlow's so mixed-precision lists and plans read like the paper.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace campo {

// clang-format off
#define CAMPO_OP_KINDS(X)                                                                   \
  X(Placeholder) X(Variable) X(Conv2D) X(Conv2DBackpropInput) X(Conv2DBackpropFilter)       \
  X(MatMul) X(BiasAdd) X(BiasAddGrad) X(FusedBatchNorm) X(FusedBatchNormGrad) X(Relu)       \
  X(ReluGrad) X(LeakyRelu) X(LeakyReluGrad) X(Tanh) X(TanhGrad) X(Sigmoid) X(SigmoidGrad)   \
  X(MaxPool) X(MaxPoolGrad) X(AvgPool) X(AvgPoolGrad) X(Add) X(AddN) X(Mul) X(Reshape)      \
  X(Dropout) X(SparseSoftmaxCrossEntropyWithLogits) X(SigmoidCrossEntropyWithLogits)       \
  X(SigmoidCrossEntropyWithLogitsGrad) X(Mean) X(MeanGrad) X(Sum) X(BroadcastTo) X(Cast)      \
  X(AllFinite) X(ApplyMomentum) X(ApplyAdam)                                                \
  X(Softmax) X(SoftmaxGrad) X(Gelu) X(GeluGrad) X(LayerNorm) X(LayerNormGrad)                \
  X(ConcatV2) X(SplitV) X(Const) X(BatchMatMulV2) X(Transpose) X(GatherV2)          \
  X(UnsortedSegmentSum) X(AllReduceStart) X(AllReduceWait)
// clang-format on

enum class OpKind : uint16_t {
#define CAMPO_ENUM(name) name,
  CAMPO_OP_KINDS(CAMPO_ENUM)
#undef CAMPO_ENUM
      kCount
};

const char* op_name(OpKind k);
std::optional<OpKind> parse_op_kind(std::string_view name);

// TensorFlow's auto-mixed-precision lists; `fp32` marks ops that never change precision
// (placeholders, variables, optimizer updates, loss gradients kept in f32).
enum class AmpList : uint8_t { allow, infer, deny, clear, fp32 };
const char* amp_list_name(AmpList l);

// ---- attributes, one struct per op family ----

struct NoAttrs {};

// Conv2D / Conv2DBackpropInput / Conv2DBackpropFilter. NCHW data, OIHW filters
// (O = output channels, I = input channels / groups).
// For the backprops `output_shape` is the shape of what they compute: dX for
// Conv2DBackpropInput (also the output of a transposed convolution), dW for
// Conv2DBackpropFilter.
struct ConvAttrs {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;  // symmetric zero padding
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  Shape output_shape;
};

struct MatMulAttrs {
  bool transpose_a = false, transpose_b = false;
};

// BatchMatMulV2 (TensorFlow's attribute names): z [..., M, N] = adj(x) adj(y) for every batch
// index, x [..., M, K] (or [..., K, M] with adj_x), y [..., K, N] (or [..., N, K] with adj_y);
// adj transposes the last two dims (real data: the adjoint is the transpose).
struct BatchMatMulAttrs {
  bool adj_x = false, adj_y = false;
};

// Transpose: output dim i is input dim perm[i] (TensorFlow's and NumPy's convention), perm a
// permutation of 0 .. rank-1.
struct TransposeAttrs {
  std::vector<int> perm;
};

// MaxPool / AvgPool and their gradients. AvgPool divides by the window area that lies
// inside the input (padding excluded, PyTorch's count_include_pad=False), or, with
// `count_include_pad`, by the whole kernel_h * kernel_w (padding counted as zeros,
// PyTorch's default count_include_pad=True; floor output size keeps every window inside
// the padded input, so that is always the full kernel area). MaxPool refuses the flag.
// `input_shape` is set on the gradient ops (shape of dX). Global average pooling is an
// AvgPool with the window equal to the input's spatial size.
struct PoolAttrs {
  int kernel_h = 2, kernel_w = 2;
  int stride_h = 2, stride_w = 2;
  int pad_h = 0, pad_w = 0;
  Shape input_shape;
  bool count_include_pad = false;  // last, so positional initialisers above stay valid
};

// FusedBatchNorm inputs: x, scale, offset, running_mean, running_var.
// Training outputs: y, batch_mean, batch_inv_std; updates running stats in place with
// running = (1 - momentum) * running + momentum * batch (unbiased variance), as PyTorch.
// Inference uses the running stats. FusedBatchNormGrad inputs: dy, x, scale, batch_mean,
// batch_inv_std; outputs dx, dscale, doffset.
struct BatchNormAttrs {
  float epsilon = 1e-5f;
  float momentum = 0.1f;
  bool is_training = true;
};

struct LeakyReluAttrs {
  float alpha = 0.2f;
};

// Gelu / GeluGrad: y = x * Phi(x) (Phi the standard normal CDF, the exact erf form BERT
// uses) or, with `approximate`, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as
// tf.nn.gelu(approximate=True) and PyTorch's GELU(approximate='tanh').
struct GeluAttrs {
  bool approximate = false;
};

// LayerNorm over the last axis (PyTorch's nn.LayerNorm with one normalised dim), inputs x
// [..., C], scale [C], offset [C]; outputs y (x's shape), mean and inv_std (x's shape
// without the last axis, f32). LayerNormGrad inputs: dy, x, scale, mean, inv_std; outputs
// dx, dscale, doffset.
struct LayerNormAttrs {
  float epsilon = 1e-5f;
};

// Mean / Sum over `axes` (empty = all). MeanGrad broadcasts dY back to `input_shape`
// and divides by the reduced count; BroadcastTo (Sum's gradient) only broadcasts.
struct ReduceAttrs {
  std::vector<int> axes;
  bool keep_dims = false;
  Shape input_shape;
};

struct ReshapeAttrs {
  Shape shape;  // may contain one -1
};

// ConcatV2: its inputs joined along `axis`; they agree on every other dimension. A negative
// axis counts from the end (-1: the last), as in TensorFlow and PyTorch; Builder::concat
// stores it normalised to [0, rank).
struct ConcatAttrs {
  int axis = 0;
};

// SplitV (ConcatV2's gradient): its input cut along `axis` into consecutive pieces of
// `size_splits` (summing to the input's size there), one output per piece. `axis` as
// ConcatAttrs.
struct SplitAttrs {
  int axis = 0;
  std::vector<int64_t> size_splits;
};

// Dropout outputs (y, mask) with mask in {0, 1/(1-rate)}; y = x * mask.
// Per-slice rates (a model array: model s owns block s of axis 1): with S = slice_rates.size()
// > 0, `rate` is unused and x is viewed as [outer, S, inner], outer = x.shape[0], inner =
// numel / (outer S); element (o, s, k) drops with slice_rates[s] (kept ones scaled by
// 1/(1 - slice_rates[s]); a rate of 0 keeps the slice unscaled). x has rank >= 2 and
// x.shape[1] divisible by S; every rate lies in [0, 1).
struct DropoutAttrs {
  float rate = 0.5f;
  std::vector<float> slice_rates;
};

struct CastAttrs {
  DType to = DType::f32;
};

// ApplyMomentum inputs: var, accum, grad, lr ([] or [S]). PyTorch SGD semantics:
//   g = grad + weight_decay * var; accum = momentum * accum + g;
//   var -= lr * (nesterov ? g + momentum * accum : accum)
// With `skip_if_not_finite` the input after lr is the AllFinite flag (f32 scalar, 1 when
// every gradient is finite): at 0 the update leaves var, accum and the weight copy as they
// are (a loss-scale overflow), decided on the device within the step.
// Slices (a model array's N models, each owning a contiguous equal part of every variable):
// var is cut into S equal contiguous slices, slice s = elements [s numel/S, (s+1) numel/S),
// and slice s updates with lr[s], slice_momentum[s] and slice_weight_decay[s], bit for bit
// as S separate updates would. S is lr's size when lr is [S] (S >= 1 dividing numel), else
// the size of the non-empty per-slice vectors (which must divide numel), else 1. An empty
// vector means the scalar field for every slice; a non-empty one has exactly S values.
// Multi-tensor form (`tensors` = k > 1 variables in one node, graph/optimizer.h groups
// them): each per-variable input becomes k consecutive inputs, role by role (UpdateLayout
// below): var_1..var_k, accum_1..accum_k, grad_1..grad_k, then lr [, flag] [, copy_1..copy_k];
// every variable has a weight copy or none does. Variable j updates exactly as a node of
// its own with the same attributes would (slices cut each variable on its own), so k = 1 is
// the single-variable op and a group gives the bits of k separate updates.
// Pure low-precision training (--master-weights none, --optimizer-state bf16): var and the
// state may be stored in bf16 (each input in its own type, any mix; a bf16 var has no weight
// copy, it is what the forward pass reads). The update decodes them to f32, computes in f32
// exactly as above and rounds what it stores back to bf16: to nearest even, or with
// `stochastic_rounding` stochastically (runtime/stochastic_rounding.h), element i of the
// tensor drawing from a Philox stream keyed by the run's seed and a pure function of (node
// name, variable, role, step): the same bits on any thread count and after a resume.
struct MomentumAttrs {
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool skip_if_not_finite = false;
  std::vector<float> slice_momentum, slice_weight_decay;
  int tensors = 1;
  bool stochastic_rounding = false;  // last, so positional initialisers above stay valid
};

// ApplyAdam inputs: var, m, v, grad, lr ([] or [S]), step (scalar, 1-based). PyTorch Adam:
//   g = grad + weight_decay * var; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//   var -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
// `skip_if_not_finite`: the input after step is the AllFinite flag, as for ApplyMomentum.
// Slices as ApplyMomentum's: slice s uses lr[s] and slice_weight_decay[s]; the step, betas
// and epsilon (so the bias corrections) are shared.
// Multi-tensor form as ApplyMomentum's: var_1..k, m_1..k, v_1..k, grad_1..k, lr, step
// [, flag] [, copy_1..k]. bf16 var, m and v and `stochastic_rounding` as ApplyMomentum's.
struct AdamAttrs {
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float weight_decay = 0.0f;
  bool skip_if_not_finite = false;
  std::vector<float> slice_weight_decay;
  int tensors = 1;
  bool stochastic_rounding = false;  // last, so positional initialisers above stay valid
};

// Where the inputs of an optimizer update (ApplyMomentum / ApplyAdam, k = `tensors`
// variables) sit: per-variable roles first, k inputs each (ApplyMomentum: var, accum, grad;
// ApplyAdam: var, m, v, grad), then the shared lr (and Adam's step), the optional AllFinite
// flag and the optional weight copies, one per variable.
struct UpdateLayout {
  int tensors = 1;
  int roles = 3;   // per-variable inputs before lr; the last role is the gradient
  int shared = 1;  // lr, or lr and step
  bool has_flag = false;
  int input(int role, int tensor) const { return role * tensors + tensor; }
  int grad(int tensor) const { return input(roles - 1, tensor); }
  int lr() const { return roles * tensors; }
  int flag() const { return lr() + shared; }
  // The inputs without weight copies; the copies, when present, follow.
  int required() const { return flag() + (has_flag ? 1 : 0); }
  int copy(int tensor) const { return required() + tensor; }
};

struct PlaceholderAttrs {
  Shape shape;
  DType dtype = DType::f32;
};

// A Variable is stored in `dtype` (f32; bf16 or f16 for weights and optimizer state kept in
// low precision, graph/optimizer.h): its VariableStore tensor has this type.
struct VariableAttrs {
  Shape shape;
  DType dtype = DType::f32;
};

// Const: an f32 tensor of `shape` filled with `value` (TensorFlow's Const, for the scalar
// weights of a loss sum).
struct ConstAttrs {
  Shape shape;
  float value = 0.0f;
};

// GatherV2 (an embedding lookup): inputs params [V, D...] and i32 indices of any shape;
// output [indices..., D...] with out[i..., :] = params[indices[i...], :]. Only axis 0 (rows
// of params) is supported; an index outside [0, V) is an error at run time.
struct GatherAttrs {
  int axis = 0;
};

// UnsortedSegmentSum (GatherV2's gradient w.r.t. params): inputs data [n..., D...] and i32
// segment_ids [n...] (data's leading dims); output [num_segments, D...] with
// out[s, :] = sum over i with segment_ids[i] == s of data[i, :], zeros where no id points.
struct UnsortedSegmentSumAttrs {
  int64_t num_segments = 0;
};

// SparseSoftmaxCrossEntropyWithLogits with PyTorch's `ignore_index` (-100 by convention):
// rows whose label equals `ignore_label` get loss 0 and a zero backprop row. The op also
// takes NoAttrs, which means what an unset ignore_label means: every label must lie in
// [0, C).
struct SparseSoftmaxCrossEntropyAttrs {
  std::optional<int32_t> ignore_label;
};

// A data-parallel run's gradient bucket (train/training_graph.h), reduced over the ranks in
// two nodes so that the reduction overlaps the rest of the backward pass:
//   AllReduceStart {g1, ..., gk} (f32) -> bucket [sum of numels] f32: packs the gradients
//     into the bucket and starts its in-place sum over the ranks (ExecContext::communicator;
//     without one, a single process: the sum is the bucket itself). The schedule runs it
//     as soon as its gradients exist (graph/graph.h, topological_order).
//   AllReduceWait {bucket} -> g1', ..., gk' (`shapes`): waits for the sum and unpacks it
//     times `scale` (1 / ranks: the gradient of the mean loss over every rank's batch).
// Both carry the same attributes; AllReduceStart reads none of them.
struct AllReduceAttrs {
  std::vector<Shape> shapes;
  float scale = 1.0f;
};

using Attrs =
    std::variant<NoAttrs, ConvAttrs, MatMulAttrs, PoolAttrs, BatchNormAttrs, LeakyReluAttrs,
                 ReduceAttrs, ReshapeAttrs, DropoutAttrs, CastAttrs, MomentumAttrs, AdamAttrs,
                 PlaceholderAttrs, VariableAttrs, GeluAttrs, LayerNormAttrs, ConcatAttrs,
                 SplitAttrs, ConstAttrs, BatchMatMulAttrs, TransposeAttrs, GatherAttrs,
                 UnsortedSegmentSumAttrs, SparseSoftmaxCrossEntropyAttrs, AllReduceAttrs>;

template <typename T>
const T& attrs_as(const Attrs& a) {
  const T* p = std::get_if<T>(&a);
  CAMPO_CHECK(p != nullptr, "internal: node carries the wrong attribute type");
  return *p;
}

// The layout of an ApplyMomentum or ApplyAdam node with these attrs (UpdateLayout).
UpdateLayout update_layout(OpKind kind, const Attrs& attrs);

// The ignore_label of a SparseSoftmaxCrossEntropyWithLogits node's attributes (NoAttrs:
// none).
inline std::optional<int32_t> ignore_label_of(const Attrs& a) {
  if (std::holds_alternative<NoAttrs>(a)) return std::nullopt;
  return attrs_as<SparseSoftmaxCrossEntropyAttrs>(a).ignore_label;
}

// Output size of a convolution / pooling window along one axis.
inline int64_t window_output_size(int64_t in, int kernel, int stride, int pad, int dilation = 1) {
  return (in + 2 * pad - int64_t(dilation) * (kernel - 1) - 1) / stride + 1;
}

}  // namespace campo
