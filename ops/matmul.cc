// MatMul: C [M, N] = op(A) op(B), op(X) = X or X^T (transpose_a / transpose_b), 2-D only.
// A is [M, K] (or [K, M] when transposed), B is [K, N] (or [N, K] when transposed).
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_matmul(const ValueDescs& g, const OpNode& n) {
  const auto& t = attrs_as<MatMulAttrs>(n.attrs);
  const std::string op = std::string("MatMul '") + n.name + "'";
  for (int i = 0; i < 2; ++i)
    CAMPO_CHECK(is_floating(in_dtype(g, n, i)), op, ": input ", i, " is ",
                dtype_name(in_dtype(g, n, i)), ", expected a floating type");
  check_float_inputs(g, n);
  const Shape& a = in_shape(g, n, 0);
  const Shape& b = in_shape(g, n, 1);
  CAMPO_CHECK(a.size() == 2 && b.size() == 2, op, ": inputs must be 2-D, got a ", shape_str(a),
              " and b ", shape_str(b));
  const int64_t M = t.transpose_a ? a[1] : a[0], Ka = t.transpose_a ? a[0] : a[1];
  const int64_t Kb = t.transpose_b ? b[1] : b[0], N = t.transpose_b ? b[0] : b[1];
  CAMPO_CHECK(Ka == Kb, op, ": inner dimensions differ: a ", shape_str(a),
              t.transpose_a ? " (transposed)" : "", " has ", Ka, ", b ", shape_str(b),
              t.transpose_b ? " (transposed)" : "", " has ", Kb);
  return {{{M, N}, n.dtype}};
}

// The four cases, with G = dL/dC:
//   C = A B:     dA = G B^T,   dB = A^T G
//   C = A^T B:   dA = B G^T,   dB = A G
//   C = A B^T:   dA = G B,     dB = G^T A
//   C = A^T B^T: dA = B^T G^T, dB = G^T A^T
std::vector<ValueId> grad_matmul(GradientBuilder& b, const OpNode& n,
                                 const std::vector<ValueId>& dcs) {
  const ValueId g = dcs[0];
  if (g == kNoValue) return {kNoValue, kNoValue};
  const auto& t = attrs_as<MatMulAttrs>(n.attrs);
  const ValueId A = n.inputs[0], B = n.inputs[1];
  if (!t.transpose_a && !t.transpose_b)
    return {b.matmul(g, B, false, true), b.matmul(A, g, true, false)};
  if (t.transpose_a && !t.transpose_b)
    return {b.matmul(B, g, false, true), b.matmul(A, g, false, false)};
  if (!t.transpose_a && t.transpose_b)
    return {b.matmul(g, B, false, false), b.matmul(g, A, true, false)};
  return {b.matmul(B, g, true, true), b.matmul(g, A, true, true)};
}

SchemaRegistrar matmul({.kind = OpKind::MatMul,
                        .amp_list = AmpList::allow,
                        .num_inputs = 2,
                        .infer = infer_matmul,
                        .gradient = grad_matmul,
                        .is_tensor_core_candidate = true,
                        .fp32_inputs = {}});

}  // namespace
}  // namespace campo
