// Optimizer updates (PyTorch semantics, formulas in ops/op.h). They have no outputs and
// write var and the optimizer state IN PLACE (persistent variables), so they are marked
// as side effects and stay f32 whatever the precision policy.
//  ApplyMomentum {var, accum, grad, lr [] or [S] [, all_finite []] [, copy]}
//  ApplyAdam     {var, m, v, grad, lr [] or [S], step [] (1-based) [, all_finite []] [, copy]}
// A multi-tensor node (attrs `tensors` = k) takes k of each per-variable input, role by role
// (UpdateLayout, ops/op.h), and every variable is checked as a node of its own would be.
// With S slices (lr [S] and/or the attrs' per-slice vectors, ops/op.h) slice s of var, its
// state and its copy (elements [s numel/S, (s+1) numel/S)) update with slice s's
// hyperparameters: a model array's N models in one node.
// `all_finite` (attrs skip_if_not_finite) is AllFinite's flag: the update is skipped on the
// device when a gradient overflowed, so a step is one uninterrupted sequence of kernels.
// `copy`, when given, is a low-precision (f16/bf16) copy of var that the update rewrites
// from the updated var (rounded to nearest even, as Cast): the weight copy that replaces
// a per-step Cast of the weight under the cost-aware policy (Node::weight_copy).
// Pure low-precision training (ops/op.h): var and the state (accum; m, v) are f32 or bf16,
// each in its own type; a bf16 var takes no copy (it is the low-precision weight itself).
// grad, lr, step and the flag are f32.
#include <initializer_list>
#include <string>

#include "ops/schema_util.h"

