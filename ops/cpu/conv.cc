// CPU kernels of the convolution family (oneDNN 2.6). Filters are plain OIHW buffers; a
// filter with groups g is read by oneDNN as goihw [g, O/g, C/g, kh, kw], the same bytes as
// OIHW. Activations (x, y, dx, dy) are NCHW, or blocked (nChw8c, nChw16c) where the executor's
// layout pass (graph/layout.h) says so in the spec (TensorDesc::layout). With s = stride, d =
// dilation, c = input channel c' of o's group:
//   Conv2D               y[n,o,i,j] = sum_{c',p,q} x[n,c,i*s-pad+p*d,j*s-pad+q*d] w[o,c',p,q]
//   Conv2DBackpropInput  dx = conv^T(dy, w), the adjoint of x -> conv(x, w)
//   Conv2DBackpropFilter dw = the adjoint of w -> conv(x, w), applied to dy
// Each kernel builds its primitive (and any reorder) once, at construction; its reorder
// buffers and scratchpad lie in the context's shared workspace; run() only rebinds the data
// handles and executes.
//
// Padding (KernelSpec::pad_to = p > 0, amp/padding.h): a native bf16 kernel whose input or
// output channel count is not a multiple of p runs on zero-padded channels
// (ops/conv_padding.h). f32 kernels ignore pad_to, and so does every emulated kernel (f16 on
// CPU, bf16 without AVX-512 BF16): its convolution is the f32 one, not the bf16 fast path
// that padding aims at.
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <unordered_map>

#include "ops/conv_padding.h"
#include "ops/cpu/context.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// Whether a primitive asks oneDNN for its preferred (blocked) layouts, format_tag::any,
// reordering our plain buffers to and from buffers owned by the kernel, instead of running
// on NCHW / OIHW directly: blocked layouts, reorders included, are faster for kernels larger
// than 1x1 and slower for 1x1 kernels and for backprop-input into fewer than 16 channels
// (the gradient of an image or of a 1-channel input); docs/kernels.md, "Convolution".
// Activations that arrive blocked always take the blocked path: they need no reorder then
// (the layout pass blocks them as oneDNN's kernels want them here, cpu_blocked_layout).
bool prefer_blocked_layouts(OpKind kind, const Shape& x, const Shape& w) {
  if (w[2] == 1 && w[3] == 1) return false;
  if (kind == OpKind::Conv2DBackpropInput && x[1] < 16) return false;
  return true;
}

memory::dims to_dims(const Shape& s) { return memory::dims(s.begin(), s.end()); }

// One convolution's geometry as oneDNN descriptors: x [N, C, H, W] * w [O, C/g, kh, kw]
// -> y [N, O, Ho, Wo]. `plain_*` describe our buffers (x and y in their spec layouts),
// `prim_*` what the primitive is asked for (the same, or format_tag::any).
//
// With `one_group` (runs_per_group: a grouped convolution run one group at a time), the
// problem is one group's: x and y are strided views of the group's channels of the plain
// [N, C, H, W] / [N, O, Ho, Wo] buffers (GroupOffsets below moves them to the group), the
// filter the group's dense [O/g, C/g, kh, kw] slice, and the primitive runs on its preferred
// layouts, reordered from and to the views.
struct ConvProblem {
  memory::desc plain_x, plain_w, plain_y;
  memory::desc prim_x, prim_w, prim_y;
  memory::dims strides, dilates, pads;
  bool weights_blocked = false;

