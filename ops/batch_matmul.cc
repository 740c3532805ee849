// BatchMatMulV2: one matrix product per batch index,
//   z[b, :, :] = adj(x[b, :, :]) adj(y[b, :, :]),   z [..., M, N],
// x [..., M, K] (stored [..., K, M] with adj_x), y [..., K, N] (stored [..., N, K] with adj_y),
// adj transposing the last two dims. x and y have one rank >= 2 and equal batch dims ("...":
// rank 2 is one product, as TensorFlow allows). TensorFlow's V2 also broadcasts batch dims
// (one side 1); campo refuses that: BERT's attention never broadcasts, and the gradient of a
// broadcast side would need a reduction over the broadcast dims (a deny-list Sum, f32 out).
// Allow list, as TensorFlow's CUDA (from CUDA 9.1) and oneDNN lists; a Tensor-Core candidate
// like MatMul (padding itself is MatMul's alone: amp/padding.h).
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_batch_matmul(const ValueDescs& g, const OpNode& n) {
  const auto& t = attrs_as<BatchMatMulAttrs>(n.attrs);
  const std::string op = std::string("BatchMatMulV2 '") + n.name + "'";
  for (int i = 0; i < 2; ++i)
    CAMPO_CHECK(is_floating(in_dtype(g, n, i)), op, ": input ", i, " is ",
                dtype_name(in_dtype(g, n, i)), ", expected a floating type");
  check_float_inputs(g, n);
  const Shape& x = in_shape(g, n, 0);
  const Shape& y = in_shape(g, n, 1);
  CAMPO_CHECK(x.size() >= 2 && x.size() == y.size(), op,
              ": inputs must have one rank >= 2 ([..., M, K] and [..., K, N]), got x ",
              shape_str(x), " and y ", shape_str(y));
  const size_t r = x.size();
  for (size_t d = 0; d + 2 < r; ++d)
    CAMPO_CHECK(x[d] == y[d], op, ": batch dimension ", d, " differs: x ", shape_str(x), " has ",
                x[d], ", y ", shape_str(y), " has ", y[d],
                " (batch dims must be equal; broadcasting them is not supported)");
  const int64_t M = t.adj_x ? x[r - 1] : x[r - 2], Kx = t.adj_x ? x[r - 2] : x[r - 1];
  const int64_t Ky = t.adj_y ? y[r - 1] : y[r - 2], N = t.adj_y ? y[r - 2] : y[r - 1];
  CAMPO_CHECK(Kx == Ky, op, ": inner dimensions differ: x ", shape_str(x),
              t.adj_x ? " (adj_x)" : "", " has ", Kx, ", y ", shape_str(y),
              t.adj_y ? " (adj_y)" : "", " has ", Ky);
  Shape z(x.begin(), x.end() - 2);
  z.push_back(M);
  z.push_back(N);
  return {{z, n.dtype}};
}

// MatMul's four cases (ops/matmul.cc) per batch index, with G = dL/dz:
//   z = x y:     dx = G y^T,   dy = x^T G
//   z = x^T y:   dx = y G^T,   dy = x G
//   z = x y^T:   dx = G y,     dy = G^T x
//   z = x^T y^T: dx = y^T G^T, dy = G^T x^T
std::vector<ValueId> grad_batch_matmul(GradientBuilder& b, const OpNode& n,
                                       const std::vector<ValueId>& dzs) {
  const ValueId g = dzs[0];
  if (g == kNoValue) return {kNoValue, kNoValue};
  const auto& t = attrs_as<BatchMatMulAttrs>(n.attrs);
  const ValueId x = n.inputs[0], y = n.inputs[1];
  if (!t.adj_x && !t.adj_y)
    return {b.batch_matmul(g, y, false, true), b.batch_matmul(x, g, true, false)};
  if (t.adj_x && !t.adj_y)
    return {b.batch_matmul(y, g, false, true), b.batch_matmul(x, g, false, false)};
  if (!t.adj_x && t.adj_y)
    return {b.batch_matmul(g, y, false, false), b.batch_matmul(g, x, true, false)};
  return {b.batch_matmul(y, g, true, true), b.batch_matmul(g, x, true, true)};
}

SchemaRegistrar batch_matmul({.kind = OpKind::BatchMatMulV2,
                              .amp_list = AmpList::allow,
                              .num_inputs = 2,
                              .infer = infer_batch_matmul,
                              .gradient = grad_batch_matmul,
                              .is_tensor_core_candidate = true,
                              .fp32_inputs = {}});

}  // namespace
}  // namespace campo
