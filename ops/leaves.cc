// Placeholder (fed every step) and Variable (persistent, from the VariableStore): the
// executor binds both to storage; they have no kernels. Const: computed like any op, by a
// kernel that fills its output (ops/cpu/reshape.cc).
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_placeholder(const ValueDescs&, const OpNode& n) {
  const auto& a = attrs_as<PlaceholderAttrs>(n.attrs);
  return {{a.shape, a.dtype}};
}

std::vector<TensorDesc> infer_variable(const ValueDescs&, const OpNode& n) {
  const auto& a = attrs_as<VariableAttrs>(n.attrs);
  CAMPO_CHECK(is_floating(a.dtype), "Variable '", n.name,
              "' must be stored in f32, f16 or bf16, got ", dtype_name(a.dtype));
  return {{a.shape, a.dtype}};
}

std::vector<TensorDesc> infer_const(const ValueDescs&, const OpNode& n) {
  return {{attrs_as<ConstAttrs>(n.attrs).shape, DType::f32}};
}

SchemaRegistrar placeholder({.kind = OpKind::Placeholder,
                             .amp_list = AmpList::fp32,
                             .num_inputs = 0,
                             .infer = infer_placeholder});
SchemaRegistrar variable({.kind = OpKind::Variable,
                          .amp_list = AmpList::fp32,
                          .num_inputs = 0,
                          .infer = infer_variable});
SchemaRegistrar constant(
    {.kind = OpKind::Const, .amp_list = AmpList::fp32, .num_inputs = 0, .infer = infer_const});

}  // namespace
}  // namespace campo
