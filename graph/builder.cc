#include "graph/builder.h"

#include <algorithm>

namespace campo {

std::string Builder::scoped(const std::string& name) const {
  std::string s;
  for (const auto& p : scopes_) s += p + ".";
  return s + name;
}

std::vector<ValueId> Builder::add_op(OpKind kind, std::vector<ValueId> inputs, Attrs attrs,
                                     const std::string& name) {
  std::string full = name.empty() ? scoped(op_name(kind)) : scoped(name);
  NodeId id = graph_.add_node(kind, std::move(inputs), std::move(attrs), full, DType::f32, phase_);
  return graph_.node(id).outputs;
}

void Builder::set_array_size(int n) {
  CAMPO_CHECK(n >= 1, "a model array needs at least one model, got ", n);
  array_size_ = n;
}

ValueId Builder::placeholder(const std::string& name, const Shape& shape, DType dtype) {
  CAMPO_CHECK(graph_.find_node(name) < 0, "placeholder '", name, "' already exists");
  NodeId id = graph_.add_node(OpKind::Placeholder, {}, PlaceholderAttrs{shape, dtype}, name);
  return graph_.node(id).outputs[0];
}

ValueId Builder::variable_exact(const std::string& name, const Shape& shape, Init init,
                                VariableKind kind) {
  vars_.get_or_create(name, shape, init, kind);
  NodeId existing = graph_.find_node(name);
  if (existing >= 0 && graph_.node(existing).kind == OpKind::Variable)
    return graph_.node(existing).outputs[0];
  CAMPO_CHECK(existing < 0, "name '", name, "' is used by a non-variable node");
  NodeId id = graph_.add_node(OpKind::Variable, {}, VariableAttrs{shape}, name);
  return graph_.node(id).outputs[0];
}

ValueId Builder::variable(const std::string& name, const Shape& shape, Init init,
                          VariableKind kind) {
  return variable_exact(scoped(name), shape, init, kind);
}

ValueId Builder::conv2d(ValueId x, ValueId w, ConvAttrs a) { return op(OpKind::Conv2D, {x, w}, a); }

ValueId Builder::conv2d_transpose(ValueId x, ValueId w, ConvAttrs a) {
  return op(OpKind::Conv2DBackpropInput, {x, w}, a);
}

ValueId Builder::bias_add(ValueId x, ValueId bias) { return op(OpKind::BiasAdd, {x, bias}); }

ValueId Builder::batch_norm(ValueId x, ValueId scale, ValueId offset, ValueId running_mean,
                            ValueId running_var, float epsilon, float momentum) {
  return op(OpKind::FusedBatchNorm, {x, scale, offset, running_mean, running_var},
            BatchNormAttrs{epsilon, momentum, is_training_});
}

ValueId Builder::relu(ValueId x) { return op(OpKind::Relu, {x}); }
ValueId Builder::leaky_relu(ValueId x, float alpha) {
  return op(OpKind::LeakyRelu, {x}, LeakyReluAttrs{alpha});
}
ValueId Builder::tanh(ValueId x) { return op(OpKind::Tanh, {x}); }
ValueId Builder::sigmoid(ValueId x) { return op(OpKind::Sigmoid, {x}); }
ValueId Builder::softmax(ValueId x) { return op(OpKind::Softmax, {x}); }
ValueId Builder::gelu(ValueId x, bool approximate) {
  return op(OpKind::Gelu, {x}, GeluAttrs{approximate});
}
ValueId Builder::layer_norm(ValueId x, ValueId scale, ValueId offset, float epsilon) {
  return op(OpKind::LayerNorm, {x, scale, offset}, LayerNormAttrs{epsilon});
}

ValueId Builder::max_pool(ValueId x, int kernel, int stride, int pad) {
  PoolAttrs a{kernel, kernel, stride, stride, pad, pad, {}};
  return op(OpKind::MaxPool, {x}, a);
}

ValueId Builder::avg_pool(ValueId x, int kernel, int stride, int pad, bool count_include_pad) {
  PoolAttrs a{kernel, kernel, stride, stride, pad, pad, {}, count_include_pad};
  return op(OpKind::AvgPool, {x}, a);
}

ValueId Builder::global_avg_pool(ValueId x) {
  const Shape& s = shape(x);
  CAMPO_CHECK(s.size() == 4, "global_avg_pool expects NCHW input, got ", shape_str(s));
  PoolAttrs a{int(s[2]), int(s[3]), 1, 1, 0, 0, {}};
  return op(OpKind::AvgPool, {x}, a, "GlobalAvgPool");
}

ValueId Builder::add(ValueId a, ValueId b) { return op(OpKind::Add, {a, b}); }

ValueId Builder::add_n(std::vector<ValueId> xs) {
  CAMPO_CHECK(!xs.empty(), "add_n of nothing");
  if (xs.size() == 1) return xs[0];
  return op(OpKind::AddN, std::move(xs));
}

ValueId Builder::mul(ValueId a, ValueId b) { return op(OpKind::Mul, {a, b}); }

ValueId Builder::reshape(ValueId x, Shape s) { return op(OpKind::Reshape, {x}, ReshapeAttrs{s}); }

ValueId Builder::concat(std::vector<ValueId> xs, int axis) {
  CAMPO_CHECK(!xs.empty(), "concat of nothing");
  if (xs.size() == 1) return xs[0];
  const int rank = int(shape(xs[0]).size());
  CAMPO_CHECK(axis >= -rank && axis < rank, "concat: axis ", axis,
              " is out of range for inputs of shape ", shape_str(shape(xs[0])), " (expected ",
              -rank, " .. ", rank - 1, ")");
  return op(OpKind::ConcatV2, std::move(xs), ConcatAttrs{axis < 0 ? axis + rank : axis});
}

ValueId Builder::flatten(ValueId x) {
  const Shape& s = shape(x);
  CAMPO_CHECK(!s.empty(), "flatten of a scalar");
  return reshape(x, {s[0], -1});
}

ValueId Builder::dropout(ValueId x, float rate) {
  CAMPO_CHECK(rate >= 0.0f && rate < 1.0f, "dropout rate must be in [0, 1), got ", rate);
  if (!is_training_ || rate == 0.0f) return x;
  return op(OpKind::Dropout, {x}, DropoutAttrs{rate});
}

ValueId Builder::dropout(ValueId x, std::vector<float> slice_rates) {
  CAMPO_CHECK(!slice_rates.empty(), "dropout: no slice rates (give one per slice)");
  for (size_t i = 0; i < slice_rates.size(); ++i)
    CAMPO_CHECK(slice_rates[i] >= 0.0f && slice_rates[i] < 1.0f, "dropout: slice rate ", i,
                " must be in [0, 1), got ", slice_rates[i]);
  const bool any_active =
      std::any_of(slice_rates.begin(), slice_rates.end(), [](float r) { return r != 0.0f; });
  if (!is_training_ || !any_active) return x;
  return op(OpKind::Dropout, {x}, DropoutAttrs{0.0f, std::move(slice_rates)});
}

ValueId Builder::gather(ValueId params, ValueId indices) {
  return op(OpKind::GatherV2, {params, indices}, GatherAttrs{0});
}

ValueId Builder::unsorted_segment_sum(ValueId data, ValueId segment_ids, int64_t num_segments) {
  return op(OpKind::UnsortedSegmentSum, {data, segment_ids}, UnsortedSegmentSumAttrs{num_segments});
}

// Without an ignore_label the node carries no attributes, exactly as before the option.
ValueId Builder::sparse_softmax_cross_entropy(ValueId logits, ValueId labels,
                                              std::optional<int32_t> ignore_label) {
  if (!ignore_label) return op(OpKind::SparseSoftmaxCrossEntropyWithLogits, {logits, labels});
  return op(OpKind::SparseSoftmaxCrossEntropyWithLogits, {logits, labels},
            SparseSoftmaxCrossEntropyAttrs{ignore_label});
}

ValueId Builder::sigmoid_cross_entropy(ValueId logits, ValueId targets) {
  return op(OpKind::SigmoidCrossEntropyWithLogits, {logits, targets});
}

ValueId Builder::mean(ValueId x, std::vector<int> axes, bool keep_dims) {
  return op(OpKind::Mean, {x}, ReduceAttrs{std::move(axes), keep_dims, {}});
}

ValueId Builder::sum(ValueId x, std::vector<int> axes, bool keep_dims) {
  return op(OpKind::Sum, {x}, ReduceAttrs{std::move(axes), keep_dims, {}});
}

ValueId Builder::constant(float value, Shape shape) {
  return op(OpKind::Const, {}, ConstAttrs{std::move(shape), value});
}

ValueId Builder::cast(ValueId x, DType to) { return op(OpKind::Cast, {x}, CastAttrs{to}); }

}  // namespace campo
