// GatherV2 and UnsortedSegmentSum: an embedding lookup and its gradient.
//   GatherV2(params [V, D...], indices i32 [I...]; axis 0) -> y [I..., D...] of params' type,
//     y[i..., :] = params[indices[i...], :]. An index outside [0, V) is a run-time error of
//     the kernel (the indices are data).
//   UnsortedSegmentSum(data [I..., D...], segment_ids i32 [I...]; num_segments S) ->
//     y [S, D...] of data's type, y[s, :] = sum over i with segment_ids[i] == s of data[i, :],
//     zeros where no id points. An id outside [0, S) is a run-time error.
// Each is the other's gradient (the graph has no IndexedSlices, so GatherV2's gradient is
// the dense one): d params = UnsortedSegmentSum(dy, indices, V), d data = GatherV2(dy,
// segment_ids); none for the integer inputs.
// AMP lists (TensorFlow's auto_mixed_precision_lists.h): GatherV2 is on the clear list, of
// the CUDA and the oneDNN lists alike; UnsortedSegmentSum is on none of TensorFlow's lists,
// so TensorFlow leaves it in f32, and so does campo (AmpList::fp32): the embedding table's
// gradient is summed and kept in f32. Its kernels still exist for bf16 / f16 (accumulating in
// f32), for lists edited by hand.
#include "ops/schema_util.h"

namespace campo {
namespace {

std::vector<TensorDesc> infer_gather(const ValueDescs& g, const OpNode& n) {
  const int axis = attrs_as<GatherAttrs>(n.attrs).axis;
  CAMPO_CHECK(axis == 0, "GatherV2 '", n.name, "': axis ", axis,
              " is not supported (only axis 0, rows of params, as an embedding lookup)");
  const Shape& params = in_shape(g, n, 0);
  const Shape& indices = in_shape(g, n, 1);
  CAMPO_CHECK(is_floating(in_dtype(g, n, 0)), "GatherV2 '", n.name,
              "': params must be floating point (f32, bf16 or f16), got ",
              dtype_name(in_dtype(g, n, 0)));
  check_float_inputs(g, n);
  CAMPO_CHECK(!params.empty(), "GatherV2 '", n.name,
              "': params is a scalar; it needs rows to gather ([V, D...])");
  CAMPO_CHECK(in_dtype(g, n, 1) == DType::i32, "GatherV2 '", n.name, "': indices must be i32, got ",
              dtype_name(in_dtype(g, n, 1)));
  Shape out = indices;
  out.insert(out.end(), params.begin() + 1, params.end());
  return {{out, n.dtype}};
}

std::vector<TensorDesc> infer_segment_sum(const ValueDescs& g, const OpNode& n) {
  const int64_t segments = attrs_as<UnsortedSegmentSumAttrs>(n.attrs).num_segments;
  const Shape& data = in_shape(g, n, 0);
  const Shape& ids = in_shape(g, n, 1);
  CAMPO_CHECK(is_floating(in_dtype(g, n, 0)), "UnsortedSegmentSum '", n.name,
              "': data must be floating point (f32, bf16 or f16), got ",
              dtype_name(in_dtype(g, n, 0)));
  check_float_inputs(g, n);
  CAMPO_CHECK(in_dtype(g, n, 1) == DType::i32, "UnsortedSegmentSum '", n.name,
              "': segment_ids must be i32, got ", dtype_name(in_dtype(g, n, 1)));
  CAMPO_CHECK(segments >= 0, "UnsortedSegmentSum '", n.name, "': num_segments is ", segments,
              " (must be >= 0)");
  CAMPO_CHECK(ids.size() <= data.size() && std::equal(ids.begin(), ids.end(), data.begin()),
              "UnsortedSegmentSum '", n.name, "': segment_ids of shape ", shape_str(ids),
              " must have the leading dims of data of shape ", shape_str(data));
  Shape out = {segments};
  out.insert(out.end(), data.begin() + std::ptrdiff_t(ids.size()), data.end());
  return {{out, n.dtype}};
}

// d params = UnsortedSegmentSum(dy, indices, V): every row gets the sum of the dy rows that
// read it; none for the indices.
std::vector<ValueId> grad_gather(GradientBuilder& b, const OpNode& n,
                                 const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue, kNoValue};
  const int64_t rows = b.shape(n.inputs[0])[0];
  return {b.op(OpKind::UnsortedSegmentSum, {dy[0], n.inputs[1]}, UnsortedSegmentSumAttrs{rows}),
          kNoValue};
}

// d data = GatherV2(dy, segment_ids): each row reads its segment's gradient.
std::vector<ValueId> grad_segment_sum(GradientBuilder& b, const OpNode& n,
                                      const std::vector<ValueId>& dy) {
  if (dy[0] == kNoValue) return {kNoValue, kNoValue};
  return {b.op(OpKind::GatherV2, {dy[0], n.inputs[1]}, GatherAttrs{0}), kNoValue};
}

SchemaRegistrar gather({.kind = OpKind::GatherV2,
                        .amp_list = AmpList::clear,
                        .num_inputs = 2,
                        .infer = infer_gather,
                        .gradient = grad_gather});
SchemaRegistrar segment_sum({.kind = OpKind::UnsortedSegmentSum,
                             .amp_list = AmpList::fp32,
                             .num_inputs = 2,
                             .infer = infer_segment_sum,
                             .gradient = grad_segment_sum});

}  // namespace
}  // namespace campo
