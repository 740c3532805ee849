// AllFinite {g1, ..., gk} -> f32 scalar: 1 when every element of every input is finite,
// 0 when any is inf or NaN. The loss scaler's one pass over all gradients: its result
// decides whether the optimizer update runs. Never low precision, no gradient.
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_all_finite(const ValueDescs& g, const OpNode& n) {
  CAMPO_CHECK(!n.inputs.empty(), "AllFinite '", n.name, "' needs at least one input");
  for (int i = 0; i < int(n.inputs.size()); ++i)
    CAMPO_CHECK(is_floating(in_dtype(g, n, i)), "AllFinite '", n.name, "': input ", i, " is ",
                dtype_name(in_dtype(g, n, i)), ", expected a floating type");
  return {{{}, DType::f32}};
}

SchemaRegistrar all_finite({.kind = OpKind::AllFinite,
                            .amp_list = AmpList::fp32,
                            .num_inputs = -1,
                            .infer = infer_all_finite});

}  // namespace
}  // namespace campo
