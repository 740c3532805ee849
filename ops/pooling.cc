// MaxPool / AvgPool and their gradients: schemas.
// NCHW data, floor output size, symmetric padding of at most half the window (as PyTorch),
// which guarantees every window overlaps the input: padding never wins a max and the
// average's divisor (the window area inside the input) is never zero. With
// count_include_pad the divisor is kernel_h * kernel_w: floor output size keeps every window
// inside the padded input, so that is PyTorch's count_include_pad=True divisor.
// MaxPool's second output is the argmax (i32, y's shape): the index of the max within the
// input's H * W plane, from which MaxPoolGrad scatters dY. Global average pooling is an
// AvgPool whose window is the whole input plane.
#include "ops/schema_util.h"

namespace campo {
namespace {

// y's shape for input x under the window in `a`, after checking both.
Shape pooled_shape(const OpNode& n, const PoolAttrs& a, const Shape& x) {
  CAMPO_CHECK(x.size() == 4, op_name(n.kind), " '", n.name, "': input must be [N, C, H, W], got ",
              shape_str(x));
  CAMPO_CHECK(a.kernel_h >= 1 && a.kernel_w >= 1 && a.stride_h >= 1 && a.stride_w >= 1,
              op_name(n.kind), " '", n.name, "': kernel and stride must be positive, got kernel ",
              a.kernel_h, "x", a.kernel_w, ", stride ", a.stride_h, "x", a.stride_w);
  CAMPO_CHECK(
      a.pad_h >= 0 && a.pad_w >= 0 && 2 * a.pad_h <= a.kernel_h && 2 * a.pad_w <= a.kernel_w,
      op_name(n.kind), " '", n.name, "': padding ", a.pad_h, "x", a.pad_w,
      " must be between 0 and half the kernel ", a.kernel_h, "x", a.kernel_w);
  CAMPO_CHECK(x[2] + 2 * a.pad_h >= a.kernel_h && x[3] + 2 * a.pad_w >= a.kernel_w, op_name(n.kind),
              " '", n.name, "': window ", a.kernel_h, "x", a.kernel_w,
              " is larger than the padded input ", x[2] + 2 * a.pad_h, "x", x[3] + 2 * a.pad_w,
              " (input ", shape_str(x), ", padding ", a.pad_h, "x", a.pad_w, ")");
  return {x[0], x[1], window_output_size(x[2], a.kernel_h, a.stride_h, a.pad_h),
          window_output_size(x[3], a.kernel_w, a.stride_w, a.pad_w)};
}

// For the gradients: dY (input 0) must be the pooled shape of attrs.input_shape.
void check_pool_grad_shapes(const ValueDescs& g, const OpNode& n, const PoolAttrs& a) {
  const Shape expected = pooled_shape(n, a, a.input_shape);
  const Shape& dy = in_shape(g, n, 0);
  CAMPO_CHECK(dy == expected, op_name(n.kind), " '", n.name, "': dy has shape ", shape_str(dy),
              ", expected ", shape_str(expected), " for input_shape ", shape_str(a.input_shape));
}

// count_include_pad only means something for an average: refused on MaxPool rather than
// ignored.
void check_no_count_include_pad(const OpNode& n, const PoolAttrs& a) {
  CAMPO_CHECK(!a.count_include_pad, op_name(n.kind), " '", n.name,
              "': count_include_pad applies to AvgPool only; leave it false for a max pool");
}

std::vector<TensorDesc> infer_max_pool(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  check_no_count_include_pad(n, attrs_as<PoolAttrs>(n.attrs));
  const Shape y = pooled_shape(n, attrs_as<PoolAttrs>(n.attrs), in_shape(g, n, 0));
  return {{y, n.dtype}, {y, DType::i32}};
}

std::vector<TensorDesc> infer_avg_pool(const ValueDescs& g, const OpNode& n) {
  check_float_inputs(g, n);
  return {{pooled_shape(n, attrs_as<PoolAttrs>(n.attrs), in_shape(g, n, 0)), n.dtype}};
}

// MaxPoolGrad(dy, argmax) -> dx of attrs.input_shape.
std::vector<TensorDesc> infer_max_pool_grad(const ValueDescs& g, const OpNode& n) {
  const auto& a = attrs_as<PoolAttrs>(n.attrs);
  check_float_inputs(g, n);
  check_no_count_include_pad(n, a);
  check_pool_grad_shapes(g, n, a);
  CAMPO_CHECK(in_dtype(g, n, 1) == DType::i32 && in_shape(g, n, 1) == in_shape(g, n, 0),
              op_name(n.kind), " '", n.name, "': argmax must be i32 of dy's shape ",
              shape_str(in_shape(g, n, 0)), ", got ", dtype_name(in_dtype(g, n, 1)), " ",
              shape_str(in_shape(g, n, 1)));
  return {{a.input_shape, n.dtype}};
}

// AvgPoolGrad(dy) -> dx of attrs.input_shape.
std::vector<TensorDesc> infer_avg_pool_grad(const ValueDescs& g, const OpNode& n) {
  const auto& a = attrs_as<PoolAttrs>(n.attrs);
  check_float_inputs(g, n);
  check_pool_grad_shapes(g, n, a);
  return {{a.input_shape, n.dtype}};
}

PoolAttrs grad_attrs(const GradientBuilder& b, const OpNode& n) {
  PoolAttrs a = attrs_as<PoolAttrs>(n.attrs);
  a.input_shape = b.shape(n.inputs[0]);
  return a;
}

std::vector<ValueId> grad_max_pool(GradientBuilder& b, const OpNode& n,
                                   const std::vector<ValueId>& dys) {
  if (dys.at(0) == kNoValue) return {kNoValue};
  return {b.op(OpKind::MaxPoolGrad, {dys[0], n.outputs[1]}, grad_attrs(b, n))};
}

std::vector<ValueId> grad_avg_pool(GradientBuilder& b, const OpNode& n,
                                   const std::vector<ValueId>& dys) {
  if (dys.at(0) == kNoValue) return {kNoValue};
  return {b.op(OpKind::AvgPoolGrad, {dys[0]}, grad_attrs(b, n))};
}

SchemaRegistrar max_pool({.kind = OpKind::MaxPool,
                          .amp_list = AmpList::clear,
                          .num_inputs = 1,
                          .infer = infer_max_pool,
                          .gradient = grad_max_pool,
                          .fp32_inputs = {}});
SchemaRegistrar max_pool_grad({.kind = OpKind::MaxPoolGrad,
                               .amp_list = AmpList::clear,
                               .num_inputs = 2,
                               .infer = infer_max_pool_grad,
                               .fp32_inputs = {}});
SchemaRegistrar avg_pool({.kind = OpKind::AvgPool,
                          .amp_list = AmpList::infer,
                          .num_inputs = 1,
                          .infer = infer_avg_pool,
                          .gradient = grad_avg_pool,
                          .fp32_inputs = {}});
SchemaRegistrar avg_pool_grad({.kind = OpKind::AvgPoolGrad,
                               .amp_list = AmpList::infer,
                               .num_inputs = 1,
                               .infer = infer_avg_pool_grad,
                               .fp32_inputs = {}});

}  // namespace
}  // namespace campo
