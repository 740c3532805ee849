// AllReduceStart {g1, ..., gk} -> bucket and AllReduceWait {bucket} -> g1', ..., gk': a
// data-parallel run's gradient bucket summed over the ranks (ops/op.h, AllReduceAttrs).
// Always f32 (their amp list is fp32: the policy casts low-precision gradients to f32 before
// them); no gradient (they are part of the backward pass).
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_all_reduce_start(const ValueDescs& g, const OpNode& n) {
  CAMPO_CHECK(!n.inputs.empty(), "AllReduceStart '", n.name, "' needs at least one input");
  const auto& a = attrs_as<AllReduceAttrs>(n.attrs);
  CAMPO_CHECK(a.shapes.size() == n.inputs.size(), "AllReduceStart '", n.name,
              "': ", n.inputs.size(), " inputs but ", a.shapes.size(), " shapes");
  int64_t total = 0;
  for (int i = 0; i < int(n.inputs.size()); ++i) {
    CAMPO_CHECK(in_dtype(g, n, i) == DType::f32, "AllReduceStart '", n.name, "': input ", i, " is ",
                dtype_name(in_dtype(g, n, i)), ", expected f32");
    CAMPO_CHECK(in_shape(g, n, i) == a.shapes[size_t(i)], "AllReduceStart '", n.name, "': input ",
                i, " has shape ", shape_str(in_shape(g, n, i)), ", its attribute ",
                shape_str(a.shapes[size_t(i)]));
    total += shape_numel(in_shape(g, n, i));
  }
  return {{{total}, DType::f32}};
}

std::vector<TensorDesc> infer_all_reduce_wait(const ValueDescs& g, const OpNode& n) {
  CAMPO_CHECK(n.inputs.size() == 1, "AllReduceWait '", n.name, "' takes one bucket");
  const auto& a = attrs_as<AllReduceAttrs>(n.attrs);
  CAMPO_CHECK(!a.shapes.empty(), "AllReduceWait '", n.name, "': no output shapes");
  int64_t total = 0;
  std::vector<TensorDesc> out;
  for (const Shape& s : a.shapes) {
    total += shape_numel(s);
    out.push_back({s, DType::f32});
  }
  CAMPO_CHECK(in_dtype(g, n, 0) == DType::f32 && in_shape(g, n, 0) == Shape{total},
              "AllReduceWait '", n.name, "': the bucket is ", dtype_name(in_dtype(g, n, 0)), " ",
              shape_str(in_shape(g, n, 0)), ", expected f32 [", total, "]");
  return out;
}

SchemaRegistrar all_reduce_start({.kind = OpKind::AllReduceStart,
                                  .amp_list = AmpList::fp32,
                                  .num_inputs = -1,
                                  .infer = infer_all_reduce_start});
SchemaRegistrar all_reduce_wait({.kind = OpKind::AllReduceWait,
                                 .amp_list = AmpList::fp32,
                                 .num_inputs = 1,
                                 .infer = infer_all_reduce_wait});

}  // namespace
}  // namespace campo
