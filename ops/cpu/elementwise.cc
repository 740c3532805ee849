// CPU kernels of the element-wise ops, templated on the element type T: float, or bfloat16
// (ops/cpu/low_precision.h: loads widen exactly, the math is the f32 math, stores round once,
// so the bf16 kernels compute exactly what the f32 kernel emulated on bf16 data computes).
// Tanh, Sigmoid and Gelu forward, and GeluGrad, use oneDNN's eltwise primitives: their JIT'd
// AVX-512/AVX2 transcendentals are far faster than std::tanh / std::exp / std::erf loops at
// the baseline ISA this project compiles for. Everything else is memory bound arithmetic, where
// plain auto-vectorised `omp parallel for` loops match oneDNN (docs/kernels.md, "Element-wise ops")
// and keep NaN semantics explicit: Relu and LeakyRelu propagate NaN (so loss scaling sees it);
// gradients select, as TF. f16 is emulated (ops/cpu/low_precision.h).
#include <algorithm>
#include <array>
#include <bit>
#include <oneapi/dnnl/dnnl.hpp>
#include <type_traits>
#include <unordered_map>

#include "ops/cpu/context.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

// Loops shorter than this run on one thread (parallel start-up costs more than it saves).
constexpr int64_t kParallelElements = int64_t(1) << 15;

// out[i] = f(i) for i in [0, n); f must be a vectorisable expression. The loop is left to
// the auto-vectoriser: under `omp simd` GCC 12 turns the selects of Relu / ReluGrad into
// branches (15 ms instead of 0.9 ms for a ReLU of 3.2M random values, one thread). For bf16
// the loop is compiled for AVX-512 where the CPU has it (parallel_for).
template <typename T, typename F>
inline void for_each_index(int64_t n, F f) {
  parallel_for<T>(n, n >= kParallelElements, f);
}

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<K>(spec, ctx);
}

template <typename T>
const T* in_data(const Tensor& t) {
  return static_cast<const T*>(t.device_data());
}
template <typename T>
T* out_data(const Tensor& t) {
  return static_cast<T*>(t.device_data());
}

// ---- activations ----

// y = x < 0 ? 0 : x (NaN stays NaN).
template <typename T>
class ReluKernel : public Kernel {
 public:
  ReluKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = in_data<T>(in[0]);
    T* y = out_data<T>(out[0]);
    for_each_index<T>(in[0].numel(), [=](int64_t i) {
      const float v = float(x[i]);
      y[i] = v < 0.0f ? 0.0f : v;
    });
  }
};

// inputs {dY, Y}: dX = dY * (Y > 0), as a select (0 where Y <= 0, also at the kink).
template <typename T>
class ReluGradKernel : public Kernel {
 public:
  ReluGradKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = in_data<T>(in[0]);
    const T* y = in_data<T>(in[1]);
    T* dx = out_data<T>(out[0]);
    for_each_index<T>(in[0].numel(), [=](int64_t i) {
      const float g = float(dy[i]);  // loaded unconditionally, so the select vectorises
      dx[i] = float(y[i]) > 0.0f ? g : 0.0f;
    });
  }
};

// y = x > 0 ? x : alpha * x.
template <typename T>
class LeakyReluKernel : public Kernel {
 public:
  LeakyReluKernel(const KernelSpec& spec, ExecContext&)
      : alpha_(attrs_as<LeakyReluAttrs>(spec.attrs).alpha) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = in_data<T>(in[0]);
    T* y = out_data<T>(out[0]);
    const float alpha = alpha_;
    // max(v, 0) + alpha * min(v, 0): the same bits as the select (v + 0 = v, 0 + alpha v =
    // alpha v, -0 stays -0, NaN stays NaN) without a branch. The select `v > 0 ? v : alpha
    // * v`, with alpha read through the closure in one arm only, stays a scalar branch in
    // GCC 12: 15x slower than Relu on random signs (LowPrecisionBench.*Elementwise*).
    for_each_index<T>(in[0].numel(), [=](int64_t i) {
      const float v = float(x[i]);
      y[i] = std::max(v, 0.0f) + alpha * std::min(v, 0.0f);
    });
  }

 private:
  float alpha_;
};

