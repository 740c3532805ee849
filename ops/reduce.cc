// Reductions: Mean and Sum over ReduceAttrs.axes (empty = all axes; negative axes count
// from the end; keep_dims keeps reduced axes as size 1). Both are on the deny list and
// produce f32, accumulated in double by the kernels.
// Their gradients: MeanGrad broadcasts dY back to attrs.input_shape and divides by the
// number of reduced elements; BroadcastTo (Sum's gradient) only broadcasts.
#include <algorithm>

#include "ops/schema_util.h"

namespace campo {
namespace {

// The shape of `in` reduced over `axes` (validated: in range, no duplicates).
Shape reduced_shape(const OpNode& n, const Shape& in, const ReduceAttrs& a) {
  const int rank = int(in.size());
  std::vector<bool> reduced(size_t(rank), a.axes.empty());
  for (int axis : a.axes) {
    CAMPO_CHECK(axis >= -rank && axis < rank, op_name(n.kind), " '", n.name, "': axis ", axis,
                " is out of range for a tensor of shape ", shape_str(in));
    int k = axis < 0 ? axis + rank : axis;
    CAMPO_CHECK(!reduced[size_t(k)], op_name(n.kind), " '", n.name, "': axis ", axis,
                " is listed twice");
    reduced[size_t(k)] = true;
  }
  Shape out;
  for (int i = 0; i < rank; ++i) {
    if (!reduced[size_t(i)])
      out.push_back(in[size_t(i)]);
    else if (a.keep_dims)
      out.push_back(1);
  }
  return out;
}

std::vector<TensorDesc> infer_reduce(const ValueDescs& g, const OpNode& n) {
  CAMPO_CHECK(is_floating(in_dtype(g, n, 0)), op_name(n.kind), " '", n.name,
              "': input must be floating point, got ", dtype_name(in_dtype(g, n, 0)));
  check_float_inputs(g, n);
  return {{reduced_shape(n, in_shape(g, n, 0), attrs_as<ReduceAttrs>(n.attrs)), DType::f32}};
}

// dY has the reduced shape of attrs.input_shape; output has attrs.input_shape.
std::vector<TensorDesc> infer_broadcast_back(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  const auto& a = attrs_as<ReduceAttrs>(n.attrs);
  Shape expected = reduced_shape(n, a.input_shape, a);
  CAMPO_CHECK(in_shape(g, n, 0) == expected, op_name(n.kind), " '", n.name, "': dY has shape ",
              shape_str(in_shape(g, n, 0)), " but reducing ", shape_str(a.input_shape), " gives ",
              shape_str(expected));
  return {{a.input_shape, n.dtype}};
}

std::vector<ValueId> grad_reduce(GradientBuilder& b, const OpNode& n,
                                 const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  ReduceAttrs a = attrs_as<ReduceAttrs>(n.attrs);
  a.input_shape = b.shape(n.inputs[0]);
  OpKind k = n.kind == OpKind::Mean ? OpKind::MeanGrad : OpKind::BroadcastTo;
  return {b.op(k, {dy[0]}, a)};
}

SchemaRegistrar mean({.kind = OpKind::Mean,
                      .amp_list = AmpList::deny,
                      .num_inputs = 1,
                      .infer = infer_reduce,
                      .gradient = grad_reduce});
SchemaRegistrar sum({.kind = OpKind::Sum,
                     .amp_list = AmpList::deny,
                     .num_inputs = 1,
                     .infer = infer_reduce,
                     .gradient = grad_reduce});
// MeanGrad is a broadcast and a division (TensorFlow builds it from a broadcast and
// RealDiv, an infer-list op); BroadcastTo only moves data (clear).
SchemaRegistrar mean_grad({.kind = OpKind::MeanGrad,
                           .amp_list = AmpList::infer,
                           .num_inputs = 1,
                           .infer = infer_broadcast_back});
SchemaRegistrar broadcast_to({.kind = OpKind::BroadcastTo,
                              .amp_list = AmpList::clear,
                              .num_inputs = 1,
                              .infer = infer_broadcast_back});

}  // namespace
}  // namespace campo
