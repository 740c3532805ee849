#include "ops/schema_util.h"

namespace campo {

void check_input_dtype(const ValueDescs& g, const OpNode& n, int i) {
  const OpSchema& s = op_schema(n.kind);
  DType want = s.input_stays_f32(i) ? DType::f32 : n.dtype;
  DType got = in_dtype(g, n, i);
  CAMPO_CHECK(got == want, op_name(n.kind), " '", n.name, "': input ", i, " is ", dtype_name(got),
              ", expected ", dtype_name(want));
}

void check_float_inputs(const ValueDescs& g, const OpNode& n) {
  for (int i = 0; i < int(n.inputs.size()); ++i)
    if (is_floating(in_dtype(g, n, i))) check_input_dtype(g, n, i);
}

std::vector<TensorDesc> infer_same_as_input0(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  return {{in_shape(g, n, 0), n.dtype}};
}

}  // namespace campo