// inputs {dY, X}: dX = X > 0 ? dY : alpha * dY.
template <typename T>
class LeakyReluGradKernel : public Kernel {
 public:
  LeakyReluGradKernel(const KernelSpec& spec, ExecContext&)
      : alpha_(attrs_as<LeakyReluAttrs>(spec.attrs).alpha) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = in_data<T>(in[0]);
    const T* x = in_data<T>(in[1]);
    T* dx = out_data<T>(out[0]);
    const float alpha = alpha_;
    // The select as a bit mask over both arms: GCC 12 keeps `x > 0 ? g : alpha * g` a
    // scalar branch for f32 (see LeakyReluKernel), 20x slower on random signs.
    for_each_index<T>(in[0].numel(), [=](int64_t i) {
      const float g = float(dy[i]);
      const uint32_t keep = float(x[i]) > 0.0f ? ~0u : 0u;
      dx[i] = std::bit_cast<float>((std::bit_cast<uint32_t>(g) & keep) |
                                   (std::bit_cast<uint32_t>(alpha * g) & ~keep));
    });
  }

 private:
  float alpha_;
};

// The two passes of DnnlEltwiseKernel: what it builds, and the primitive's arguments in
// the node's order (its inputs, then its output), so run() binds in[0], in[1], ..., out[0].

// y = f(x): inputs {x}, output y.
struct EltwiseForward {
  static constexpr const char* kWhat = "an eltwise kernel";
  static constexpr std::array kArgs = {DNNL_ARG_SRC, DNNL_ARG_DST};
  static dnnl::primitive build(dnnl::algorithm algorithm, const dnnl::memory::desc& md,
                               const dnnl::engine& engine) {
    return dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(
        engine, dnnl::prop_kind::forward_inference, algorithm, md, md, 0.0f, 0.0f));
  }
};

// dX = dY * f'(X), from the source, not the destination: inputs {dY, X}, output dX.
struct EltwiseBackward {
  static constexpr const char* kWhat = "an eltwise backward kernel";
  static constexpr std::array kArgs = {DNNL_ARG_DIFF_DST, DNNL_ARG_SRC, DNNL_ARG_DIFF_SRC};
  static dnnl::primitive build(dnnl::algorithm algorithm, const dnnl::memory::desc& md,
                               const dnnl::engine& engine) {
    // oneDNN builds a backward primitive from the forward one's descriptor (the hint).
    dnnl::eltwise_forward::primitive_desc hint(engine, dnnl::prop_kind::forward_training,
                                               algorithm, md, md, 0.0f, 0.0f);
    return dnnl::eltwise_backward(
        dnnl::eltwise_backward::primitive_desc(engine, algorithm, md, md, md, 0.0f, 0.0f, hint));
  }
};

// One oneDNN eltwise pass (EltwiseForward or EltwiseBackward) over the node's tensors seen
// as flat vectors of its dtype (f32 or bf16: oneDNN computes in f32 and rounds once; every
// tensor of the node has the output's shape). The primitive is built once here; run() only
// binds the buffers.
template <typename Pass>
class DnnlEltwiseKernel : public Kernel {
 public:
  DnnlEltwiseKernel(const KernelSpec& spec, ExecContext& ctx, dnnl::algorithm algorithm)
      : numel_(shape_numel(spec.outputs[0].shape)) {
    if (numel_ == 0) return;
    using dnnl::memory;
    const memory::data_type type =
        spec.dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    const memory::desc md({numel_}, type, memory::format_tag::a);
    try {
      primitive_ = Pass::build(algorithm, md, cpu_engine(ctx));
      for (size_t i = 0; i < kTensors; ++i) {
        tensors_[i] = memory(md, cpu_engine(ctx), DNNL_MEMORY_NONE);
        args_[Pass::kArgs[i]] = tensors_[i];
      }
    } catch (const dnnl::error& e) {
      CAMPO_FAIL(op_name(spec.kind), " '", spec.node_name, "': oneDNN could not build ",
                 Pass::kWhat, ": ", e.what());
    }
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (numel_ == 0) return;
    for (size_t i = 0; i + 1 < kTensors; ++i) tensors_[i].set_data_handle(in[i].device_data());
    tensors_[kTensors - 1].set_data_handle(out[0].device_data());
    primitive_.execute(cpu_stream(ctx), args_);
    cpu_stream(ctx).wait();
  }