  ConvProblem(OpKind kind, const TensorDesc& x_desc, const Shape& w, const TensorDesc& y_desc,
              const ConvAttrs& a, DType dtype, bool one_group = false) {
    const Shape& x = x_desc.shape;
    const Shape& y = y_desc.shape;
    const memory::data_type dt = dnnl_type(dtype, "oneDNN convolution");
    strides = {a.stride_h, a.stride_w};
    dilates = {a.dilation_h - 1, a.dilation_w - 1};  // oneDNN counts dilation from 0
    pads = {a.pad_h, a.pad_w};                       // symmetric: padding_l == padding_r
    if (one_group) {
      CAMPO_CHECK(x_desc.layout == Layout::plain && y_desc.layout == Layout::plain,
                  "internal: a convolution run per group needs plain activations");
      const int64_t g = a.groups;
      auto group_view = [&](const Shape& t) {
        return memory::desc({t[0], t[1] / g, t[2], t[3]}, dt,
                            memory::dims{t[1] * t[2] * t[3], t[2] * t[3], t[3], 1});
      };
      plain_x = group_view(x);
      plain_y = group_view(y);
      plain_w = memory::desc({w[0] / g, w[1], w[2], w[3]}, dt, tag::oihw);
      prim_x = memory::desc(plain_x.get_dims(), dt, tag::any);
      prim_y = memory::desc(plain_y.get_dims(), dt, tag::any);
      prim_w = memory::desc(plain_w.get_dims(), dt, tag::any);
      weights_blocked = true;
      return;
    }
    plain_x = memory::desc(to_dims(x), dt, activation_format(x_desc.layout));
    plain_y = memory::desc(to_dims(y), dt, activation_format(y_desc.layout));
    memory::dims wd = to_dims(w);
    if (a.groups == 1) {
      plain_w = memory::desc(wd, dt, tag::oihw);
    } else {
      wd = {a.groups, w[0] / a.groups, w[1], w[2], w[3]};
      plain_w = memory::desc(wd, dt, tag::goihw);
    }
    if (prefer_blocked_layouts(kind, x, w) || x_desc.layout != Layout::plain ||
        y_desc.layout != Layout::plain) {
      prim_x = memory::desc(to_dims(x), dt, tag::any);
      prim_y = memory::desc(to_dims(y), dt, tag::any);
      prim_w = memory::desc(wd, dt, tag::any);
    } else {
      prim_x = plain_x, prim_y = plain_y, prim_w = plain_w;
    }
    weights_blocked = prim_w != plain_w;
  }

  // The weights (dw for Conv2DBackpropFilter) in another type than the data: bf16 x and dy
  // with an f32 dw is a cast folded into the kernel (Node::f32_output).
  void set_weights_type(DType t) {
    plain_w = memory::desc(plain_w.get_dims(), dnnl_type(t, "oneDNN convolution"),
                           plain_w.get_dims().size() == 5 ? tag::goihw : tag::oihw);
    prim_w = weights_blocked
                 ? memory::desc(plain_w.get_dims(), dnnl_type(t, "oneDNN convolution"), tag::any)
                 : plain_w;
  }

  dnnl::convolution_forward::primitive_desc forward_pd(const dnnl::engine& eng,
                                                       const dnnl::primitive_attr& attr) const {
    return dnnl::convolution_forward::primitive_desc(
        eng, dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, prim_x,
        prim_w, prim_y, strides, dilates, pads, pads, attr);
  }
};

// A oneDNN primitive bound to caller buffers in their layouts (plain, or blocked activations).
// Where the primitive chose another layout, the argument is reordered through a buffer in
// the context's shared workspace (ExecContext::reserve_workspace), as is its scratchpad:
// both are needed only while the kernel runs.
class BoundPrimitive {
 public:
  // Declares argument `arg` in the order run() receives the buffers.
  void add_arg(int arg, const memory::desc& plain, const memory::desc& chosen, bool is_input,
               const dnnl::engine& eng) {
    Port port;
    port.is_input = is_input;
    port.user = memory(plain, eng, DNNL_MEMORY_NONE);
    if (chosen == plain) {
      port.inner = port.user;
    } else {
      port.inner = memory(chosen, eng, DNNL_MEMORY_NONE);
      port.offset = add_buffer(chosen.get_size());
      const memory& from = is_input ? port.user : port.inner;
      const memory& to = is_input ? port.inner : port.user;
      port.reorder = dnnl::reorder(from, to);
      port.reorder_args = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    }
    args_[arg] = port.inner;
    ports_.push_back(std::move(port));
  }

  // The primitive, and its workspace reserved in `ctx` (the reorder buffers, the scratchpad
  // and what add_buffer asked for).
  void set_primitive(dnnl::primitive p, const memory::desc& scratchpad, ExecContext& ctx) {
    primitive_ = std::move(p);
    if (scratchpad.get_size() > 0) {
      scratchpad_ = memory(scratchpad, cpu_engine(ctx), DNNL_MEMORY_NONE);
      scratchpad_offset_ = add_buffer(scratchpad.get_size());
      args_[DNNL_ARG_SCRATCHPAD] = scratchpad_;
    }
    workspace_offset_ = ctx.reserve_workspace(workspace_bytes_);
  }
  // `bytes` more of the kernel's workspace (before set_primitive); their offset in it.
  size_t add_buffer(size_t bytes) {
    const size_t offset = workspace_bytes_;
    workspace_bytes_ += (bytes + 63) / 64 * 64;
    return offset;
  }
  // The kernel's part of the workspace, where add_buffer's offsets start.
  char* workspace(ExecContext& ctx) const {
    return static_cast<char*>(ctx.workspace()) + workspace_offset_;
  }

