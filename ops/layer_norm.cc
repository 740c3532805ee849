// LayerNorm / LayerNormGrad schemas: layer normalisation over the last axis with a scale
// and an offset, PyTorch's nn.LayerNorm(C) (biased variance, epsilon inside the square
// root). Data (x, y, dy, dx) is [..., C] in the node's compute dtype; scale, offset,
// dscale and doffset are [C], mean and inv_std are x's shape without the last axis, all
// f32 (as batch norm's: TensorFlow's U=float), hence fp32_inputs and the f32 outputs.
//
// One fused op rather than a composition of existing ones: a composition needs ops campo
// does not have (Sub, Rsqrt, broadcasting of [C] along leading axes, a keep-dims Mean over
// the last axis), passes over x for each of them (about ten instead of three), and Mean on
// the deny list, which would keep every layer norm in f32 under the amp policy.
//
// The name is Keras's layer (LayerNormalization) shortened as PyTorch and XLA's kernels
// name it; TensorFlow itself has no layer-norm op on its mixed-precision lists. Keras's
// fused LayerNormalization runs TensorFlow's FusedBatchNormV3 on a reshaped x, which is on
// the infer list of both AutoMixedPrecisionListsFp16 (CUDA) and AutoMixedPrecisionListsMkl
// (oneDNN bf16) (tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h), with
// its statistics in f32: LayerNorm and LayerNormGrad are infer, statistics f32.
#include "ops/schema_util.h"

namespace campo {
namespace {

// x's last-axis size C, after checking x has rank >= 1 and every per-feature input
// (indices `feature_inputs`) is [C].
int64_t check_ln_shapes(const ValueDescs& g, const OpNode& n, int x_input,
                        std::initializer_list<int> feature_inputs,
                        std::initializer_list<const char*> feature_names) {
  const Shape& x = in_shape(g, n, x_input);
  CAMPO_CHECK(!x.empty(), op_name(n.kind), " '", n.name,
              "': x must have at least one dimension (normalised over the last), got a scalar");
  const int64_t c = x.back();
  auto name = feature_names.begin();
  for (int i : feature_inputs) {
    const Shape& s = in_shape(g, n, i);
    CAMPO_CHECK(s == Shape{c}, op_name(n.kind), " '", n.name, "': ", *name, " has shape ",
                shape_str(s), ", expected [", c, "] (the last axis of x ", shape_str(x), ")");
    ++name;
  }
  return c;
}

void check_ln_attrs(const OpNode& n) {
  const float eps = attrs_as<LayerNormAttrs>(n.attrs).epsilon;
  CAMPO_CHECK(eps >= 0.0f && eps < 1e30f, op_name(n.kind), " '", n.name,
              "': epsilon must be finite and >= 0, got ", eps);
}

Shape rows_shape(const Shape& x) { return Shape(x.begin(), x.end() - 1); }

std::vector<TensorDesc> infer_layer_norm(const ValueDescs& g, const OpNode& n) {
  check_ln_attrs(n);
  check_float_inputs(g, n);
  check_ln_shapes(g, n, 0, {1, 2}, {"scale", "offset"});
  const Shape& x = in_shape(g, n, 0);
  return {{x, n.dtype}, {rows_shape(x), DType::f32}, {rows_shape(x), DType::f32}};
}

// dx, dscale, doffset = LayerNormGrad(dy, x, scale, mean, inv_std).
std::vector<ValueId> grad_layer_norm(GradientBuilder& b, const OpNode& n,
                                     const std::vector<ValueId>& dys) {
  CAMPO_CHECK(dys.at(1) == kNoValue && dys.at(2) == kNoValue, op_name(n.kind), " '", n.name,
              "': gradients through the mean and inv_std outputs are not supported");
  if (dys[0] == kNoValue) return {kNoValue, kNoValue, kNoValue};
  auto g = b.op_multi(OpKind::LayerNormGrad,
                      {dys[0], n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2]}, n.attrs);
  return {g[0], g[1], g[2]};
}

std::vector<TensorDesc> infer_layer_norm_grad(const ValueDescs& g, const OpNode& n) {
  check_ln_attrs(n);
  check_float_inputs(g, n);
  const int64_t c = check_ln_shapes(g, n, 1, {2}, {"scale"});
  const Shape& dy = in_shape(g, n, 0);
  const Shape& x = in_shape(g, n, 1);
  CAMPO_CHECK(dy == x, op_name(n.kind), " '", n.name, "': dy has shape ", shape_str(dy),
              " but x has shape ", shape_str(x), " (they must match)");
  const Shape rows = rows_shape(x);
  CAMPO_CHECK(in_shape(g, n, 3) == rows && in_shape(g, n, 4) == rows, op_name(n.kind), " '", n.name,
              "': mean and inv_std have shapes ", shape_str(in_shape(g, n, 3)), " and ",
              shape_str(in_shape(g, n, 4)), ", expected ", shape_str(rows),
              " (x's shape without the last axis)");
  return {{x, n.dtype}, {{c}, DType::f32}, {{c}, DType::f32}};
}

SchemaRegistrar layer_norm({.kind = OpKind::LayerNorm,
                            .amp_list = AmpList::infer,
                            .num_inputs = 3,
                            .infer = infer_layer_norm,
                            .gradient = grad_layer_norm,
                            .fp32_inputs = {1, 2}});
SchemaRegistrar layer_norm_grad({.kind = OpKind::LayerNormGrad,
                                 .amp_list = AmpList::infer,
                                 .num_inputs = 5,
                                 .infer = infer_layer_norm_grad,
                                 .fp32_inputs = {2, 3, 4}});

}  // namespace
}  // namespace campo
