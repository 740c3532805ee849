// Softmax / SoftmaxGrad schemas. Softmax normalises over the last axis, as TensorFlow's
// Softmax op (tf.nn.softmax with axis=-1): y = exp(x - max(x)) / sum(exp(x - max(x))).
// SoftmaxGrad takes {dY, Y} (the forward's output, so the forward's input may be freed):
// dX = (dY - sum(dY * Y, last axis)) * Y.
//
// Mixed-precision lists: Softmax is on the infer list in both of TensorFlow's lists
// (AutoMixedPrecisionListsFp16 for CUDA and AutoMixedPrecisionListsMkl for oneDNN bf16,
// tensorflow/core/grappler/optimizers/auto_mixed_precision_lists.h). TensorFlow has no
// SoftmaxGrad op: its gradient (nn_grad.py) is Sub, Mul (infer) and Sum (deny on CUDA,
// infer on oneDNN); the deny there is for sums accumulated in f16, and SoftmaxGrad's
// kernels sum in f32 whatever the data type, so it follows Softmax onto infer.
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_softmax(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  const Shape& x = in_shape(g, n, 0);
  CAMPO_CHECK(!x.empty(), "Softmax '", n.name,
              "': logits must have at least one dimension (softmax runs over the last axis), "
              "got a scalar");
  return {{x, n.dtype}};
}

std::vector<TensorDesc> infer_softmax_grad(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  const Shape& dy = in_shape(g, n, 0);
  const Shape& y = in_shape(g, n, 1);
  CAMPO_CHECK(dy == y, "SoftmaxGrad '", n.name, "': dy has shape ", shape_str(dy),
              " but y has shape ", shape_str(y), " (they must match)");
  CAMPO_CHECK(!y.empty(), "SoftmaxGrad '", n.name, "': y must have at least one dimension");
  return {{y, n.dtype}};
}

std::vector<ValueId> grad_softmax(GradientBuilder& b, const OpNode& n,
                                  const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::SoftmaxGrad, {dy[0], n.outputs[0]})};
}

SchemaRegistrar softmax({.kind = OpKind::Softmax,
                         .amp_list = AmpList::infer,
                         .num_inputs = 1,
                         .infer = infer_softmax,
                         .gradient = grad_softmax});
SchemaRegistrar softmax_grad({.kind = OpKind::SoftmaxGrad,
                              .amp_list = AmpList::infer,
                              .num_inputs = 2,
                              .infer = infer_softmax_grad});

}  // namespace
}  // namespace campo
