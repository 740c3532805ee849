// Reshape: the same elements (row-major order) under another shape. ReshapeAttrs.shape may
// hold one -1, inferred from the element count. Gradient: dY reshaped back to X's shape.
#include "ops/schema_util.h"

namespace campo {
namespace {

Shape resolve_shape(const OpNode& n, const Shape& in, const Shape& requested) {
  const int64_t total = shape_numel(in);
  int inferred_axis = -1;
  int64_t known = 1;
  for (int i = 0; i < int(requested.size()); ++i) {
    if (requested[size_t(i)] == -1) {
      CAMPO_CHECK(inferred_axis < 0, "Reshape '", n.name, "': target shape ", shape_str(requested),
                  " has more than one -1");
      inferred_axis = i;
    } else {
      CAMPO_CHECK(requested[size_t(i)] >= 0, "Reshape '", n.name, "': target shape ",
                  shape_str(requested), " has a negative dimension other than -1");
      known *= requested[size_t(i)];
    }
  }
  Shape out = requested;
  if (inferred_axis >= 0) {
    CAMPO_CHECK(known != 0 && total % known == 0, "Reshape '", n.name, "': cannot reshape ",
                shape_str(in), " (", total, " elements) to ", shape_str(requested),
                ": the -1 cannot be inferred");
    out[size_t(inferred_axis)] = total / known;
  }
  CAMPO_CHECK(shape_numel(out) == total, "Reshape '", n.name, "': cannot reshape ", shape_str(in),
              " (", total, " elements) to ", shape_str(requested), " (", shape_numel(out),
              " elements)");
  return out;
}

// Floating inputs take the node's compute dtype; integer inputs (labels) keep theirs.
std::vector<TensorDesc> infer_reshape(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  const Shape& in = in_shape(g, n, 0);
  DType in_type = in_dtype(g, n, 0);
  Shape out = resolve_shape(n, in, attrs_as<ReshapeAttrs>(n.attrs).shape);
  return {{out, is_floating(in_type) ? n.dtype : in_type}};
}

std::vector<ValueId> grad_reshape(GradientBuilder& b, const OpNode& n,
                                  const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  return {b.op(OpKind::Reshape, {dy[0]}, ReshapeAttrs{b.shape(n.inputs[0])})};
}

SchemaRegistrar reshape({.kind = OpKind::Reshape,
                         .amp_list = AmpList::clear,
                         .num_inputs = 1,
                         .infer = infer_reshape,
                         .gradient = grad_reshape});

}  // namespace
}  // namespace campo
