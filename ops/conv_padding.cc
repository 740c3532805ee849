// The padded convolution-family kernel (ops/conv_padding.h).
#include "ops/conv_padding.h"

#include <string>
#include <vector>

namespace campo {
namespace {

int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

bool is_conv_family(OpKind kind) {
  return kind == OpKind::Conv2D || kind == OpKind::Conv2DBackpropInput ||
         kind == OpKind::Conv2DBackpropFilter;
}

// Which channel count an operand's dim 1 holds: an activation's C (x, dx) or K (y, dy), or
// the filter's [K, C, kh, kw] (w, dw).
enum class Role { activation_c, activation_k, filter };

class PaddedConvKernel final : public Kernel {
 public:
  PaddedConvKernel(const KernelSpec& spec, ExecContext& ctx, KernelFactory unpadded,
                   CopyRowsFn copy_rows)
      : copy_rows_(copy_rows) {
    const ConvChannels ch = conv_channels(spec);
    const int64_t Cp = round_up(ch.C, spec.pad_to), Kp = round_up(ch.K, spec.pad_to);
    KernelSpec inner = spec;
    inner.pad_to = 0;
    const bool forward = spec.kind == OpKind::Conv2D;
    const bool backprop_input = spec.kind == OpKind::Conv2DBackpropInput;
    // Inputs and output in the order of ops/conv_padding.h's table.
    pad(inner.inputs[0], backprop_input ? Role::activation_k : Role::activation_c, false, 0, Cp, Kp,
        spec, ctx);
    pad(inner.inputs[1], forward || backprop_input ? Role::filter : Role::activation_k, false, 1,
        Cp, Kp, spec, ctx);
    pad(inner.outputs[0],
        forward          ? Role::activation_k
        : backprop_input ? Role::activation_c
                         : Role::filter,
        true, 0, Cp, Kp, spec, ctx);
    inner_ = unpadded(inner, ctx);
  }

  void before_run(ExecContext& ctx) override { inner_->before_run(ctx); }
  void after_run(ExecContext& ctx) override { inner_->after_run(ctx); }
  std::string capture_blocker() const override { return inner_->capture_blocker(); }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    inner_in_ = in;  // reuses the vectors' storage after the first step
    inner_out_ = out;
    for (const Operand& o : operands_) {
      if (o.is_output) {
        inner_out_[o.index] = o.padded;
        continue;
      }
      copy_rows_(ctx, in[o.index].device_data(), o.row_elems, o.padded.device_data(),
                 o.padded_stride, o.rows, o.row_elems, o.elem);
      inner_in_[o.index] = o.padded;
    }
    inner_->run(ctx, inner_in_, inner_out_);
    for (const Operand& o : operands_)
      if (o.is_output)
        copy_rows_(ctx, o.padded.device_data(), o.padded_stride, out[o.index].device_data(),
                   o.row_elems, o.rows, o.row_elems, o.elem);
  }

 private:
  // An operand whose channels grow: `rows` rows of `row_elems` valid elements, a row every
  // `padded_stride` elements in `padded`.
  struct Operand {
    bool is_output = false;
    size_t index = 0;
    int64_t rows = 0, row_elems = 0, padded_stride = 0;
    size_t elem = 0;
    Tensor padded;
  };

  // Grows `d` (an operand of the inner spec) to the padded problem's shape; where it grows,
  // allocates its zeroed buffer.
  void pad(TensorDesc& d, Role role, bool is_output, size_t index, int64_t Cp, int64_t Kp,
           const KernelSpec& spec, ExecContext& ctx) {
    const Shape& s = d.shape;
    CAMPO_CHECK(s.size() == 4, "internal: ", op_name(spec.kind), " '", spec.node_name, "' has a ",
                s.size(), "-D operand");
    Shape padded = s;
    if (role == Role::filter) {
      padded[0] = Kp;
      padded[1] = Cp;
    } else {
      padded[1] = role == Role::activation_c ? Cp : Kp;
    }
    if (padded == s) return;
    CAMPO_CHECK(d.layout == Layout::plain, "internal: ", op_name(spec.kind), " '", spec.node_name,
                "' pads the channels of a ", layout_name(d.layout), " operand ", shape_str(s),
                "; only plain ones can be padded");
    Operand o;
    o.is_output = is_output;
    o.index = index;
    o.rows = s[0];
    o.row_elems = s[1] * s[2] * s[3];
    o.padded_stride = padded[1] * s[2] * s[3];
    o.elem = dtype_size(d.dtype);
    Backend& backend = ctx.backend();
    const size_t bytes = size_t(shape_numel(padded)) * o.elem;
    o.padded =
        Tensor::from_storage(backend.allocate(bytes), padded, d.dtype, backend.device().type);
    backend.fill_zero(o.padded);
    ctx.count_kernel_buffer(bytes);
    d.shape = padded;
    operands_.push_back(std::move(o));
  }

  CopyRowsFn copy_rows_;
  std::unique_ptr<Kernel> inner_;
  std::vector<Operand> operands_;
  std::vector<Tensor> inner_in_, inner_out_;
};

}  // namespace

ConvChannels conv_channels(const KernelSpec& spec) {
  CAMPO_CHECK(is_conv_family(spec.kind), "internal: conv_channels of a ", op_name(spec.kind));
  const Shape& w =
      spec.kind == OpKind::Conv2DBackpropFilter ? spec.outputs[0].shape : spec.inputs[1].shape;
  const int groups = attrs_as<ConvAttrs>(spec.attrs).groups;
  return {w[1] * groups, w[0]};
}

void check_pad_to(const KernelSpec& spec) {
  CAMPO_CHECK(spec.pad_to >= 0, op_name(spec.kind), " '", spec.node_name,
              "': pad_to must be >= 0, not ", spec.pad_to);
}

bool conv_runs_padded(const KernelSpec& spec) {
  check_pad_to(spec);
  const std::string what = std::string(op_name(spec.kind)) + " '" + spec.node_name + "'";
  if (spec.pad_to == 0) return false;
  const ConvChannels ch = conv_channels(spec);
  if (ch.C % spec.pad_to == 0 && ch.K % spec.pad_to == 0) return false;
  CAMPO_CHECK(attrs_as<ConvAttrs>(spec.attrs).groups == 1, what,
              ": padding (pad_to = ", spec.pad_to,
              ") is implemented for convolutions with one group, not ",
              attrs_as<ConvAttrs>(spec.attrs).groups, "; leave pad_to at 0");
  return true;
}

std::unique_ptr<Kernel> make_padded_conv(const KernelSpec& spec, ExecContext& ctx,
                                         KernelFactory unpadded, CopyRowsFn copy_rows) {
  CAMPO_CHECK(conv_runs_padded(spec), "internal: ", op_name(spec.kind), " '", spec.node_name,
              "' has nothing to pad to ", spec.pad_to);
  return std::make_unique<PaddedConvKernel>(spec, ctx, unpadded, copy_rows);
}

}  // namespace campo
