// Builder: the API models (and gradient builders, through ops/schema.h's GradientBuilder)
// use to emit nodes. Every helper is a thin wrapper over op(); the op's schema does the
// shape checks.
// Names: variables get the current scope as prefix ("layer1.0." + "conv1.weight"),
// so parameter names match PyTorch's state_dict.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/variables.h"

namespace campo {

class Builder final : public GradientBuilder {
 public:
  Builder(Graph& graph, VariableStore& vars) : graph_(graph), vars_(vars) {}

  Graph& graph() { return graph_; }
  VariableStore& variables() { return vars_; }

  // Training mode: batch-norm uses batch statistics, dropout is active.
  bool is_training() const { return is_training_; }
  void set_training(bool t) { is_training_ = t; }
  // Model arrays (train/model_array.h): `n` models fused into one graph. Activations stack
  // the models along axis 1 (model i's channels or features are block i), and the layer
  // helpers (models/layers.h) emit grouped convolutions and batched matrix products over
  // variables that hold the n models' copies as n contiguous equal slices. 1: one model.
  int array_size() const { return array_size_; }
  void set_array_size(int n);
  // Phase given to new nodes (autodiff switches to backward, optimizers to update).
  void set_phase(Phase p) { phase_ = p; }
  Phase phase() const { return phase_; }

  // op_multi / op / matmul / batch_matmul / transpose (adding a node) come from
  // GradientBuilder (ops/schema.h): gradient builders use them too.

  // Scopes prefix node and variable names: {auto s = b.scope("layer1"); ...}
  struct ScopeGuard {
    Builder* b;
    ~ScopeGuard() { b->scopes_.pop_back(); }
  };
  [[nodiscard]] ScopeGuard scope(const std::string& name) {
    scopes_.push_back(name);
    return ScopeGuard{this};
  }
  std::string scoped(const std::string& name) const;

  const Shape& shape(ValueId v) const override { return graph_.value(v).shape; }
  DType dtype(ValueId v) const override { return graph_.value(v).dtype; }
  void set_compute_dtype(ValueId v, DType dtype) override {
    graph_.node(graph_.value(v).producer).dtype = dtype;
  }

  // ---- leaves ----
  ValueId placeholder(const std::string& name, const Shape& shape, DType dtype = DType::f32);
  // A model variable (name is scoped); created in the store on first use.
  ValueId variable(const std::string& name, const Shape& shape, Init init,
                   VariableKind kind = VariableKind::parameter);
  // A variable with an exact (unscoped) name, e.g. optimizer state.
  ValueId variable_exact(const std::string& name, const Shape& shape, Init init, VariableKind kind);

  // ---- ops ----
  ValueId conv2d(ValueId x, ValueId w, ConvAttrs a);
  // Transposed convolution (Conv2DBackpropInput in the forward graph); a.output_shape is
  // the output size [N, C_out, H, W]; w is [C_in_of_x, C_out / groups, kh, kw] as PyTorch's
  // ConvTranspose2d.
  ValueId conv2d_transpose(ValueId x, ValueId w, ConvAttrs a);
  ValueId bias_add(ValueId x, ValueId bias);
  // Returns y. In training mode, running stats are updated in place.
  ValueId batch_norm(ValueId x, ValueId scale, ValueId offset, ValueId running_mean,
                     ValueId running_var, float epsilon = 1e-5f, float momentum = 0.1f);
  ValueId relu(ValueId x);
  ValueId leaky_relu(ValueId x, float alpha);
  ValueId tanh(ValueId x);
  ValueId sigmoid(ValueId x);
  // Softmax over the last axis (TensorFlow's Softmax).
  ValueId softmax(ValueId x);
  // GELU: exact x * Phi(x) (BERT's), or its tanh approximation with `approximate`.
  ValueId gelu(ValueId x, bool approximate = false);
  // Layer normalisation over the last axis of x [..., C] with scale and offset [C]
  // (PyTorch's nn.LayerNorm); returns y.
  ValueId layer_norm(ValueId x, ValueId scale, ValueId offset, float epsilon);
  ValueId max_pool(ValueId x, int kernel, int stride, int pad = 0);
  // count_include_pad: divide by the whole kernel area, padding counted as zeros (PyTorch's
  // F.avg_pool2d default); false divides by the part of the window inside the input.
  ValueId avg_pool(ValueId x, int kernel, int stride, int pad = 0, bool count_include_pad = false);
  ValueId global_avg_pool(ValueId x);  // [N, C, H, W] -> [N, C, 1, 1]
  ValueId add(ValueId a, ValueId b);
  ValueId add_n(std::vector<ValueId> xs);
  ValueId mul(ValueId a, ValueId b);
  ValueId reshape(ValueId x, Shape shape);
  // ConcatV2 of xs along `axis` (negative counts from the end; stored normalised). One input
  // is returned as it is.
  ValueId concat(std::vector<ValueId> xs, int axis);
  ValueId flatten(ValueId x);              // [N, ...] -> [N, rest]
  ValueId dropout(ValueId x, float rate);  // identity outside training
  // Dropout with one rate per slice of axis 1 (a model array's models: ops/op.h
  // DropoutAttrs), x [outer, S * C, ...]; identity outside training and when every rate is 0.
  ValueId dropout(ValueId x, std::vector<float> slice_rates);
  // GatherV2 along axis 0: rows of params [V, D...] at i32 indices [I...] -> [I..., D...]
  // (an embedding lookup). Its gradient w.r.t. params is an UnsortedSegmentSum.
  ValueId gather(ValueId params, ValueId indices);
  // UnsortedSegmentSum: data [I..., D...] rows summed by i32 segment_ids [I...] into
  // [num_segments, D...], zeros where no id points.
  ValueId unsorted_segment_sum(ValueId data, ValueId segment_ids, int64_t num_segments);
  // Per-example loss [N] from logits [N, C] and i32 labels [N]. With `ignore_label`
  // (PyTorch's ignore_index, -100 by convention), rows labelled with it get loss 0 and no
  // gradient; every other label must lie in [0, C).
  ValueId sparse_softmax_cross_entropy(ValueId logits, ValueId labels,
                                       std::optional<int32_t> ignore_label = std::nullopt);
  // Element-wise loss from logits and f32 targets of the same shape.
  ValueId sigmoid_cross_entropy(ValueId logits, ValueId targets);
  ValueId mean(ValueId x, std::vector<int> axes = {}, bool keep_dims = false);
  ValueId sum(ValueId x, std::vector<int> axes = {}, bool keep_dims = false);
  ValueId cast(ValueId x, DType to);
  // An f32 constant of `shape` (default a scalar) filled with `value`.
  ValueId constant(float value, Shape shape = {});

 private:
  // Names are scoped; nodes get the builder's phase.
  std::vector<ValueId> add_op(OpKind kind, std::vector<ValueId> inputs, Attrs attrs,
                              const std::string& name) override;

  Graph& graph_;
  VariableStore& vars_;
  std::vector<std::string> scopes_;
  bool is_training_ = true;
  int array_size_ = 1;
  Phase phase_ = Phase::forward;
};

}  // namespace campo