  // Buffers in the order of add_arg.
  void run(ExecContext& ctx, std::initializer_list<void*> buffers) {
    size_t i = 0;
    for (void* b : buffers) ports_[i++].user.set_data_handle(b);
    // Rebound every run: the workspace moves when a later kernel needs more, and other
    // kernels write it in between (setting the handle zeroes a blocked buffer's padding).
    char* ws = workspace(ctx);
    for (Port& p : ports_)
      if (p.reorder) p.inner.set_data_handle(ws + p.offset);
    if (scratchpad_) scratchpad_.set_data_handle(ws + scratchpad_offset_);
    dnnl::stream& s = cpu_stream(ctx);
    for (Port& p : ports_)
      if (p.is_input && p.reorder) p.reorder->execute(s, p.reorder_args);
    primitive_.execute(s, args_);
    for (Port& p : ports_)
      if (!p.is_input && p.reorder) p.reorder->execute(s, p.reorder_args);
    s.wait();
  }

 private:
  struct Port {
    bool is_input = true;
    memory user, inner;
    size_t offset = 0;  // of inner in the kernel's workspace, where reordered
    std::optional<dnnl::reorder> reorder;
    std::unordered_map<int, memory> reorder_args;
  };
  std::vector<Port> ports_;
  dnnl::primitive primitive_;
  std::unordered_map<int, memory> args_;
  memory scratchpad_;
  size_t scratchpad_offset_ = 0;
  size_t workspace_bytes_ = 0, workspace_offset_ = 0;
};

// The byte offsets from one group's x, w and y to the next's in the full plain buffers, and
// the number of groups a kernel runs one at a time (1: one primitive for the whole problem).
struct GroupOffsets {
  int groups = 1;
  size_t x = 0, w = 0, y = 0;

  GroupOffsets(const TensorDesc& x_desc, const Shape& w_shape, const TensorDesc& y_desc,
               const ConvAttrs& a, DType dtype) {
    if (!runs_per_group(a, w_shape)) return;
    groups = a.groups;
    const size_t bytes = dtype_size(dtype);
    const Shape& xs = x_desc.shape;
    const Shape& ys = y_desc.shape;
    x = size_t(xs[1] / groups * xs[2] * xs[3]) * bytes;
    y = size_t(ys[1] / groups * ys[2] * ys[3]) * bytes;
    w = size_t(shape_numel(w_shape) / groups) * bytes;
  }
  bool per_group() const { return groups > 1; }
};

