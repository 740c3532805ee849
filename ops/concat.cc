// ConcatV2 and SplitV: joining tensors along one axis, and cutting one apart again.
//   ConcatV2(x_0, ..., x_{N-1}; axis): y has x_0's shape with y[axis] = sum_i x_i[axis];
//     every input has x_0's rank and dims except at `axis`. N >= 1.
//   SplitV(x; axis, size_splits): output k is the slice of x along `axis` from
//     sum_{j<k} size_splits[j] of length size_splits[k]; the sizes sum to x[axis].
// Each is the other's gradient: dx_i = SplitV(dy; axis, [x_0[axis], ...])[i], one node with N
// outputs (as TensorFlow's _ConcatGrad does with SplitV for many inputs), and SplitV's
// dx = ConcatV2(dy_0, ..., dy_{N-1}; axis).
// Both only move data, so they are on TensorFlow's clear list (CUDA and oneDNN lists alike)
// and follow their inputs' precision. Floating inputs take the node's compute dtype; integer
// inputs (all of one type) keep it, as Reshape's.
#include "ops/schema_util.h"

namespace campo {
namespace {

// `axis` in [0, rank) for a tensor of `rank` dims; -rank <= axis < 0 counts from the end.
int resolve_axis(const OpNode& n, int axis, const Shape& shape) {
  const int rank = int(shape.size());
  CAMPO_CHECK(rank >= 1, op_name(n.kind), " '", n.name,
              "': input 0 is a scalar; it has no axis to concatenate or split along");
  CAMPO_CHECK(axis >= -rank && axis < rank, op_name(n.kind), " '", n.name, "': axis ", axis,
              " is out of range for input 0 of shape ", shape_str(shape), " (expected ", -rank,
              " .. ", rank - 1, ")");
  return axis < 0 ? axis + rank : axis;
}

// Output dtype for inputs of one type: the node's compute dtype when floating, else theirs.
DType output_dtype(const ValueDescs& g, const OpNode& n) {
  const DType first = in_dtype(g, n, 0);
  for (int i = 1; i < int(n.inputs.size()); ++i)
    CAMPO_CHECK(is_floating(in_dtype(g, n, i)) == is_floating(first) &&
                    (is_floating(first) || in_dtype(g, n, i) == first),
                op_name(n.kind), " '", n.name, "': input ", i, " is ",
                dtype_name(in_dtype(g, n, i)), " but input 0 is ", dtype_name(first),
                " (all inputs must have one type)");
  check_float_inputs(g, n);
  return is_floating(first) ? n.dtype : first;
}

std::vector<TensorDesc> infer_concat(const ValueDescs& g, const OpNode& n) {
  CAMPO_CHECK(!n.inputs.empty(), "ConcatV2 '", n.name, "' needs at least one input");
  const DType out_type = output_dtype(g, n);
  const Shape& s0 = in_shape(g, n, 0);
  const int axis = resolve_axis(n, attrs_as<ConcatAttrs>(n.attrs).axis, s0);
  Shape out = s0;
  out[size_t(axis)] = 0;
  for (int i = 0; i < int(n.inputs.size()); ++i) {
    const Shape& s = in_shape(g, n, i);
    CAMPO_CHECK(s.size() == s0.size(), "ConcatV2 '", n.name, "': input ", i, " has rank ", s.size(),
                " (shape ", shape_str(s), ") but input 0 has rank ", s0.size(), " (shape ",
                shape_str(s0), ")");
    for (size_t d = 0; d < s.size(); ++d)
      CAMPO_CHECK(int(d) == axis || s[d] == s0[d], "ConcatV2 '", n.name, "': input ", i,
                  " has shape ", shape_str(s), " but input 0 has shape ", shape_str(s0),
                  ": dimension ", d, " differs (", s[d], " vs ", s0[d],
                  "); only the concatenation axis ", axis, " may");
    out[size_t(axis)] += s[size_t(axis)];
  }
  return {{out, out_type}};
}

std::vector<TensorDesc> infer_split(const ValueDescs& g, const OpNode& n) {
  const DType out_type = output_dtype(g, n);
  const Shape& in = in_shape(g, n, 0);
  const auto& a = attrs_as<SplitAttrs>(n.attrs);
  const int axis = resolve_axis(n, a.axis, in);
  CAMPO_CHECK(!a.size_splits.empty(), "SplitV '", n.name, "': size_splits is empty (one size ",
              "per output)");
  int64_t total = 0;
  std::vector<TensorDesc> outs;
  for (size_t k = 0; k < a.size_splits.size(); ++k) {
    CAMPO_CHECK(a.size_splits[k] >= 0, "SplitV '", n.name, "': size_splits[", k, "] is ",
                a.size_splits[k], " (sizes must be >= 0)");
    total += a.size_splits[k];
    Shape s = in;
    s[size_t(axis)] = a.size_splits[k];
    outs.push_back({s, out_type});
  }
  CAMPO_CHECK(total == in[size_t(axis)], "SplitV '", n.name, "': size_splits ",
              shape_str(a.size_splits), " sum to ", total, " but input 0 of shape ", shape_str(in),
              " has ", in[size_t(axis)], " along axis ", axis);
  return outs;
}

// dx_i = dy[..., offset_i : offset_i + x_i[axis], ...] along the axis, all N in one SplitV.
std::vector<ValueId> grad_concat(GradientBuilder& b, const OpNode& n,
                                 const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return std::vector<ValueId>(n.inputs.size(), kNoValue);
  if (n.inputs.size() == 1) return {dy[0]};
  SplitAttrs split;
  split.axis = resolve_axis(n, attrs_as<ConcatAttrs>(n.attrs).axis, b.shape(n.inputs[0]));
  for (ValueId x : n.inputs) split.size_splits.push_back(b.shape(x)[size_t(split.axis)]);
  return b.op_multi(OpKind::SplitV, {dy[0]}, split);
}

// dx = ConcatV2(dy_0, ..., dy_{N-1}). A piece whose output does not reach the loss (a
// model that keeps only the first rows of a table, as BERT's position embeddings) gets
// zeros: an f32 Const of its shape (the precision policy, applied after autodiff, casts it
// where the concatenation runs in low precision).
std::vector<ValueId> grad_split(GradientBuilder& b, const OpNode& n,
                                const std::vector<ValueId>& dy) {
  bool any = false;
  for (ValueId v : dy) any = any || v != kNoValue;
  if (!any) return {kNoValue};
  std::vector<ValueId> pieces = dy;
  for (size_t k = 0; k < pieces.size(); ++k)
    if (pieces[k] == kNoValue)
      pieces[k] = b.op(OpKind::Const, {}, ConstAttrs{b.shape(n.outputs[k]), 0.0f},
                       n.name + "/zeros" + std::to_string(k));
  const auto& a = attrs_as<SplitAttrs>(n.attrs);
  return {
      b.op(OpKind::ConcatV2, pieces, ConcatAttrs{resolve_axis(n, a.axis, b.shape(n.inputs[0]))})};
}

SchemaRegistrar concat({.kind = OpKind::ConcatV2,
                        .amp_list = AmpList::clear,
                        .num_inputs = -1,
                        .infer = infer_concat,
                        .gradient = grad_concat});
SchemaRegistrar split({.kind = OpKind::SplitV,
                       .amp_list = AmpList::clear,
                       .num_inputs = 1,
                       .infer = infer_split,
                       .gradient = grad_split});

}  // namespace
}  // namespace campo
