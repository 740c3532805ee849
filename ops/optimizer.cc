// Optimizer updates (PyTorch semantics, formulas in ops/op.h). They have no outputs and
// write var and the optimizer state IN PLACE (persistent variables), so they are marked
// as side effects and stay f32 whatever the precision policy.
//  ApplyMomentum {var, accum, grad, lr [] or [S] [, all_finite []] [, copy]}
//  ApplyAdam     {var, m, v, grad, lr [] or [S], step [] (1-based) [, all_finite []] [, copy]}
// With S slices (lr [S] and/or the attrs' per-slice vectors, ops/op.h) slice s of var, its
// state and its copy (elements [s numel/S, (s+1) numel/S)) update with slice s's
// hyperparameters: a model array's N models in one node.
// `all_finite` (attrs skip_if_not_finite) is AllFinite's flag: the update is skipped on the
// device when a gradient overflowed, so a step is one uninterrupted sequence of kernels.
// `copy`, when given, is a low-precision (f16/bf16) copy of var that the update rewrites
// from the updated var (rounded to nearest even, as Cast): the weight copy that replaces
// a per-step Cast of the weight under the cost-aware policy (Node::weight_copy).
#include <initializer_list>
#include <string>

#include "ops/schema_util.h"

namespace campo {
namespace {

void check_f32(const ValueDescs& g, const OpNode& n, int i, const char* what) {
  CAMPO_CHECK(in_dtype(g, n, i) == DType::f32, op_name(n.kind), " '", n.name, "': ", what,
              " must be f32, got ", dtype_name(in_dtype(g, n, i)));
}

void check_same_shape(const ValueDescs& g, const OpNode& n, int i, const char* what) {
  CAMPO_CHECK(in_shape(g, n, i) == in_shape(g, n, 0), op_name(n.kind), " '", n.name, "': ", what,
              " has shape ", shape_str(in_shape(g, n, i)), " but var has shape ",
              shape_str(in_shape(g, n, 0)));
}

void check_scalar(const ValueDescs& g, const OpNode& n, int i, const char* what) {
  CAMPO_CHECK(in_shape(g, n, i).empty(), op_name(n.kind), " '", n.name, "': ", what,
              " must be a scalar (shape []), got ", shape_str(in_shape(g, n, i)));
}

// The optional last input: a low-precision copy of var.
void check_copy(const ValueDescs& g, const OpNode& n, int required) {
  const int have = int(n.inputs.size());
  CAMPO_CHECK(have == required || have == required + 1, op_name(n.kind), " '", n.name, "' takes ",
              required, " inputs (", required + 1, " with a weight copy), got ", have);
  if (have == required) return;
  CAMPO_CHECK(is_low_precision(in_dtype(g, n, required)), op_name(n.kind), " '", n.name,
              "': the weight copy must be f16 or bf16, got ", dtype_name(in_dtype(g, n, required)));
  check_same_shape(g, n, required, "the weight copy");
}

// The optional flag input at `slot` (attrs skip_if_not_finite); returns the inputs before
// the weight copy.
int check_finite_flag(const ValueDescs& g, const OpNode& n, int slot, bool has_flag) {
  if (!has_flag) return slot;
  CAMPO_CHECK(int(n.inputs.size()) > slot, op_name(n.kind), " '", n.name,
              "': skip_if_not_finite needs the AllFinite flag as input ", slot);
  check_f32(g, n, slot, "the AllFinite flag");
  check_scalar(g, n, slot, "the AllFinite flag");
  return slot + 1;
}
// The slice count of an update (ops/op.h): lr (input lr_slot) is [] or [S] with S >= 1
// dividing var's element count; each non-empty per-slice vector has S values (with a scalar
// lr the first non-empty one sets S).
struct SliceVector {
  const char* name;
  const std::vector<float>& values;
};
int64_t check_slices(const ValueDescs& g, const OpNode& n, int lr_slot,
                     std::initializer_list<SliceVector> per_slice) {
  const Shape& lr = in_shape(g, n, lr_slot);
  const int64_t numel = shape_numel(in_shape(g, n, 0));
  CAMPO_CHECK(lr.empty() || (lr.size() == 1 && lr[0] >= 1 && numel % lr[0] == 0), op_name(n.kind),
              " '", n.name, "': lr has shape ", shape_str(lr), " but var has shape ",
              shape_str(in_shape(g, n, 0)), " (", numel,
              " elements): lr must be a scalar [] or [S] with S >= 1 dividing var's element count");
  int64_t slices = lr.empty() ? 0 : lr[0];
  std::string set_by = "lr has shape " + shape_str(lr);
  for (const SliceVector& v : per_slice) {
    if (v.values.empty()) continue;
    const int64_t size = int64_t(v.values.size());
    if (slices == 0) {
      CAMPO_CHECK(numel % size == 0, op_name(n.kind), " '", n.name, "': ", v.name, " has ", size,
                  " values (slices) but var has shape ", shape_str(in_shape(g, n, 0)), " (", numel,
                  " elements): the slice count must divide var's element count");
      slices = size;
      set_by = std::string(v.name) + " has " + std::to_string(size) + " values";
      continue;
    }
    CAMPO_CHECK(size == slices, op_name(n.kind), " '", n.name, "': ", v.name, " has ", size,
                " values but ", set_by, " (", slices,
                " slices): give one value per slice, or none for the scalar attribute");
  }
  return slices == 0 ? 1 : slices;
}

std::vector<TensorDesc> infer_momentum(const ValueDescs& g, const OpNode& n) {
  check_copy(g, n,
             check_finite_flag(g, n, 4, attrs_as<MomentumAttrs>(n.attrs).skip_if_not_finite));
  const char* names[] = {"var", "accum", "grad", "lr"};
  for (int i = 0; i < 4; ++i) check_f32(g, n, i, names[i]);
  check_same_shape(g, n, 1, "accum");
  check_same_shape(g, n, 2, "grad");
  const auto& a = attrs_as<MomentumAttrs>(n.attrs);
  check_slices(
      g, n, 3,
      {{"slice_momentum", a.slice_momentum}, {"slice_weight_decay", a.slice_weight_decay}});
  return {};
}

std::vector<TensorDesc> infer_adam(const ValueDescs& g, const OpNode& n) {
  check_copy(g, n, check_finite_flag(g, n, 6, attrs_as<AdamAttrs>(n.attrs).skip_if_not_finite));
  const char* names[] = {"var", "m", "v", "grad", "lr", "step"};
  for (int i = 0; i < 6; ++i) check_f32(g, n, i, names[i]);
  for (int i = 1; i < 4; ++i) check_same_shape(g, n, i, names[i]);
  check_slices(g, n, 4, {{"slice_weight_decay", attrs_as<AdamAttrs>(n.attrs).slice_weight_decay}});
  check_scalar(g, n, 5, "step");
  return {};
}

SchemaRegistrar momentum({.kind = OpKind::ApplyMomentum,
                          .amp_list = AmpList::fp32,
                          .num_inputs = -1,  // 4, +1 with the finite flag, +1 with a weight copy
                          .infer = infer_momentum,
                          .gradient = nullptr,
                          .has_side_effects = true});
SchemaRegistrar adam({.kind = OpKind::ApplyAdam,
                      .amp_list = AmpList::fp32,
                      .num_inputs = -1,  // 6, +1 with the finite flag, +1 with a weight copy
                      .infer = infer_adam,
                      .gradient = nullptr,
                      .has_side_effects = true});

}  // namespace
}  // namespace campo