// Runs `prim` once per group (once in all without a split), each argument (in add_arg
// order) moved on by its per-group byte step.
void run_groups(BoundPrimitive& prim, ExecContext& ctx, int groups,
                std::initializer_list<std::pair<void*, size_t>> buffers) {
  for (int g = 0; g < groups; ++g) {
    void* moved[3];
    size_t i = 0;
    for (const auto& [base, step] : buffers)
      moved[i++] = static_cast<char*>(base) + size_t(g) * step;
    prim.run(ctx, {moved[0], moved[1], moved[2]});
  }
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Turns a oneDNN refusal at construction into an error naming the node and its shapes.
template <typename F>
void build_or_explain(const KernelSpec& spec, F&& build) {
  try {
    build();
  } catch (const dnnl::error& e) {
    std::string shapes;
    for (const TensorDesc& d : spec.inputs) shapes += " " + shape_str(d.shape);
    CAMPO_FAIL(op_name(spec.kind), " '", spec.node_name, "': oneDNN could not build a ",
               dtype_name(spec.dtype), " kernel for inputs", shapes, ": ", e.what());
  }
}

// y = conv(x, w); inputs {x, w}, output y.
class Conv2DKernel : public Kernel {
 public:
  Conv2DKernel(const KernelSpec& spec, ExecContext& ctx)
      : off_(spec.inputs[0], spec.inputs[1].shape, spec.outputs[0], attrs_as<ConvAttrs>(spec.attrs),
             spec.dtype) {
    build_or_explain(spec, [&] {
      ConvProblem p(spec.kind, spec.inputs[0], spec.inputs[1].shape, spec.outputs[0],
                    attrs_as<ConvAttrs>(spec.attrs), spec.dtype, off_.per_group());
      auto pd = p.forward_pd(cpu_engine(ctx), user_scratchpad());
      prim_.add_arg(DNNL_ARG_SRC, p.plain_x, pd.src_desc(), true, cpu_engine(ctx));
      prim_.add_arg(DNNL_ARG_WEIGHTS, p.plain_w, pd.weights_desc(), true, cpu_engine(ctx));
      prim_.add_arg(DNNL_ARG_DST, p.plain_y, pd.dst_desc(), false, cpu_engine(ctx));
      prim_.set_primitive(dnnl::convolution_forward(pd), pd.scratchpad_desc(), ctx);
    });
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    run_groups(prim_, ctx, off_.groups,
               {{in[0].device_data(), off_.x},
                {in[1].device_data(), off_.w},
                {out[0].device_data(), off_.y}});
  }

 private:
  GroupOffsets off_;
  BoundPrimitive prim_;
};

// dx = conv^T(dy, w); inputs {dy, w}, output dx (also the transposed convolution).
class Conv2DBackpropInputKernel : public Kernel {
 public:
  Conv2DBackpropInputKernel(const KernelSpec& spec, ExecContext& ctx)
      : off_(spec.outputs[0], spec.inputs[1].shape, spec.inputs[0], attrs_as<ConvAttrs>(spec.attrs),
             spec.dtype) {
    build_or_explain(spec, [&] {
      ConvProblem p(spec.kind, spec.outputs[0], spec.inputs[1].shape, spec.inputs[0],
                    attrs_as<ConvAttrs>(spec.attrs), spec.dtype, off_.per_group());
      const dnnl::primitive_attr attr = user_scratchpad();
      auto hint = p.forward_pd(cpu_engine(ctx), attr);
      dnnl::convolution_backward_data::primitive_desc pd(
          cpu_engine(ctx), dnnl::algorithm::convolution_direct, p.prim_x, p.prim_w, p.prim_y,
          p.strides, p.dilates, p.pads, p.pads, hint, attr);
      prim_.add_arg(DNNL_ARG_DIFF_DST, p.plain_y, pd.diff_dst_desc(), true, cpu_engine(ctx));
      prim_.add_arg(DNNL_ARG_WEIGHTS, p.plain_w, pd.weights_desc(), true, cpu_engine(ctx));
      prim_.add_arg(DNNL_ARG_DIFF_SRC, p.plain_x, pd.diff_src_desc(), false, cpu_engine(ctx));
      prim_.set_primitive(dnnl::convolution_backward_data(pd), pd.scratchpad_desc(), ctx);
    });
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    run_groups(prim_, ctx, off_.groups,
               {{in[0].device_data(), off_.y},
                {in[1].device_data(), off_.w},
                {out[0].device_data(), off_.x}});
  }

 private:
  GroupOffsets off_;
  BoundPrimitive prim_;
};

// dw = d<conv(x, w), dy>/dw; inputs {x, dy}, output dw. A bf16 node may write an f32 dw (a
// folded cast, Node::f32_output): oneDNN's direct bf16 kernels write f32 weights at no
// extra cost, but its GEMM-based one (1x1 convolutions and small images) runs ~6% slower
// with f32 diff_weights (ResNet-50 at 32x32, ONEDNN_VERBOSE); there the kernel writes bf16
// into its own buffer and widens it, which costs a pass over the weights only.
class Conv2DBackpropFilterKernel : public Kernel {
 public:
  Conv2DBackpropFilterKernel(const KernelSpec& spec, ExecContext& ctx)
      : off_(spec.inputs[0], spec.outputs[0].shape, spec.inputs[1], attrs_as<ConvAttrs>(spec.attrs),
             spec.dtype) {
    build_or_explain(spec, [&] {
      const bool f32_dw = spec.outputs[0].dtype != spec.dtype;
      if (!build(spec, ctx, f32_dw, false)) {  // the GEMM path: compute bf16, widen in run()
        widened_elements_ = size_t(shape_numel(spec.outputs[0].shape));
        build(spec, ctx, false, true);
      }
    });
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    // The widened path's dw is in the node's dtype, so its per-group step is off_.w; a
    // direct f32 dw (a folded cast) steps by f32 elements.
    const size_t w_step = off_.w / dtype_size(spec_dtype_) * dtype_size(out[0].dtype());
    if (widened_elements_ == 0) {
      run_groups(prim_, ctx, off_.groups,
                 {{in[0].device_data(), off_.x},
                  {in[1].device_data(), off_.y},
                  {out[0].device_data(), w_step}});
      return;
    }
    void* widened = prim_.workspace(ctx) + widened_offset_;
    run_groups(prim_, ctx, off_.groups,
               {{in[0].device_data(), off_.x}, {in[1].device_data(), off_.y}, {widened, off_.w}});
    convert(widened, spec_dtype_, out[0].device_data(), out[0].dtype(), widened_elements_);
  }

 private:
  // Builds the primitive; with `f32_dw`, returns false (building nothing) where oneDNN
  // would use its GEMM-based implementation. `widen`: dw goes to a buffer of the node's
  // dtype in the workspace first.
  bool build(const KernelSpec& spec, ExecContext& ctx, bool f32_dw, bool widen) {
    spec_dtype_ = spec.dtype;
    ConvProblem p(spec.kind, spec.inputs[0], spec.outputs[0].shape, spec.inputs[1],
                  attrs_as<ConvAttrs>(spec.attrs), spec.dtype, off_.per_group());
    const dnnl::primitive_attr attr = user_scratchpad();
    auto hint = p.forward_pd(cpu_engine(ctx), attr);
    if (f32_dw) p.set_weights_type(DType::f32);
    dnnl::convolution_backward_weights::primitive_desc pd(
        cpu_engine(ctx), dnnl::algorithm::convolution_direct, p.prim_x, p.prim_w, p.prim_y,
        p.strides, p.dilates, p.pads, p.pads, hint, attr);
    if (f32_dw && std::string(pd.impl_info_str()).find("gemm") != std::string::npos) return false;
    prim_ = BoundPrimitive();
    prim_.add_arg(DNNL_ARG_SRC, p.plain_x, pd.src_desc(), true, cpu_engine(ctx));
    prim_.add_arg(DNNL_ARG_DIFF_DST, p.plain_y, pd.diff_dst_desc(), true, cpu_engine(ctx));
    prim_.add_arg(DNNL_ARG_DIFF_WEIGHTS, p.plain_w, pd.diff_weights_desc(), false, cpu_engine(ctx));
    if (widen) widened_offset_ = prim_.add_buffer(widened_elements_ * dtype_size(spec.dtype));
    prim_.set_primitive(dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), ctx);
    return true;
  }

  GroupOffsets off_;
  DType spec_dtype_ = DType::f32;
  BoundPrimitive prim_;
  // The GEMM path's dw in the node's dtype (in the workspace), widened to the f32 output.
  size_t widened_elements_ = 0, widened_offset_ = 0;
};

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  check_pad_to(spec);
  return std::make_unique<K>(spec, ctx);
}

