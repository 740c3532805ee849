// Cast: converts between f32, f16 and bf16 (round to nearest even, runtime/dtype.h).
// The output dtype is CastAttrs.to whatever the node's compute dtype. By convention the
// node's compute dtype is the SOURCE dtype, so the kernel is registered under (Cast, cpu,
// source); the kernel itself reads the actual source type from its input, so a Cast node
// left at the default f32 compute dtype still converts correctly.
// Gradient: dY cast back to X's dtype.
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_cast(const ValueDescs& g, const OpNode& n) {
  DType from = in_dtype(g, n, 0), to = attrs_as<CastAttrs>(n.attrs).to;
  CAMPO_CHECK(is_floating(from) && is_floating(to), "Cast '", n.name, "': ", dtype_name(from),
              " -> ", dtype_name(to), " is not supported (only f32, f16 and bf16)");
  return {{in_shape(g, n, 0), to}};
}

std::vector<ValueId> grad_cast(GradientBuilder& b, const OpNode& n,
                               const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  ValueId dx = b.op(OpKind::Cast, {dy[0]}, CastAttrs{b.dtype(n.inputs[0])});
  b.set_compute_dtype(dx, b.dtype(dy[0]));  // a Cast computes in its source dtype
  return {dx};
}

// Casts are inserted by the precision policies; they never change precision themselves.
SchemaRegistrar cast({.kind = OpKind::Cast,
                      .amp_list = AmpList::fp32,
                      .num_inputs = 1,
                      .infer = infer_cast,
                      .gradient = grad_cast});

}  // namespace
}  // namespace campo
