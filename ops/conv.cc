// Convolution family: Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter (schemas and
// gradient builders). NCHW data, OIHW filters with I = C / groups.
//
// One geometry ties the three ops together: x [N, C, H, W] convolved with w [O, C/g, kh, kw]
// gives y [N, O, Ho, Wo] with Ho = (H + 2 pad_h - dilation_h (kh - 1) - 1) / stride_h + 1.
//   Conv2D               {x, w}  -> y
//   Conv2DBackpropInput  {dy, w} -> dx  (dx shape = attrs.output_shape = x's shape)
//   Conv2DBackpropFilter {x, dy} -> dw  (dw shape = attrs.output_shape = w's shape)
// Conv2DBackpropInput is also the transposed convolution of a forward graph: its input
// [N, Cin, H, W] plays dy (Cin = O) and w [Cin, Cout/g, kh, kw] is PyTorch's
// ConvTranspose2d weight; output_shape [N, Cout, Ho, Wo] is what it produces.
#include "ops/schema_util.h"

namespace campo {
namespace {

// Checks the attributes and the x/w pairing of a convolution and returns y's shape.
// `op` prefixes every message ("Conv2D 'conv1'"); `x_role` / `w_role` name where the
// shapes came from (an input or output_shape) so the user can find the culprit.
Shape conv_output_shape(const std::string& op, const Shape& x, const char* x_role, const Shape& w,
                        const char* w_role, const ConvAttrs& a) {
  CAMPO_CHECK(a.stride_h >= 1 && a.stride_w >= 1, op, ": strides must be >= 1, got ", a.stride_h,
              "x", a.stride_w);
  CAMPO_CHECK(a.dilation_h >= 1 && a.dilation_w >= 1, op, ": dilations must be >= 1, got ",
              a.dilation_h, "x", a.dilation_w);
  CAMPO_CHECK(a.pad_h >= 0 && a.pad_w >= 0, op, ": padding must be >= 0, got ", a.pad_h, "x",
              a.pad_w);
  CAMPO_CHECK(a.groups >= 1, op, ": groups must be >= 1, got ", a.groups);
  CAMPO_CHECK(x.size() == 4, op, ": ", x_role, " must be NCHW (rank 4), got ", shape_str(x));
  CAMPO_CHECK(w.size() == 4, op, ": ", w_role, " must be OIHW (rank 4), got ", shape_str(w));
  for (int64_t d : x) CAMPO_CHECK(d > 0, op, ": ", x_role, " ", shape_str(x), " has an empty dim");
  for (int64_t d : w) CAMPO_CHECK(d > 0, op, ": ", w_role, " ", shape_str(w), " has an empty dim");
  const int64_t C = x[1], O = w[0];
  CAMPO_CHECK(C % a.groups == 0, op, ": groups ", a.groups, " does not divide the ", C,
              " input channels of ", x_role, " ", shape_str(x));
  CAMPO_CHECK(O % a.groups == 0, op, ": groups ", a.groups, " does not divide the ", O,
              " output channels of ", w_role, " ", shape_str(w));
  CAMPO_CHECK(w[1] * a.groups == C, op, ": channel mismatch: ", x_role, " ", shape_str(x), " has ",
              C, " channels but ", w_role, " ", shape_str(w), " with groups ", a.groups,
              " expects ", w[1] * a.groups);
  const int64_t Ho = window_output_size(x[2], int(w[2]), a.stride_h, a.pad_h, a.dilation_h);
  const int64_t Wo = window_output_size(x[3], int(w[3]), a.stride_w, a.pad_w, a.dilation_w);
  CAMPO_CHECK(Ho > 0 && Wo > 0, op, ": ", w_role, " ", shape_str(w), " (dilation ", a.dilation_h,
              "x", a.dilation_w, ") does not fit in ", x_role, " ", shape_str(x), " padded by ",
              a.pad_h, "x", a.pad_w);
  return {x[0], O, Ho, Wo};
}

std::string op_label(const OpNode& n) { return std::string(op_name(n.kind)) + " '" + n.name + "'"; }

void check_all_floating(const ValueDescs& g, const OpNode& n) {
  for (int i = 0; i < int(n.inputs.size()); ++i)
    CAMPO_CHECK(is_floating(in_dtype(g, n, i)), op_label(n), ": input ", i, " is ",
                dtype_name(in_dtype(g, n, i)), ", expected a floating type");
  check_float_inputs(g, n);
}

// y = conv(x, w)
std::vector<TensorDesc> infer_conv2d(const ValueDescs& g, const OpNode& n) {
  check_all_floating(g, n);
  const auto& a = attrs_as<ConvAttrs>(n.attrs);
  return {
      {conv_output_shape(op_label(n), in_shape(g, n, 0), "x", in_shape(g, n, 1), "w", a), n.dtype}};
}

// dx = conv^T(dy, w); dx's shape is output_shape, and conv(dx, w) must have dy's shape.
std::vector<TensorDesc> infer_conv2d_backprop_input(const ValueDescs& g, const OpNode& n) {
  check_all_floating(g, n);
  const auto& a = attrs_as<ConvAttrs>(n.attrs);
  const std::string op = op_label(n);
  const Shape& dy = in_shape(g, n, 0);
  const Shape y = conv_output_shape(op, a.output_shape, "output_shape", in_shape(g, n, 1), "w", a);
  CAMPO_CHECK(dy == y, op, ": dy ", shape_str(dy), " does not match output_shape ",
              shape_str(a.output_shape), " and w ", shape_str(in_shape(g, n, 1)),
              ", whose convolution has shape ", shape_str(y));
  return {{a.output_shape, n.dtype}};
}

// dw = sum over n of correlate(x, dy); dw's shape is output_shape.
std::vector<TensorDesc> infer_conv2d_backprop_filter(const ValueDescs& g, const OpNode& n) {
  check_all_floating(g, n);
  const auto& a = attrs_as<ConvAttrs>(n.attrs);
  const std::string op = op_label(n);
  const Shape& dy = in_shape(g, n, 1);
  const Shape y = conv_output_shape(op, in_shape(g, n, 0), "x", a.output_shape, "output_shape", a);
  CAMPO_CHECK(dy == y, op, ": dy ", shape_str(dy), " does not match x ",
              shape_str(in_shape(g, n, 0)), " and output_shape ", shape_str(a.output_shape),
              ", whose convolution has shape ", shape_str(y));
  return {{a.output_shape, n.dtype}};
}

ConvAttrs with_output_shape(const OpNode& n, Shape s) {
  ConvAttrs a = attrs_as<ConvAttrs>(n.attrs);
  a.output_shape = std::move(s);
  return a;
}

// y = conv(x, w): dx = conv^T(dy, w), dw = Conv2DBackpropFilter(x, dy).
std::vector<ValueId> grad_conv2d(GradientBuilder& b, const OpNode& n,
                                 const std::vector<ValueId>& dys) {
  const ValueId dy = dys[0];
  if (dy == kNoValue) return {kNoValue, kNoValue};
  const ValueId x = n.inputs[0], w = n.inputs[1];
  ValueId dx = b.op(OpKind::Conv2DBackpropInput, {dy, w}, with_output_shape(n, b.shape(x)));
  ValueId dw = b.op(OpKind::Conv2DBackpropFilter, {x, dy}, with_output_shape(n, b.shape(w)));
  return {dx, dw};
}

// z = conv^T(u, w) (inputs u = "dy", w). With g = dL/dz, L = <g, conv^T(u, w)> =
// <conv(g, w), u>, so dL/du = conv(g, w) and dL/dw = Conv2DBackpropFilter(g, u).
std::vector<ValueId> grad_conv2d_backprop_input(GradientBuilder& b, const OpNode& n,
                                                const std::vector<ValueId>& dzs) {
  const ValueId g = dzs[0];
  if (g == kNoValue) return {kNoValue, kNoValue};
  const ValueId u = n.inputs[0], w = n.inputs[1];
  ValueId du = b.op(OpKind::Conv2D, {g, w}, with_output_shape(n, {}));
  ValueId dw = b.op(OpKind::Conv2DBackpropFilter, {g, u}, with_output_shape(n, b.shape(w)));
  return {du, dw};
}

// z = Conv2DBackpropFilter(x, u), linear in each input. With g = dL/dz (filter-shaped),
// L = <conv(x, g), u> = <x, conv^T(u, g)>, so dL/dx = conv^T(u, g), dL/du = conv(x, g).
std::vector<ValueId> grad_conv2d_backprop_filter(GradientBuilder& b, const OpNode& n,
                                                 const std::vector<ValueId>& dzs) {
  const ValueId g = dzs[0];
  if (g == kNoValue) return {kNoValue, kNoValue};
  const ValueId x = n.inputs[0], u = n.inputs[1];
  ValueId dx = b.op(OpKind::Conv2DBackpropInput, {u, g}, with_output_shape(n, b.shape(x)));
  ValueId du = b.op(OpKind::Conv2D, {x, g}, with_output_shape(n, {}));
  return {dx, du};
}

SchemaRegistrar conv2d({.kind = OpKind::Conv2D,
                        .amp_list = AmpList::allow,
                        .num_inputs = 2,
                        .infer = infer_conv2d,
                        .gradient = grad_conv2d,
                        .is_tensor_core_candidate = true,
                        .fp32_inputs = {}});
SchemaRegistrar conv2d_backprop_input({.kind = OpKind::Conv2DBackpropInput,
                                       .amp_list = AmpList::allow,
                                       .num_inputs = 2,
                                       .infer = infer_conv2d_backprop_input,
                                       .gradient = grad_conv2d_backprop_input,
                                       .fp32_inputs = {}});
SchemaRegistrar conv2d_backprop_filter({.kind = OpKind::Conv2DBackpropFilter,
                                        .amp_list = AmpList::allow,
                                        .num_inputs = 2,
                                        .infer = infer_conv2d_backprop_filter,
                                        .gradient = grad_conv2d_backprop_filter,
                                        .fp32_inputs = {},
                                        .can_write_f32_output = true});

}  // namespace
}  // namespace campo
