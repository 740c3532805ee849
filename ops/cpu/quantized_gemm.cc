// The CPU's quantized GEMM (FP8 and MX operands, runtime/gemm_quant.h), an emulation: each
// step, operand i of the node is quantized into an f32 staging buffer (per-tensor recipes:
// the decoded codes of x * scale_i; MX: the per-block dequantized values), the op's own f32
// kernel multiplies the staged operands (oneDNN, f32 accumulation), and the result is
// multiplied in f32 by inv_scale_0 * inv_scale_1 (1 for MX):
//
//   y = GEMM(decode(q_0), decode(q_1)) * (1/scale_0 * 1/scale_1)
//
// The codes of every element format are exact in bf16 and in f32 and a product of two of
// them is exact in f32, so this is what a bf16-operand GEMM with f32 accumulation (and an
// FP8 tensor-core GEMM) computes, up to the order of the f32 sums. MX blocks run along each
// operand's reduction axis (reduction_axis below), so a block's scale factors out of every
// partial dot product, as in the hardware formats.
//
// Inputs and the output are f32 and plain (graph/layout.cc keeps quantized nodes plain). The
// staged operands and their codes live in the context's shared workspace (reserved at
// construction, below what the f32 kernel reserves: ExecContext::WorkspaceFloor), so a model
// of many quantized GEMMs needs the largest one's staging, not the sum.
//
// --numerics: at a step the context's recorder is armed for, each watched operand's cast also
// counts what it lost (runtime/numerics.h), in the same pass, and the kernel writes the entry.
#include <omp.h>

#include "ops/kernel.h"
#include "runtime/check.h"
#include "runtime/hash.h"

namespace campo {
namespace {

// The axis of operand `operand` that the op sums over (its blocks' direction):
//   MatMul        A [M,K] (transposed: [K,M]), B [K,N] (transposed: [N,K]): the K axis
//   BatchMatMulV2 x [..., M, K] (adj_x: [..., K, M]), y [..., K, N] (adj_y: [..., N, K])
//   Conv2D        {x [N,C,H,W], w [O,C,kh,kw]}: C of both
//   Conv2DBackpropInput  {dy [N,O,H,W], w [O,C,kh,kw]}: O of both
//   Conv2DBackpropFilter {x [N,C,H,W], dy [N,O,H,W]}: N (the sum also runs over H, W)
int reduction_axis(const KernelSpec& spec, int operand) {
  const int rank = int(spec.inputs[size_t(operand)].shape.size());
  switch (spec.kind) {
    case OpKind::MatMul: {
      const auto& t = attrs_as<MatMulAttrs>(spec.attrs);
      return operand == 0 ? (t.transpose_a ? 0 : 1) : (t.transpose_b ? 1 : 0);
    }
    case OpKind::BatchMatMulV2: {
      const auto& t = attrs_as<BatchMatMulAttrs>(spec.attrs);
      return operand == 0 ? (t.adj_x ? rank - 2 : rank - 1) : (t.adj_y ? rank - 1 : rank - 2);
    }
    case OpKind::Conv2D:
      return 1;
    case OpKind::Conv2DBackpropInput:
      return operand == 0 ? 1 : 0;
    case OpKind::Conv2DBackpropFilter:
      return 0;
    default:
      CAMPO_FAIL("internal: a quantized ", op_name(spec.kind));
  }
}

size_t round_up(size_t bytes) { return (bytes + 63) / 64 * 64; }

BlockAxis block_axis(const Shape& shape, int axis) {
  BlockAxis b;
  for (int d = 0; d < int(shape.size()); ++d)
    (d < axis ? b.outer : d == axis ? b.length : b.inner) *= shape[size_t(d)];
  return b;
}

class QuantizedGemmKernel final : public Kernel {
 public:
  QuantizedGemmKernel(const KernelSpec& spec, ExecContext& ctx)
      : quant_(spec.quant), node_(spec.node_name), stream_key_(fnv1a64(spec.node_name)) {
    const std::string node = "quantized GEMM '" + spec.node_name + "'";
    CAMPO_CHECK(spec.dtype == DType::f32 && spec.inputs.size() == 2 && spec.outputs.size() == 1,
                "internal: ", node, " must compute in f32 on two inputs, got ",
                dtype_name(spec.dtype));
    CAMPO_CHECK(spec.quant_state.size() == 2, "internal: ", node, " without its state");
    size_t bytes = 0;
    for (int i = 0; i < 2; ++i) {
      const TensorDesc& d = spec.inputs[size_t(i)];
      CAMPO_CHECK(d.dtype == DType::f32 && d.layout == Layout::plain, "internal: ", node, " input ",
                  i, " is ", dtype_name(d.dtype), " ", layout_name(d.layout));
      CAMPO_CHECK(spec.quant_state[size_t(i)].numel() == gemm_quant_state_size(quant_.recipe) &&
                      spec.quant_state[size_t(i)].dtype() == DType::f32,
                  "internal: ", node, " has a state of the wrong size");
      const size_t n = size_t(shape_numel(d.shape));
      staged_offset_[size_t(i)] = bytes;
      bytes += round_up(n * sizeof(float));
      codes_offset_[size_t(i)] = bytes;
      bytes += round_up(n);
      shape_[size_t(i)] = d.shape;
      axis_[size_t(i)] = block_axis(d.shape, reduction_axis(spec, i));
    }
    offset_ = ctx.reserve_workspace(bytes);
    ExecContext::WorkspaceFloor floor(ctx, offset_ + bytes);  // the f32 kernel's own after
    CAMPO_CHECK(spec.outputs[0].dtype == DType::f32 && spec.outputs[0].layout == Layout::plain,
                "internal: ", node, " writes ", dtype_name(spec.outputs[0].dtype));
    state_ = spec.quant_state;
    KernelSpec inner = spec;
    inner.quant = {};
    inner.quant_state.clear();
    inner_ = create_kernel(inner, ctx);
  }

