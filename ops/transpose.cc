// Transpose: y = x with its dims permuted, y[i_0, ..., i_{r-1}] = x[j] where j[perm[d]] = i_d,
// so y's dim d is x's dim perm[d] (TensorFlow's tf.transpose, NumPy's np.transpose). `perm`
// is a permutation of 0 .. rank-1. Its gradient is the Transpose of dy by the inverse
// permutation. It only moves data: on TensorFlow's clear list (CUDA and oneDNN lists alike).
// A floating input takes the node's compute dtype; an integer one keeps its type, as Reshape.
#include "ops/schema_util.h"

namespace campo {
namespace {

std::string perm_str(const std::vector<int>& perm) {
  return shape_str(Shape(perm.begin(), perm.end()));
}

// Checks `perm` against the input's rank; one line naming what is wrong.
void check_permutation(const OpNode& n, const std::vector<int>& perm, const Shape& in) {
  const int rank = int(in.size());
  CAMPO_CHECK(int(perm.size()) == rank, "Transpose '", n.name, "': perm ", perm_str(perm), " has ",
              perm.size(), " entries but input 0 of shape ", shape_str(in), " has rank ", rank,
              " (perm must be a permutation of 0 .. rank-1)");
  std::vector<char> seen(size_t(rank), 0);
  for (size_t i = 0; i < perm.size(); ++i) {
    CAMPO_CHECK(perm[i] >= 0 && perm[i] < rank, "Transpose '", n.name, "': perm ", perm_str(perm),
                " has entry ", perm[i], " at ", i, ", out of range 0 .. ", rank - 1,
                " for input 0 of shape ", shape_str(in));
    CAMPO_CHECK(!seen[size_t(perm[i])], "Transpose '", n.name, "': perm ", perm_str(perm),
                " names dim ", perm[i], " twice (perm must be a permutation of 0 .. ", rank - 1,
                ")");
    seen[size_t(perm[i])] = 1;
  }
}

std::vector<TensorDesc> infer_transpose(const ValueDescs& g, const OpNode& n) {
  const Shape& in = in_shape(g, n, 0);
  const auto& perm = attrs_as<TransposeAttrs>(n.attrs).perm;
  check_permutation(n, perm, in);
  check_float_inputs(g, n);
  Shape out;
  for (int p : perm) out.push_back(in[size_t(p)]);
  const DType t = in_dtype(g, n, 0);
  return {{out, is_floating(t) ? n.dtype : t}};
}

// dx = Transpose(dy, inverse), inverse[perm[d]] = d: y's dim d went back to x's dim perm[d].
std::vector<ValueId> grad_transpose(GradientBuilder& b, const OpNode& n,
                                    const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue};
  const auto& perm = attrs_as<TransposeAttrs>(n.attrs).perm;
  std::vector<int> inverse(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) inverse[size_t(perm[d])] = int(d);
  return {b.transpose(dy[0], inverse)};
}

SchemaRegistrar transpose({.kind = OpKind::Transpose,
                           .amp_list = AmpList::clear,
                           .num_inputs = 1,
                           .infer = infer_transpose,
                           .gradient = grad_transpose});

}  // namespace
}  // namespace campo