KernelRegistrar conv2d_f32(OpKind::Conv2D, Device::cpu, DType::f32, make<Conv2DKernel>);
KernelRegistrar conv2d_backprop_input_f32(OpKind::Conv2DBackpropInput, Device::cpu, DType::f32,
                                          make<Conv2DBackpropInputKernel>);
KernelRegistrar conv2d_backprop_filter_f32(OpKind::Conv2DBackpropFilter, Device::cpu, DType::f32,
                                           make<Conv2DBackpropFilterKernel>);

// bf16: the same kernels on bf16 buffers (oneDNN accumulates in f32 and rounds the result
// once) where the CPU has AVX-512 BF16; emulated otherwise (ops/cpu/low_precision.h). f16
// likewise where the CPU has AVX-512 FP16 (oneDNN has no f16 convolution below it).
KernelRegistrar conv2d_bf16(
    OpKind::Conv2D, Device::cpu, DType::bf16,
    native_bf16_onednn<conv_with_padding<make<Conv2DKernel>, copy_rows_cpu>>);
KernelRegistrar conv2d_backprop_input_bf16(
    OpKind::Conv2DBackpropInput, Device::cpu, DType::bf16,
    native_bf16_onednn<conv_with_padding<make<Conv2DBackpropInputKernel>, copy_rows_cpu>>);
KernelRegistrar conv2d_backprop_filter_bf16(
    OpKind::Conv2DBackpropFilter, Device::cpu, DType::bf16,
    native_bf16_onednn<conv_with_padding<make<Conv2DBackpropFilterKernel>, copy_rows_cpu>>);

KernelRegistrar conv2d_f16(OpKind::Conv2D, Device::cpu, DType::f16,
                           native_f16_onednn<conv_with_padding<make<Conv2DKernel>, copy_rows_cpu>>);
KernelRegistrar conv2d_backprop_input_f16(
    OpKind::Conv2DBackpropInput, Device::cpu, DType::f16,
    native_f16_onednn<conv_with_padding<make<Conv2DBackpropInputKernel>, copy_rows_cpu>>);
KernelRegistrar conv2d_backprop_filter_f16(
    OpKind::Conv2DBackpropFilter, Device::cpu, DType::f16,
    native_f16_onednn<conv_with_padding<make<Conv2DBackpropFilterKernel>, copy_rows_cpu>>);

}  // namespace
}  // namespace campo
