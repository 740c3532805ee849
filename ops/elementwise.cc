// Element-wise op schemas: activations and their gradients (Relu, LeakyRelu, Tanh, Sigmoid,
// Gelu), Add, AddN, Mul (with scalar / prefix broadcasting of b) and Dropout.
// Gradient ops take dY first; an activation's gradient reads Y where the derivative is a
// function of the output (Relu, Tanh, Sigmoid) and X otherwise (LeakyRelu, Gelu).
#include <algorithm>

#include "ops/schema_util.h"

namespace campo {
namespace {

// Every input has input 0's shape; output = that shape in the node's compute dtype.
std::vector<TensorDesc> infer_same_shapes(const ValueDescs& g, const OpNode& n) {
  CAMPO_CHECK(!n.inputs.empty(), op_name(n.kind), " '", n.name, "' needs at least one input");
  check_float_inputs(g, n);
  const Shape& s0 = in_shape(g, n, 0);
  for (int i = 1; i < int(n.inputs.size()); ++i)
    CAMPO_CHECK(in_shape(g, n, i) == s0, op_name(n.kind), " '", n.name, "': input ", i,
                " has shape ", shape_str(in_shape(g, n, i)), " but input 0 has shape ",
                shape_str(s0), " (shapes must match)");
  return {{s0, n.dtype}};
}

// ---- activations ----

std::vector<ValueId> grad_relu(GradientBuilder& b, const OpNode& n,
                               const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::ReluGrad, {dy[0], n.outputs[0]})};
}

std::vector<ValueId> grad_leaky_relu(GradientBuilder& b, const OpNode& n,
                                     const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::LeakyReluGrad, {dy[0], n.inputs[0]}, n.attrs)};
}

std::vector<ValueId> grad_tanh(GradientBuilder& b, const OpNode& n,
                               const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::TanhGrad, {dy[0], n.outputs[0]})};
}

std::vector<ValueId> grad_sigmoid(GradientBuilder& b, const OpNode& n,
                                  const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::SigmoidGrad, {dy[0], n.outputs[0]})};
}

SchemaRegistrar relu({.kind = OpKind::Relu,
                      .amp_list = AmpList::clear,
                      .num_inputs = 1,
                      .infer = infer_same_as_input0,
                      .gradient = grad_relu});
SchemaRegistrar relu_grad({.kind = OpKind::ReluGrad,
                           .amp_list = AmpList::clear,
                           .num_inputs = 2,
                           .infer = infer_same_shapes});
SchemaRegistrar leaky_relu({.kind = OpKind::LeakyRelu,
                            .amp_list = AmpList::infer,
                            .num_inputs = 1,
                            .infer = infer_same_as_input0,
                            .gradient = grad_leaky_relu});
SchemaRegistrar leaky_relu_grad({.kind = OpKind::LeakyReluGrad,
                                 .amp_list = AmpList::infer,
                                 .num_inputs = 2,
                                 .infer = infer_same_shapes});
SchemaRegistrar tanh_op({.kind = OpKind::Tanh,
                         .amp_list = AmpList::infer,
                         .num_inputs = 1,
                         .infer = infer_same_as_input0,
                         .gradient = grad_tanh});
SchemaRegistrar tanh_grad({.kind = OpKind::TanhGrad,
                           .amp_list = AmpList::infer,
                           .num_inputs = 2,
                           .infer = infer_same_shapes});
// Gelu: TensorFlow has no Gelu op on its mixed-precision lists; tf.nn.gelu composes the
// exact form (BERT's) of Mul, AddV2, RealDiv and Erf, all on the infer list of both
// AutoMixedPrecisionListsFp16 (CUDA) and AutoMixedPrecisionListsMkl (oneDNN bf16), so Gelu
// and GeluGrad are infer. (Its tanh form adds a Pow, deny, against f16 overflow of x^3; the
// kernels here compute x^3 in f32, so the approximate form stays infer too.)
std::vector<ValueId> grad_gelu(GradientBuilder& b, const OpNode& n,
                               const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::GeluGrad, {dy[0], n.inputs[0]}, n.attrs)};
}

SchemaRegistrar gelu({.kind = OpKind::Gelu,
                      .amp_list = AmpList::infer,
                      .num_inputs = 1,
                      .infer = infer_same_as_input0,
                      .gradient = grad_gelu});
SchemaRegistrar gelu_grad({.kind = OpKind::GeluGrad,
                           .amp_list = AmpList::infer,
                           .num_inputs = 2,
                           .infer = infer_same_shapes});
SchemaRegistrar sigmoid({.kind = OpKind::Sigmoid,
                         .amp_list = AmpList::infer,
                         .num_inputs = 1,
                         .infer = infer_same_as_input0,
                         .gradient = grad_sigmoid});