namespace campo {
namespace {

void check_f32(const ValueDescs& g, const OpNode& n, int i, const std::string& what) {
  CAMPO_CHECK(in_dtype(g, n, i) == DType::f32, op_name(n.kind), " '", n.name, "': ", what,
              " must be f32, got ", dtype_name(in_dtype(g, n, i)));
}

void check_scalar(const ValueDescs& g, const OpNode& n, int i, const char* what) {
  CAMPO_CHECK(in_shape(g, n, i).empty(), op_name(n.kind), " '", n.name, "': ", what,
              " must be a scalar (shape []), got ", shape_str(in_shape(g, n, i)));
}

// How a message names role `role` of variable t: "accum", or "accum 3" in a group.
std::string role_name(const char* role, const UpdateLayout& l, int t) {
  return l.tensors == 1 ? std::string(role) : std::string(role) + " " + std::to_string(t + 1);
}

// Input count and the optional weight copies (all variables have one, or none does).
bool check_inputs(const ValueDescs& g, const OpNode& n, const UpdateLayout& l) {
  CAMPO_CHECK(l.tensors >= 1, op_name(n.kind), " '", n.name, "': tensors must be >= 1, got ",
              l.tensors);
  const int have = int(n.inputs.size());
  const int required = l.required();
  if (l.has_flag)
    CAMPO_CHECK(have >= required, op_name(n.kind), " '", n.name,
                "': skip_if_not_finite needs the AllFinite flag as input ", l.flag());
  CAMPO_CHECK(have == required || have == required + l.tensors, op_name(n.kind), " '", n.name,
              "' takes ", required, " inputs (", required + l.tensors,
              l.tensors == 1 ? " with a weight copy" : " with weight copies", "), got ", have);
  if (l.has_flag) {
    check_f32(g, n, l.flag(), "the AllFinite flag");
    check_scalar(g, n, l.flag(), "the AllFinite flag");
  }
  return have > required;
}

// The slice count of an update (ops/op.h): lr is [] or [S] with S >= 1 dividing every
// variable's element count; each non-empty per-slice vector has S values (with a scalar lr
// the first non-empty one sets S).
struct SliceVector {
  const char* name;
  const std::vector<float>& values;
};
void check_slices(const ValueDescs& g, const OpNode& n, const UpdateLayout& l,
                  std::initializer_list<SliceVector> per_slice) {
  const Shape& lr = in_shape(g, n, l.lr());
  CAMPO_CHECK(lr.empty() || (lr.size() == 1 && lr[0] >= 1), op_name(n.kind), " '", n.name,
              "': lr has shape ", shape_str(lr), ": lr must be a scalar [] or [S] with S >= 1");
  int64_t slices = lr.empty() ? 0 : lr[0];
  std::string set_by = "lr has shape " + shape_str(lr);
  for (const SliceVector& v : per_slice) {
    if (v.values.empty()) continue;
    const int64_t size = int64_t(v.values.size());
    if (slices == 0) {
      slices = size;
      set_by = std::string(v.name) + " has " + std::to_string(size) + " values (slices)";
      continue;
    }
    CAMPO_CHECK(size == slices, op_name(n.kind), " '", n.name, "': ", v.name, " has ", size,
                " values but ", set_by,
                lr.empty() ? "" : " (" + std::to_string(slices) + " slices)",
                ": give one value per slice, or none for the scalar attribute");
  }
  if (slices == 0) return;
  for (int t = 0; t < l.tensors; ++t) {
    const Shape& var = in_shape(g, n, l.input(0, t));
    const int64_t numel = shape_numel(var);
    CAMPO_CHECK(numel % slices == 0, op_name(n.kind), " '", n.name, "': ", set_by, " but ",
                role_name("var", l, t), " has shape ", shape_str(var), " (", numel,
                " elements): the slice count S (lr [S] or the per-slice vectors' size) must "
                "divide every variable's element count");
  }
}

// A stored input (var or optimizer state): f32, or bf16 without master copy.
void check_stored(const ValueDescs& g, const OpNode& n, int i, const std::string& what) {
  const DType d = in_dtype(g, n, i);
  CAMPO_CHECK(d == DType::f32 || d == DType::bf16, op_name(n.kind), " '", n.name, "': ", what,
              " must be f32 or bf16, got ", dtype_name(d));
}

// Every per-variable input (roles; the last is the gradient) and copy against its variable;
// lr f32.
void check_variables(const ValueDescs& g, const OpNode& n, const UpdateLayout& l,
                     std::initializer_list<const char*> roles, bool copies) {
  for (int t = 0; t < l.tensors; ++t) {
    const Shape& var = in_shape(g, n, l.input(0, t));
    int role = 0;
    for (const char* name : roles) {
      const int i = l.input(role++, t);
      if (role == l.roles)
        check_f32(g, n, i, role_name(name, l, t));
      else
        check_stored(g, n, i, role_name(name, l, t));
      CAMPO_CHECK(in_shape(g, n, i) == var, op_name(n.kind), " '", n.name,
                  "': ", role_name(name, l, t), " has shape ", shape_str(in_shape(g, n, i)),
                  " but ", role_name("var", l, t), " has shape ", shape_str(var));
    }
    if (!copies) continue;
    CAMPO_CHECK(in_dtype(g, n, l.input(0, t)) == DType::f32, op_name(n.kind), " '", n.name,
                "': ", role_name("var", l, t),
                " is stored in bf16: it is the low-precision weight and takes no weight copy");
    const int c = l.copy(t);
    CAMPO_CHECK(is_low_precision(in_dtype(g, n, c)), op_name(n.kind), " '", n.name,
                "': ", role_name("the weight copy", l, t), " must be f16 or bf16, got ",
                dtype_name(in_dtype(g, n, c)));
    CAMPO_CHECK(in_shape(g, n, c) == var, op_name(n.kind), " '", n.name,
                "': ", role_name("the weight copy", l, t), " has shape ",
                shape_str(in_shape(g, n, c)), " but ", role_name("var", l, t), " has shape ",
                shape_str(var));
  }
  check_f32(g, n, l.lr(), "lr");
}

std::vector<TensorDesc> infer_momentum(const ValueDescs& g, const OpNode& n) {
  const UpdateLayout l = update_layout(n.kind, n.attrs);
  const bool copies = check_inputs(g, n, l);
  check_variables(g, n, l, {"var", "accum", "grad"}, copies);
  const auto& a = attrs_as<MomentumAttrs>(n.attrs);
  check_slices(
      g, n, l,
      {{"slice_momentum", a.slice_momentum}, {"slice_weight_decay", a.slice_weight_decay}});
  return {};
}

std::vector<TensorDesc> infer_adam(const ValueDescs& g, const OpNode& n) {
  const UpdateLayout l = update_layout(n.kind, n.attrs);
  const bool copies = check_inputs(g, n, l);
  check_variables(g, n, l, {"var", "m", "v", "grad"}, copies);
  check_slices(g, n, l, {{"slice_weight_decay", attrs_as<AdamAttrs>(n.attrs).slice_weight_decay}});
  check_f32(g, n, l.lr() + 1, "step");
  check_scalar(g, n, l.lr() + 1, "step");
  return {};
}

SchemaRegistrar momentum({.kind = OpKind::ApplyMomentum,
                          .amp_list = AmpList::fp32,
                          .num_inputs = -1,  // UpdateLayout: 3k + 1, +1 flag, +k weight copies
                          .infer = infer_momentum,
                          .gradient = nullptr,
                          .has_side_effects = true});
SchemaRegistrar adam({.kind = OpKind::ApplyAdam,
                      .amp_list = AmpList::fp32,
                      .num_inputs = -1,  // UpdateLayout: 4k + 2, +1 flag, +k weight copies
                      .infer = infer_adam,
                      .gradient = nullptr,
                      .has_side_effects = true});

}  // namespace
}  // namespace campo
