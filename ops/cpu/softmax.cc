// CPU kernels of Softmax / SoftmaxGrad. Data is viewed as [R, S]: S = the last axis, R =
// the product of the others (for attention scores [B, H, S, S], R = B * H * S rows).
//
// Softmax runs oneDNN's softmax_v2 (algorithm softmax_accurate: the row maximum is
// subtracted before exp, so large logits do not overflow), f32 or bf16 data (bf16: f32
// math inside oneDNN, one rounding of y); its JIT'd exp is far faster than a std::exp loop
// at the baseline ISA this project compiles for. SoftmaxGrad is memory bound (one dot
// product and one scaled subtraction per row): a plain loop over rows, templated on the
// element type T (float or bfloat16, ops/cpu/low_precision.h), f32 math. f16 is emulated.
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "ops/cpu/context.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

// Rows and row length of a softmax over the last axis of `shape` (rank >= 1).
struct Rows {
  int64_t rows = 0, cols = 0;
};
Rows softmax_rows(const Shape& shape) {
  Rows r;
  r.cols = shape.back();
  r.rows = r.cols == 0 ? 0 : shape_numel(shape) / r.cols;
  return r;
}

// y[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))).
// The primitive is built once here; run() only binds the buffers.
class DnnlSoftmaxKernel final : public Kernel {
 public:
  DnnlSoftmaxKernel(const KernelSpec& spec, ExecContext& ctx)
      : dims_(softmax_rows(spec.inputs[0].shape)) {
    if (dims_.rows == 0) return;
    using dnnl::memory;
    const memory::data_type type =
        spec.dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc md({dims_.rows, dims_.cols}, type, memory::format_tag::ab);
    try {
      dnnl::softmax_forward::primitive_desc pd(cpu_engine(ctx),
                                               dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::softmax_accurate, md, md, 1);
      primitive_ = dnnl::softmax_forward(pd);
      src_ = memory(md, cpu_engine(ctx), DNNL_MEMORY_NONE);
      dst_ = memory(md, cpu_engine(ctx), DNNL_MEMORY_NONE);
      args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
    } catch (const dnnl::error& e) {
      CAMPO_FAIL("Softmax '", spec.node_name,
                 "': oneDNN could not build a softmax kernel: ", e.what());
    }
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (dims_.rows == 0) return;
    src_.set_data_handle(in[0].device_data());
    dst_.set_data_handle(out[0].device_data());
    primitive_.execute(cpu_stream(ctx), args_);
    cpu_stream(ctx).wait();
  }

 private:
  Rows dims_;
  dnnl::softmax_forward primitive_;
  dnnl::memory src_, dst_;
  std::unordered_map<int, dnnl::memory> args_;
};

std::unique_ptr<Kernel> make_softmax(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<DnnlSoftmaxKernel>(spec, ctx);
}

// Rows shorter than this many elements in total run on one thread.
constexpr int64_t kParallelElements = int64_t(1) << 15;

// inputs {dY, Y}: per row, s = sum(dY * Y) (f32), dX = (dY - s) * Y.
template <typename T>
class SoftmaxGradKernel final : public Kernel {
 public:
  SoftmaxGradKernel(const KernelSpec& spec, ExecContext&)
      : dims_(softmax_rows(spec.inputs[1].shape)) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].device_data());
    const T* y = static_cast<const T*>(in[1].device_data());
    T* dx = static_cast<T*>(out[0].device_data());
    const int64_t cols = dims_.cols;
    parallel_for<T>(dims_.rows, dims_.rows * cols >= kParallelElements, [=](int64_t r) {
      const T* dyr = dy + r * cols;
      const T* yr = y + r * cols;
      T* dxr = dx + r * cols;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < cols; ++i) s += float(dyr[i]) * float(yr[i]);
#pragma omp simd
      for (int64_t i = 0; i < cols; ++i) dxr[i] = (float(dyr[i]) - s) * float(yr[i]);
    });
  }

 private:
  Rows dims_;
};

template <typename T>
std::unique_ptr<Kernel> make_softmax_grad(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<SoftmaxGradKernel<T>>(spec, ctx);
}

KernelRegistrar softmax_f32(OpKind::Softmax, Device::cpu, DType::f32, make_softmax);
KernelRegistrar softmax_bf16(OpKind::Softmax, Device::cpu, DType::bf16,
                             native_bf16_onednn<make_softmax>);
KernelRegistrar softmax_grad_f32(OpKind::SoftmaxGrad, Device::cpu, DType::f32,
                                 make_softmax_grad<float>);
KernelRegistrar softmax_grad_bf16(OpKind::SoftmaxGrad, Device::cpu, DType::bf16,
                                  native_bf16_loops<make_softmax_grad<bfloat16>>);

}  // namespace
}  // namespace campo
