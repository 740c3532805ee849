// Losses (deny list: always f32).
//  SparseSoftmaxCrossEntropyWithLogits {logits [N, C], labels [N] i32} ->
//    {loss [N] f32, backprop [N, C] f32}: loss_n = logsumexp(x_n) - x_n[label_n],
//    backprop = softmax(x) - onehot(labels), which is d loss_n / d x_n. Gradient w.r.t.
//    logits: backprop * dloss (dloss [N] broadcast over C); none for labels, and none
//    flows from a gradient of `backprop` (it is not meant to be differentiated).
//    Attributes NoAttrs, or SparseSoftmaxCrossEntropyAttrs with an optional ignore_label
//    (PyTorch's ignore_index, e.g. -100 for unmasked positions of a masked-LM batch): rows
//    whose label equals it get loss 0 and a zero backprop row (so a zero gradient); every
//    other label must lie in [0, C). The mean over the rows that count is the caller's.
//  SigmoidCrossEntropyWithLogits {logits x, targets z} -> element-wise
//    loss = max(x, 0) - x z + log(1 + exp(-|x|)); its gradient op
//    SigmoidCrossEntropyWithLogitsGrad {dloss, x, z} -> dx = dloss * (sigmoid(x) - z).
//    No gradient w.r.t. the targets.
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_sparse_softmax_ce(const ValueDescs& g, const OpNode& n) {
  const Shape& logits = in_shape(g, n, 0);
  const Shape& labels = in_shape(g, n, 1);
  CAMPO_CHECK(is_floating(in_dtype(g, n, 0)), "SparseSoftmaxCrossEntropyWithLogits '", n.name,
              "': logits must be floating point, got ", dtype_name(in_dtype(g, n, 0)));
  check_float_inputs(g, n);
  CAMPO_CHECK(logits.size() == 2, "SparseSoftmaxCrossEntropyWithLogits '", n.name,
              "': logits must be [N, C], got ", shape_str(logits));
  CAMPO_CHECK(in_dtype(g, n, 1) == DType::i32, "SparseSoftmaxCrossEntropyWithLogits '", n.name,
              "': labels must be i32, got ", dtype_name(in_dtype(g, n, 1)));
  CAMPO_CHECK(labels.size() == 1 && labels[0] == logits[0], "SparseSoftmaxCrossEntropyWithLogits '",
              n.name, "': labels must be [N] = [", logits[0], "] for logits ", shape_str(logits),
              ", got ", shape_str(labels));
  CAMPO_CHECK(logits[1] > 0, "SparseSoftmaxCrossEntropyWithLogits '", n.name,
              "': logits need at least one class, got ", shape_str(logits));
  CAMPO_CHECK(std::holds_alternative<NoAttrs>(n.attrs) ||
                  std::holds_alternative<SparseSoftmaxCrossEntropyAttrs>(n.attrs),
              "SparseSoftmaxCrossEntropyWithLogits '", n.name,
              "': internal: its attributes must be SparseSoftmaxCrossEntropyAttrs (or none)");
  return {{{logits[0]}, DType::f32}, {logits, DType::f32}};
}

std::vector<ValueId> grad_sparse_softmax_ce(GradientBuilder& b, const OpNode& n,
                                            const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue, kNoValue};
  return {b.op(OpKind::Mul, {n.outputs[1], dy[0]}), kNoValue};
}

std::vector<TensorDesc> infer_sigmoid_ce(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  const int first = n.kind == OpKind::SigmoidCrossEntropyWithLogitsGrad ? 1 : 0;
  const Shape& s = in_shape(g, n, 0);
  for (int i = 0; i < int(n.inputs.size()); ++i) {
    CAMPO_CHECK(is_floating(in_dtype(g, n, i)), op_name(n.kind), " '", n.name, "': input ", i,
                " must be floating point, got ", dtype_name(in_dtype(g, n, i)));
    CAMPO_CHECK(in_shape(g, n, i) == s, op_name(n.kind), " '", n.name, "': input ", i,
                " has shape ", shape_str(in_shape(g, n, i)), " but input 0 has shape ",
                shape_str(s), first ? " (dloss, logits and targets" : " (logits and targets",
                " must have the same shape)");
  }
  return {{s, n.dtype}};
}

std::vector<ValueId> grad_sigmoid_ce(GradientBuilder& b, const OpNode& n,
                                     const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue, kNoValue};
  return {b.op(OpKind::SigmoidCrossEntropyWithLogitsGrad, {dy[0], n.inputs[0], n.inputs[1]}),
          kNoValue};
}

SchemaRegistrar sparse_softmax_ce({.kind = OpKind::SparseSoftmaxCrossEntropyWithLogits,
                                   .amp_list = AmpList::deny,
                                   .num_inputs = 2,
                                   .infer = infer_sparse_softmax_ce,
                                   .gradient = grad_sparse_softmax_ce});
SchemaRegistrar sigmoid_ce({.kind = OpKind::SigmoidCrossEntropyWithLogits,
                            .amp_list = AmpList::deny,
                            .num_inputs = 2,
                            .infer = infer_sigmoid_ce,
                            .gradient = grad_sigmoid_ce});
SchemaRegistrar sigmoid_ce_grad({.kind = OpKind::SigmoidCrossEntropyWithLogitsGrad,
                                 .amp_list = AmpList::deny,
                                 .num_inputs = 3,
                                 .infer = infer_sigmoid_ce});

}  // namespace
}  // namespace campo
