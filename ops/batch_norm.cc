// FusedBatchNorm / FusedBatchNormGrad schemas.
// Data (x, y, dy, dx) is [N, C, H, W] or [N, C] in the node's compute dtype; everything
// per channel (scale, offset, running and batch statistics, dscale, doffset) is [C] and
// always f32 (TensorFlow's U=float), hence fp32_inputs and the f32 statistic outputs.
// Training mode writes the running statistics (inputs 3 and 4) in place, so the op has
// side effects. The gradient carries the forward's attributes: in training mode the batch
// statistics depend on x, in inference mode (frozen statistics) they do not.
#include "ops/schema_util.h"

namespace campo {
namespace {

// x's channel count, after checking x is [N, C] or [N, C, H, W] and every per-channel
// input (indices `channel_inputs`) is [C].
int64_t check_bn_shapes(const ValueDescs& g, const OpNode& n,
                        std::initializer_list<int> channel_inputs,
                        std::initializer_list<const char*> channel_names) {
  const Shape& x = in_shape(g, n, 0);
  CAMPO_CHECK(x.size() == 2 || x.size() == 4, op_name(n.kind), " '", n.name,
              "': data must be [N, C] or [N, C, H, W], got ", shape_str(x));
  const int64_t c = x[1];
  auto name = channel_names.begin();
  for (int i : channel_inputs) {
    const Shape& s = in_shape(g, n, i);
    CAMPO_CHECK(s == Shape{c}, op_name(n.kind), " '", n.name, "': ", *name, " has shape ",
                shape_str(s), ", expected [", c, "] (the channel count of ", shape_str(x), ")");
    ++name;
  }
  return c;
}

void check_bn_attrs(const OpNode& n, const BatchNormAttrs& a) {
  CAMPO_CHECK(a.epsilon >= 0.0f, op_name(n.kind), " '", n.name, "': epsilon must be >= 0, got ",
              a.epsilon);
  CAMPO_CHECK(a.momentum >= 0.0f && a.momentum <= 1.0f, op_name(n.kind), " '", n.name,
              "': momentum must be in [0, 1], got ", a.momentum);
}

std::vector<TensorDesc> infer_batch_norm(const ValueDescs& g, const OpNode& n) {
  const auto& a = attrs_as<BatchNormAttrs>(n.attrs);
  check_bn_attrs(n, a);
  check_float_inputs(g, n);
  const int64_t c =
      check_bn_shapes(g, n, {1, 2, 3, 4}, {"scale", "offset", "running_mean", "running_var"});
  const Shape& x = in_shape(g, n, 0);
  if (a.is_training) {
    // The unbiased variance for the running statistics divides by count - 1.
    const int64_t count = shape_numel(x) / c;
    CAMPO_CHECK(count > 1, op_name(n.kind), " '", n.name,
                "': training needs more than one value per channel, got ", shape_str(x));
  }
  return {{x, n.dtype}, {{c}, DType::f32}, {{c}, DType::f32}};
}

// dx, dscale, doffset = FusedBatchNormGrad(dy, x, scale, batch_mean, batch_inv_std).
// No gradient reaches offset's statistics or the running statistics.
std::vector<ValueId> grad_batch_norm(GradientBuilder& b, const OpNode& n,
                                     const std::vector<ValueId>& dys) {
  CAMPO_CHECK(dys.at(1) == kNoValue && dys.at(2) == kNoValue, op_name(n.kind), " '", n.name,
              "': gradients through the batch statistics outputs are not supported");
  if (dys[0] == kNoValue) return {kNoValue, kNoValue, kNoValue, kNoValue, kNoValue};
  auto g = b.op_multi(OpKind::FusedBatchNormGrad,
                      {dys[0], n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2]}, n.attrs);
  return {g[0], g[1], g[2], kNoValue, kNoValue};
}

std::vector<TensorDesc> infer_batch_norm_grad(const ValueDescs& g, const OpNode& n) {
  check_bn_attrs(n, attrs_as<BatchNormAttrs>(n.attrs));
  check_float_inputs(g, n);
  const int64_t c = check_bn_shapes(g, n, {2, 3, 4}, {"scale", "batch_mean", "batch_inv_std"});
  const Shape& dy = in_shape(g, n, 0);
  const Shape& x = in_shape(g, n, 1);
  CAMPO_CHECK(dy == x, op_name(n.kind), " '", n.name, "': dy has shape ", shape_str(dy),
              ", x has shape ", shape_str(x));
  return {{x, n.dtype}, {{c}, DType::f32}, {{c}, DType::f32}};
}

SchemaRegistrar batch_norm({.kind = OpKind::FusedBatchNorm,
                            .amp_list = AmpList::infer,
                            .num_inputs = 5,
                            .infer = infer_batch_norm,
                            .gradient = grad_batch_norm,
                            // Per-node would be "only when training"; a schema flag is per
                            // op, and an unused inference-mode batch norm is rare and cheap.
                            .has_side_effects = true,
                            .fp32_inputs = {1, 2, 3, 4}});

SchemaRegistrar batch_norm_grad({.kind = OpKind::FusedBatchNormGrad,
                                 .amp_list = AmpList::infer,
                                 .num_inputs = 5,
                                 .infer = infer_batch_norm_grad,
                                 .fp32_inputs = {2, 3, 4}});

}  // namespace
}  // namespace campo