 private:
  static constexpr size_t kTensors = Pass::kArgs.size();  // the inputs, then the output

  int64_t numel_;
  dnnl::primitive primitive_;
  std::array<dnnl::memory, kTensors> tensors_;  // the handles args_ holds, in kArgs' order
  std::unordered_map<int, dnnl::memory> args_;  // built once; run() only rebinds handles
};

// y = tanh(x) or y = 1 / (1 + exp(-x)).
std::unique_ptr<Kernel> make_tanh(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<DnnlEltwiseKernel<EltwiseForward>>(spec, ctx,
                                                             dnnl::algorithm::eltwise_tanh);
}
std::unique_ptr<Kernel> make_sigmoid(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<DnnlEltwiseKernel<EltwiseForward>>(spec, ctx,
                                                             dnnl::algorithm::eltwise_logistic);
}

// Exact: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))) (oneDNN eltwise_gelu_erf);
// approximate: y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (eltwise_gelu_tanh).
dnnl::algorithm gelu_algorithm(const KernelSpec& spec) {
  return attrs_as<GeluAttrs>(spec.attrs).approximate ? dnnl::algorithm::eltwise_gelu_tanh
                                                     : dnnl::algorithm::eltwise_gelu_erf;
}
std::unique_ptr<Kernel> make_gelu(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<DnnlEltwiseKernel<EltwiseForward>>(spec, ctx, gelu_algorithm(spec));
}

// inputs {dY, X}: dX = dY * f'(X). For Gelu:
//   exact:       f'(x) = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   approximate: with u = sqrt(2/pi) (x + 0.044715 x^3), t = tanh(u),
//                f'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
std::unique_ptr<Kernel> make_gelu_grad(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<DnnlEltwiseKernel<EltwiseBackward>>(spec, ctx, gelu_algorithm(spec));
}

// inputs {dY, Y}: dX = dY * (1 - Y^2).
template <typename T>
class TanhGradKernel : public Kernel {
 public:
  TanhGradKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = in_data<T>(in[0]);
    const T* y = in_data<T>(in[1]);
    T* dx = out_data<T>(out[0]);
    for_each_index<T>(in[0].numel(), [=](int64_t i) {
      const float v = float(y[i]);
      dx[i] = float(dy[i]) * (1.0f - v * v);
    });
  }
};

// inputs {dY, Y}: dX = dY * Y * (1 - Y).
template <typename T>
class SigmoidGradKernel : public Kernel {
 public:
  SigmoidGradKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = in_data<T>(in[0]);
    const T* y = in_data<T>(in[1]);
    T* dx = out_data<T>(out[0]);
    for_each_index<T>(in[0].numel(), [=](int64_t i) {
      const float v = float(y[i]);
      dx[i] = float(dy[i]) * v * (1.0f - v);
    });
  }
};

// ---- sums and products ----

// c = a + b.
template <typename T>
class AddKernel : public Kernel {
 public:
  AddKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* a = in_data<T>(in[0]);
    const T* b = in_data<T>(in[1]);
    T* c = out_data<T>(out[0]);
    for_each_index<T>(in[0].numel(), [=](int64_t i) { c[i] = float(a[i]) + float(b[i]); });
  }
};