  void before_run(ExecContext& ctx) override { inner_->before_run(ctx); }
  void after_run(ExecContext& ctx) override { inner_->after_run(ctx); }
  std::string capture_blocker() const override { return inner_->capture_blocker(); }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    // The workspace moves when a later kernel grows it: the staged operands follow.
    char* workspace = static_cast<char*>(ctx.workspace()) + offset_;
    if (staged_.empty() || workspace != workspace_) {
      staged_.clear();
      for (size_t i = 0; i < 2; ++i)
        staged_.push_back(
            Tensor::borrow(workspace + staged_offset_[i], shape_[i], DType::f32, in[i].device()));
      workspace_ = workspace;
    }
    const std::array<int, 2> entries = numerics_entries(ctx);
    float factor = 1.0f;
    for (size_t i = 0; i < 2; ++i) {
      const Tensor& x = in[i];
      const size_t n = size_t(x.numel());
      const Tensor& state = state_[i];
      CastNumerics numerics;
      factor *= quantize_gemm_operand(
          quant_, int(i), {state.device_data<float>(), size_t(state.numel())},
          {x.device_data<float>(), n}, {staged_[i].device_data<float>(), n},
          {reinterpret_cast<uint8_t*>(workspace + codes_offset_[i]), n}, axis_[i], ctx.seed,
          stream_key_, entries[i] >= 0 ? &numerics : nullptr);
      if (entries[i] >= 0) ctx.numerics->write(entries[i], numerics);
    }
    inner_->run(ctx, staged_, out);
    if (factor == 1.0f) return;
    float* y = out[0].device_data<float>();
    const int64_t n = out[0].numel();
#pragma omp parallel for schedule(static) if (n >= (int64_t(1) << 15))
    for (int64_t i = 0; i < n; ++i) y[i] *= factor;
  }

 private:
  // The --numerics entries of the two operands for this step: -1 (each) unless the context's
  // recorder is armed and watches them (looked up once per recorder).
  std::array<int, 2> numerics_entries(const ExecContext& ctx) {
    const NumericsRecorder* r = ctx.numerics.get();
    if (!r || !r->armed()) return {-1, -1};
    if (r != recorder_) {
      recorder_ = r;
      entries_ = {r->find(node_, "a"), r->find(node_, "b")};
    }
    return entries_;
  }

  GemmQuant quant_;
  std::string node_;
  const NumericsRecorder* recorder_ = nullptr;
  std::array<int, 2> entries_ = {-1, -1};
  uint64_t stream_key_;
  std::unique_ptr<Kernel> inner_;
  std::vector<Tensor> staged_, state_;  // staged_: views of the workspace at workspace_
  char* workspace_ = nullptr;
  size_t offset_ = 0;  // of this kernel's part of the workspace
  std::array<size_t, 2> staged_offset_{}, codes_offset_{};  // within that part
  std::array<Shape, 2> shape_;
  std::array<BlockAxis, 2> axis_;
};

std::unique_ptr<Kernel> make_quantized_gemm(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<QuantizedGemmKernel>(spec, ctx);
}

struct QuantizedGemmRegistrar {
  QuantizedGemmRegistrar() { register_quantized_gemm_kernel(Device::cpu, make_quantized_gemm); }
} quantized_gemm_cpu;

}  // namespace
}  // namespace campo
