// BiasAdd and BiasAddGrad: a per-channel bias along axis 1 (x is [N, C] or [N, C, H, W]).
//   BiasAdd     {x, bias [C]} -> y = x + bias[c]
//   BiasAddGrad {dy}          -> dbias[c] = sum over every axis but 1 of dy
#include "ops/schema_util.h"

namespace campo {
namespace {

std::string op_label(const OpNode& n) { return std::string(op_name(n.kind)) + " '" + n.name + "'"; }

void check_all_floating(const ValueDescs& g, const OpNode& n) {
  for (int i = 0; i < int(n.inputs.size()); ++i)
    CAMPO_CHECK(is_floating(in_dtype(g, n, i)), op_label(n), ": input ", i, " is ",
                dtype_name(in_dtype(g, n, i)), ", expected a floating type");
  check_float_inputs(g, n);
}

std::vector<TensorDesc> infer_bias_add(const ValueDescs& g, const OpNode& n) {
  check_all_floating(g, n);
  const Shape& x = in_shape(g, n, 0);
  const Shape& bias = in_shape(g, n, 1);
  CAMPO_CHECK(x.size() >= 2, op_label(n), ": x must have a channel axis 1, got ", shape_str(x));
  CAMPO_CHECK(bias.size() == 1 && bias[0] == x[1], op_label(n), ": bias ", shape_str(bias),
              " does not match the ", x[1], " channels (axis 1) of x ", shape_str(x));
  return {{x, n.dtype}};
}

std::vector<TensorDesc> infer_bias_add_grad(const ValueDescs& g, const OpNode& n) {
  check_all_floating(g, n);
  const Shape& dy = in_shape(g, n, 0);
  CAMPO_CHECK(dy.size() >= 2, op_label(n), ": dy must have a channel axis 1, got ", shape_str(dy));
  return {{{dy[1]}, n.dtype}};
}

// y = x + bias: dx = dy, dbias = BiasAddGrad(dy).
std::vector<ValueId> grad_bias_add(GradientBuilder& b, const OpNode& n,
                                   const std::vector<ValueId>& dys) {
  const ValueId dy = dys[0];
  if (dy == kNoValue) return {kNoValue, kNoValue};
  return {dy, b.op(OpKind::BiasAddGrad, {dy})};
}

SchemaRegistrar bias_add({.kind = OpKind::BiasAdd,
                          .amp_list = AmpList::infer,
                          .num_inputs = 2,
                          .infer = infer_bias_add,
                          .gradient = grad_bias_add,
                          .fp32_inputs = {}});
// Its own gradient (a broadcast of dbias) is not needed by any model: none flows.
SchemaRegistrar bias_add_grad({.kind = OpKind::BiasAddGrad,
                               .amp_list = AmpList::infer,
                               .num_inputs = 1,
                               .infer = infer_bias_add_grad,
                               .fp32_inputs = {}});

}  // namespace
}  // namespace campo