// y = x1 + x2 + ... + xk, summed left to right in f32, blocked so each block of the sum
// stays in cache while the inputs stream through it (for T = float the block is y itself;
// otherwise an f32 block, rounded into y once).
template <typename T>
class AddNKernel : public Kernel {
 public:
  AddNKernel(const KernelSpec& spec, ExecContext&) : inputs_(spec.inputs.size()) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    for (size_t j = 0; j < in.size(); ++j) inputs_[j] = in_data<T>(in[j]);
    const T* const* x = inputs_.data();
    const int k = int(in.size());
    T* y = out_data<T>(out[0]);
    const int64_t n = out[0].numel();
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    parallel_for<T>(blocks, n >= kParallelElements, [=](int64_t blk) {
      const int64_t begin = blk * kBlock, end = std::min(n, begin + kBlock);
      if constexpr (std::is_same_v<T, float>) {
        sum_block(x, k, begin, end, y + begin);
      } else {
        float acc[kBlock];
        sum_block(x, k, begin, end, acc);
        T* yb = y + begin;
#pragma omp simd
        for (int64_t i = 0; i < end - begin; ++i) yb[i] = acc[i];
      }
    });
  }

 private:
  static constexpr int64_t kBlock = 4096;

  // acc[i - begin] = x0[i] + x1[i] + ... for i in [begin, end).
  static void sum_block(const T* const* x, int k, int64_t begin, int64_t end, float* acc) {
    const int64_t m = end - begin;
    const T* x0 = x[0] + begin;
    if (k == 1) {
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) acc[i] = float(x0[i]);
      return;
    }
    const T* x1 = x[1] + begin;
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) acc[i] = float(x0[i]) + float(x1[i]);
    for (int j = 2; j < k; ++j) {
      const T* xj = x[j] + begin;
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) acc[i] += float(xj[i]);
    }
  }

  std::vector<const T*> inputs_;  // sized at construction, filled every run
};

// c = a * b with b of a's shape, or b broadcast along a's trailing dims: a seen as
// [outer, inner] with outer = numel(b) (outer = 1 for a scalar b),
// c[o, i] = a[o, i] * b[o].
template <typename T>
class MulKernel : public Kernel {
 public:
  MulKernel(const KernelSpec& spec, ExecContext&) {
    numel_ = shape_numel(spec.inputs[0].shape);
    outer_ = shape_numel(spec.inputs[1].shape);
    inner_ = outer_ == 0 ? 0 : numel_ / outer_;
  }
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* a = in_data<T>(in[0]);
    const T* b = in_data<T>(in[1]);
    T* c = out_data<T>(out[0]);
    if (inner_ == 1) {
      for_each_index<T>(numel_, [=](int64_t i) { c[i] = float(a[i]) * float(b[i]); });
      return;
    }
    const int64_t outer = outer_, inner = inner_;
    if (outer >= 64) {
      parallel_for<T>(outer, numel_ >= kParallelElements, [=](int64_t o) {
        const float s = float(b[o]);
        const T* ao = a + o * inner;
        T* co = c + o * inner;
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) co[i] = float(ao[i]) * s;
      });
    } else {
      for (int64_t o = 0; o < outer; ++o) {
        const float s = float(b[o]);
        const T* ao = a + o * inner;
        T* co = c + o * inner;
        for_each_index<T>(inner, [=](int64_t i) { co[i] = float(ao[i]) * s; });
      }
    }
  }

 private:
  int64_t numel_ = 0, outer_ = 0, inner_ = 0;
};

// ---- Dropout ----

// outputs {y, mask}: mask = u >= rate ? 1 / (1 - rate) : 0 with u uniform in [0, 1),
// y = x * mask (with the f32 mask; a bf16 mask output is that mask rounded). One 64-bit
// seed is drawn from ctx.rng per run; block b of 4096 elements draws from its own generator
// seeded by (seed, b), so the mask depends only on ctx.rng's state (not on the thread count)
// and the blocks fill in parallel. With per-slice rates (ops/op.h DropoutAttrs) element i
// lies in slice (i / inner) % S and uses that slice's rate; the draws are the same, so equal
// slice rates give the scalar rate's mask.
template <typename T>
class DropoutKernel : public Kernel {
 public:
  DropoutKernel(const KernelSpec& spec, ExecContext&) {
    const auto& a = attrs_as<DropoutAttrs>(spec.attrs);
    rates_ = a.slice_rates.empty() ? std::vector<float>{a.rate} : a.slice_rates;
    for (float r : rates_) scales_.push_back(1.0f / (1.0f - r));
    const Shape& s = spec.inputs[0].shape;
    const int64_t n = shape_numel(s);
    // One slice covering everything, or [outer, S, inner] with S = rates_.size().
    inner_ = a.slice_rates.empty() || n == 0 ? std::max<int64_t>(n, 1)
                                             : n / (s[0] * int64_t(rates_.size()));
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const T* x = in_data<T>(in[0]);
    T* y = out_data<T>(out[0]);
    T* mask = out_data<T>(out[1]);
    const int64_t n = in[0].numel();
    const uint64_t seed = ctx.rng.next_u64();
    const float* rates = rates_.data();
    const float* scales = scales_.data();
    const int64_t slices = int64_t(rates_.size()), inner = inner_;
    constexpr int64_t kBlock = 4096;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    parallel_for<T>(blocks, n >= kParallelElements, [=](int64_t blk) {
      const int64_t begin = blk * kBlock, end = std::min(n, begin + kBlock);
      Rng rng(seed ^ (uint64_t(blk) * 0xd1b54a32d192ed03ull));
      float m[kBlock];
      // Runs of one slice: [i, run_end) lies in one block of `inner` elements.
      for (int64_t i = begin; i < end;) {
        const int64_t chunk = i / inner, run_end = std::min(end, (chunk + 1) * inner);
        const float rate = rates[chunk % slices], scale = scales[chunk % slices];
        for (; i < run_end; ++i) m[i - begin] = rng.uniform() >= rate ? scale : 0.0f;
      }
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        mask[i] = m[i - begin];
        y[i] = float(x[i]) * m[i - begin];
      }
    });
  }

 private:
  std::vector<float> rates_, scales_;  // one per slice (one for a scalar rate)
  int64_t inner_ = 1;                  // elements per (outer, slice) block
};