SchemaRegistrar sigmoid_grad({.kind = OpKind::SigmoidGrad,
                              .amp_list = AmpList::infer,
                              .num_inputs = 2,
                              .infer = infer_same_shapes});

// ---- sums ----

// d(a + b) = (dY, dY); d(x1 + ... + xk) = (dY, ..., dY).
std::vector<ValueId> grad_pass_to_all(GradientBuilder&, const OpNode& n,
                                      const std::vector<ValueId>& dy) {
  return std::vector<ValueId>(n.inputs.size(), dy[0]);
}

SchemaRegistrar add({.kind = OpKind::Add,
                     .amp_list = AmpList::infer,
                     .num_inputs = 2,
                     .infer = infer_same_shapes,
                     .gradient = grad_pass_to_all});
SchemaRegistrar add_n({.kind = OpKind::AddN,
                       .amp_list = AmpList::infer,
                       .num_inputs = -1,
                       .infer = infer_same_shapes,
                       .gradient = grad_pass_to_all});

// ---- Mul ----

// b broadcasts against a when it has a's shape, is a scalar ([]), or is a prefix of a's
// shape ([N] times [N, C]: b repeats along a's trailing dims).
std::vector<TensorDesc> infer_mul(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  const Shape& a = in_shape(g, n, 0);
  const Shape& bs = in_shape(g, n, 1);
  bool is_prefix = bs.size() <= a.size() && std::equal(bs.begin(), bs.end(), a.begin());
  CAMPO_CHECK(is_prefix, "Mul '", n.name, "': b of shape ", shape_str(bs),
              " does not broadcast against a of shape ", shape_str(a),
              " (b must have a's shape, be a scalar, or be a prefix of a's shape)");
  return {{a, n.dtype}};
}

// dA = dY * b (b broadcast as in the forward); dB = dY * a summed over the broadcast
// (trailing) axes of a, or dY * a itself when the shapes match.
std::vector<ValueId> grad_mul(GradientBuilder& b, const OpNode& n, const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue, kNoValue};
  ValueId a = n.inputs[0], bv = n.inputs[1];
  ValueId da = b.op(OpKind::Mul, {dy[0], bv});
  ValueId dy_a = b.op(OpKind::Mul, {dy[0], a});
  const int rank_a = int(b.shape(a).size()), rank_b = int(b.shape(bv).size());
  if (rank_a == rank_b) return {da, dy_a};
  ReduceAttrs r;
  for (int axis = rank_b; axis < rank_a; ++axis) r.axes.push_back(axis);
  return {da, b.op(OpKind::Sum, {dy_a}, r)};
}

SchemaRegistrar mul({.kind = OpKind::Mul,
                     .amp_list = AmpList::infer,
                     .num_inputs = 2,
                     .infer = infer_mul,
                     .gradient = grad_mul});

// ---- Dropout ----

std::vector<TensorDesc> infer_dropout(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  const auto& a = attrs_as<DropoutAttrs>(n.attrs);
  const Shape& s = in_shape(g, n, 0);
  if (a.slice_rates.empty()) {
    CAMPO_CHECK(a.rate >= 0.0f && a.rate < 1.0f, "Dropout '", n.name,
                "': rate must be in [0, 1), got ", a.rate);
  } else {
    const int64_t slices = int64_t(a.slice_rates.size());
    CAMPO_CHECK(s.size() >= 2 && s[1] % slices == 0, "Dropout '", n.name, "': ", slices,
                " slice rates need x of rank >= 2 with dim 1 divisible by ", slices, ", got ",
                shape_str(s));
    for (size_t i = 0; i < a.slice_rates.size(); ++i)
      CAMPO_CHECK(a.slice_rates[i] >= 0.0f && a.slice_rates[i] < 1.0f, "Dropout '", n.name,
                  "': slice rate ", i, " must be in [0, 1), got ", a.slice_rates[i]);
  }
  return {{s, n.dtype}, {s, n.dtype}};
}

// dX = dY * mask (the forward's mask output, so per-slice rates need nothing more here).
std::vector<ValueId> grad_dropout(GradientBuilder& b, const OpNode& n,
                                  const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::Mul, {dy[0], n.outputs[1]})};
}

// Dropout is pure data scaling, so it follows its neighbours' precision (clear list).
SchemaRegistrar dropout({.kind = OpKind::Dropout,
                         .amp_list = AmpList::clear,
                         .num_inputs = 1,
                         .infer = infer_dropout,
                         .gradient = grad_dropout});

}  // namespace
}  // namespace campo