// Registers the f32 kernel and the bf16 one (plain loops, or oneDNN eltwise for Tanh /
// Sigmoid, each falling back to emulation as ops/cpu/low_precision.h says).
#define CAMPO_REGISTER_ELEMENTWISE(name, kind, Kernel)                                    \
  KernelRegistrar name##_f32(OpKind::kind, Device::cpu, DType::f32, make<Kernel<float>>); \
  KernelRegistrar name##_bf16(OpKind::kind, Device::cpu, DType::bf16,                     \
                              native_bf16_loops<make<Kernel<bfloat16>>>);

CAMPO_REGISTER_ELEMENTWISE(relu, Relu, ReluKernel)
CAMPO_REGISTER_ELEMENTWISE(relu_grad, ReluGrad, ReluGradKernel)
CAMPO_REGISTER_ELEMENTWISE(leaky_relu, LeakyRelu, LeakyReluKernel)
CAMPO_REGISTER_ELEMENTWISE(leaky_relu_grad, LeakyReluGrad, LeakyReluGradKernel)
CAMPO_REGISTER_ELEMENTWISE(tanh_grad, TanhGrad, TanhGradKernel)
CAMPO_REGISTER_ELEMENTWISE(sigmoid_grad, SigmoidGrad, SigmoidGradKernel)
CAMPO_REGISTER_ELEMENTWISE(add, Add, AddKernel)
CAMPO_REGISTER_ELEMENTWISE(add_n, AddN, AddNKernel)
CAMPO_REGISTER_ELEMENTWISE(mul, Mul, MulKernel)
CAMPO_REGISTER_ELEMENTWISE(dropout, Dropout, DropoutKernel)
#undef CAMPO_REGISTER_ELEMENTWISE

KernelRegistrar tanh_f32(OpKind::Tanh, Device::cpu, DType::f32, make_tanh);
KernelRegistrar tanh_bf16(OpKind::Tanh, Device::cpu, DType::bf16, native_bf16_onednn<make_tanh>);
KernelRegistrar gelu_f32(OpKind::Gelu, Device::cpu, DType::f32, make_gelu);
KernelRegistrar gelu_bf16(OpKind::Gelu, Device::cpu, DType::bf16, native_bf16_onednn<make_gelu>);
KernelRegistrar gelu_grad_f32(OpKind::GeluGrad, Device::cpu, DType::f32, make_gelu_grad);
KernelRegistrar gelu_grad_bf16(OpKind::GeluGrad, Device::cpu, DType::bf16,
                               native_bf16_onednn<make_gelu_grad>);
KernelRegistrar sigmoid_f32(OpKind::Sigmoid, Device::cpu, DType::f32, make_sigmoid);
KernelRegistrar sigmoid_bf16(OpKind::Sigmoid, Device::cpu, DType::bf16,
                             native_bf16_onednn<make_sigmoid>);

}  // namespace
}  // namespace campo
