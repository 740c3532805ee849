// The CUDA backend's quantized GEMM (FP8 operands, runtime/gemm_quant.h; the CPU's emulation,
// ops/cpu/quantized_gemm.cc, is the specification). Which node runs how is decided on the
// host by plan_quantized_gemm_on_cuda (ops/quantized_gemm_route.h):
//
//  - fp8: each operand is cast to FP8 codes on the GPU, written K-contiguous (A as [M, K], B
//    as [N, K]: a transposing cast where the node's operand is stored the other way, which is
//    cuBLASLt FP8's "TN" layout), and cuBLASLt multiplies the codes on the FP8 tensor cores
//    with f32 accumulation into the f32 output, each operand's product scaled by its inverse
//    scale (CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER):
//        y = (1/s_a * 1/s_b) * sum_k code_a[m, k] code_b[k, n]
//  - emulated: each operand is cast and decoded into an f32 buffer (the same codes), the op's
//    own f32 CUDA kernel multiplies the decoded operands, and the result is multiplied by
//    1/s_a * 1/s_b, as the CPU does.
//
// Per operand and step, three launches on the context's stream, mirroring
// quantize_gemm_operand:
//  1. amax = max |x_i| (+inf when some x_i is not finite), current and delayed scaling only;
//  2. one block updates the state in place (the same tensor, layout and rules as the CPU:
//     runtime/gemm_quant.h, so a checkpoint moves between devices) and writes this step's
//     scale and 1/scale to the kernel's scratch:
//        none: 1; current: scale_from_amax(amax); delayed: state[0] (1 while not positive),
//        then, for a finite amax, the history is pushed and state[0] = scale_from_amax(its
//        reduction); state[1] += 1;
//  3. the cast: code = fp8(x * scale), round to nearest even, saturating or not as the recipe
//     says (encode_fp8 below: runtime/minifloat.h's rules).
// Everything is read from device memory at run time (nothing from the host), so a step
// captured into a CUDA graph replays it unchanged.
//
// Differences from the CPU, by construction: the sums' order (and, on the FP8 path, the
// tensor cores' accumulation; tests/cuda/quantized_gemm_cuda_test.cc states the bound); a NaN
// encodes as the format's NaN without its sign; the step count is not checked against 2^24
// (the CPU throws there); --numerics records nothing here. MX formats and stochastic
// rounding are refused (the route).
//
// Memory: the codes (fp8) or decoded operands (emulated) are buffers of the kernel's own,
// allocated at construction (counted as kernel buffers): the CUDA kernels place their
// workspace at the start of the context's shared one (ops/cuda/gemm.cc), so a staged operand
// there would be overwritten by the inner kernel's.
#include <cuda_fp8.h>

#include <memory>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/gemm.h"
#include "ops/quantized_gemm_route.h"

namespace campo {
namespace {

constexpr int kBlock = 256;

// max |x_i| over the tensor into *amax_bits (f32 bits; zeroed before): +inf where some x_i
// is inf or NaN (tensor_amax's rule). Non-negative floats order as their bits, so an integer
// atomicMax is the float max, and the max is exact in any order.
__global__ void amax_kernel(const float* __restrict__ x, int64_t n, unsigned* amax_bits) {
  __shared__ float scratch[kBlock / 32];
  float m = 0.0f;
  CAMPO_CUDA_FOR(i, n) {
    const float a = fabsf(x[i]);
    m = fmaxf(m, isfinite(a) ? a : INFINITY);
  }
  m = cuda::block_max<kBlock>(m, scratch);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

// What the state update needs of the recipe (GemmQuant, runtime/gemm_quant.h).
struct ScaleRule {
  Scaling scaling = Scaling::none;
  AmaxReduction reduction = AmaxReduction::max;
  int margin = 0;
  int history = 0;  // delayed: the amax history's length
  float max_finite = 0.0f;
};

// One operand's state update for this step (quantize_gemm_operand's per-tensor rules), one
// block of kBlock threads: scale_out = {this step's scale, 1 / scale}. state: [0] the next
// scale, [1] the step count, [2, 2 + history) the amax history, most recent first.
__global__ void update_scale_kernel(float* state, ScaleRule rule, const unsigned* amax_bits,
                                    float* scale_out) {
  __shared__ float scratch[kBlock / 32];
  const float amax = amax_bits ? __uint_as_float(*amax_bits) : 0.0f;
  float scale = 1.0f;
  if (rule.scaling == Scaling::current)
    scale = scale_from_amax(amax, rule.max_finite, rule.margin, 1.0f);
  if (rule.scaling == Scaling::delayed) scale = state[0] > 0.0f ? state[0] : 1.0f;
  // Every thread has read state[0] before thread 0 may write it.
  __syncthreads();
  if (rule.scaling == Scaling::delayed && isfinite(amax)) {
    // push_amax_history: shift by one from the end in chunks of the block (a chunk reads the
    // entry below it before any thread of the chunk writes), the new amax in front; then the
    // reduction (the history's max, or the new amax).
    float* history = state + 2;
    float m = 0.0f;
    for (int top = rule.history - 1; top >= 1; top -= kBlock) {
      const int i = top - int(threadIdx.x);
      const float below = i >= 1 ? history[i - 1] : 0.0f;
      __syncthreads();
      if (i >= 1) {
        history[i] = below;
        m = fmaxf(m, below);
      }
      __syncthreads();
    }
    m = cuda::block_max<kBlock>(fmaxf(m, amax), scratch);
    if (threadIdx.x == 0) {
      history[0] = amax;
      const float reduced = rule.reduction == AmaxReduction::most_recent ? amax : m;
      state[0] = scale_from_amax(reduced, rule.max_finite, rule.margin, scale);
    }
  } else if (rule.scaling != Scaling::delayed && threadIdx.x == 0) {
    state[0] = scale;
  }
  if (threadIdx.x == 0) {
    state[1] += 1.0f;
    scale_out[0] = scale;
    scale_out[1] = 1.0f / scale;
  }
}

// fp8(v) by runtime/minifloat.h's rules: round to nearest even as if the exponent range were
// unbounded above, then overflow: saturating, to +-max (the hardware's satfinite conversion,
// which clips inf too); non-saturating, to NaN (e4m3) or inf (e5m2), which happens exactly
// above the midpoint between max and the next step of the unbounded grid (e4m3: 448 and 480,
// a tie goes to 448's even mantissa; e5m2: 57344 and 65536, a tie goes to 65536's).
__device__ __forceinline__ uint8_t encode_fp8(float v, bool e5m2, bool saturating) {
  if (!saturating) {
    const float a = fabsf(v);  // NaN compares false: the conversion below keeps it NaN
    const uint8_t sign = uint8_t((__float_as_uint(v) >> 31) << 7);
    if (e5m2 ? a >= 61440.0f : a > 464.0f) return uint8_t(sign | (e5m2 ? 0x7c : 0x7f));
  }
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

__device__ __forceinline__ float decode_fp8(uint8_t code, bool e5m2) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, e5m2 ? __NV_E5M2 : __NV_E4M3)));
}

// The cast of one operand stored [batch, rows, cols] at scale *scale: codes (when not null)
// and decoded values (when not null) at output position o, which is the operand's own
// position, or with `transpose` that of the [batch, cols, rows] transpose.
__global__ void cast_kernel(const float* __restrict__ x, int64_t batch, int64_t rows, int64_t cols,
                            bool transpose, const float* scale, bool e5m2, bool saturating,
                            uint8_t* codes, float* decoded) {
  const float s = *scale;
  const int64_t matrix = rows * cols;
  CAMPO_CUDA_FOR(o, batch * matrix) {
    int64_t in = o;
    if (transpose) {  // o = (b, c, r) of the transpose
      const int64_t b = o / matrix, rest = o % matrix;
      in = b * matrix + (rest % rows) * cols + rest / rows;
    }
    const uint8_t code = encode_fp8(x[in] * s, e5m2, saturating);
    if (codes) codes[o] = code;
    if (decoded) decoded[o] = decode_fp8(code, e5m2);
  }
}

// y *= inverse_a * inverse_b (the CPU's factor: 1/s_a * 1/s_b, one f32 product).
__global__ void unscale_kernel(float* y, int64_t n, const float* inverse_a,
                               const float* inverse_b) {
  const float f = *inverse_a * *inverse_b;
  CAMPO_CUDA_FOR(i, n) y[i] *= f;
}

class QuantizedGemmCudaKernel final : public Kernel {
 public:
  QuantizedGemmCudaKernel(const KernelSpec& spec, ExecContext& ctx) : quant_(spec.quant) {
    what_ = "quantized GEMM '" + spec.node_name + "'";
    CAMPO_CHECK(spec.dtype == DType::f32 && spec.inputs.size() == 2 && spec.outputs.size() == 1 &&
                    spec.outputs[0].dtype == DType::f32,
                "internal: ", what_, " must compute in f32 on two inputs, got ",
                dtype_name(spec.dtype));
    CAMPO_CHECK(spec.quant_state.size() == 2, "internal: ", what_, " without its state");
    const CudaGemmPlan plan = plan_quantized_gemm_on_cuda(
        spec.kind, spec.attrs, {spec.inputs[0].shape, spec.inputs[1].shape}, quant_,
        cuda_backend(ctx).compute_capability());
    CAMPO_CHECK(plan.route != CudaGemmRoute::refused, "node '", spec.node_name, "' (",
                op_name(spec.kind), ") is a ", quant_.format, " GEMM: ", plan.reason, ", not on ",
                device_name(Device::cuda));
    fp8_ = plan.route == CudaGemmRoute::fp8;
    Backend& backend = ctx.backend();
    auto own = [&](size_t bytes) {
      ctx.count_kernel_buffer(bytes);
      return backend.allocate(bytes);
    };
    // scratch: the two amaxes' bits, then each operand's {scale, 1 / scale}.
    scratch_ = own(6 * sizeof(float));
    const GemmDims d =
        fp8_ ? matmul_gemm_dims(spec.kind, spec.attrs, {spec.inputs[0].shape, spec.inputs[1].shape})
             : GemmDims{};
    for (size_t i = 0; i < 2; ++i) {
      const TensorDesc& in = spec.inputs[i];
      CAMPO_CHECK(in.dtype == DType::f32 && in.layout == Layout::plain, "internal: ", what_,
                  " input ", i, " is ", dtype_name(in.dtype), " ", layout_name(in.layout));
      const Tensor& state = spec.quant_state[i];
      CAMPO_CHECK(
          state.numel() == gemm_quant_state_size(quant_.recipe) && state.dtype() == DType::f32,
          "internal: ", what_, " has a state of the wrong size");
      Operand& op = operands_[i];
      op.state = state;
      op.shape = in.shape;
      op.numel = shape_numel(in.shape);
      op.e5m2 = quant_.element[i] == ElementFormat::e5m2;
      op.rule = {quant_.recipe.scaling, quant_.recipe.amax, quant_.recipe.margin,
                 quant_.recipe.history, element_format_info(quant_.element[i]).max_finite};
      if (fp8_) {
        // K-contiguous codes: A as [M, K] (a transposing cast where stored [K, M]), B as
        // [N, K] (where stored [K, N]).
        op.transpose = !stored_k_contiguous(spec, int(i));
        op.rows = in.shape[in.shape.size() - 2];
        op.cols = in.shape.back();
        op.batch = op.numel / std::max<int64_t>(1, op.rows * op.cols);
        op.codes = own(size_t(std::max<int64_t>(op.numel, 1)));
      } else {
        op.rows = 1;
        op.cols = op.numel;
        op.decoded = own(size_t(std::max<int64_t>(op.numel, 1)) * sizeof(float));
        op.view = Tensor::borrow(op.decoded.get(), in.shape, DType::f32, Device::cuda);
      }
    }
    if (fp8_) {
      cuda::GemmShape s;
      s.dtype = DType::f32;
      s.M = d.M;
      s.N = d.N;
      s.K = d.K;
      s.transpose_a = false;
      s.transpose_b = true;
      s.batch = d.batch;
      s.stride_a = d.M * d.K;
      s.stride_b = d.N * d.K;
      s.stride_c = d.M * d.N;
      s.fp8 = true;
      s.fp8_formats = quant_.element;
      s.fp8_scales = {inverse_scale(0), inverse_scale(1)};
      gemm_ = std::make_unique<cuda::Gemm>(s, ctx, what_);
    } else {
      KernelSpec inner = spec;
      inner.quant = {};
      inner.quant_state.clear();
      inner_ = create_kernel(inner, ctx);
    }
  }

  void before_run(ExecContext& ctx) override {
    if (inner_) inner_->before_run(ctx);
  }
  void after_run(ExecContext& ctx) override {
    if (inner_) inner_->after_run(ctx);
  }
  std::string capture_blocker() const override {
    return inner_ ? inner_->capture_blocker() : std::string();
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    cudaStream_t stream = cuda_stream(ctx);
    const int sms = cuda_backend(ctx).multiprocessors();
    const Scaling scaling = quant_.recipe.scaling;
    const bool needs_amax = scaling == Scaling::current || scaling == Scaling::delayed;
    unsigned* amax_bits = static_cast<unsigned*>(scratch_.get());
    if (needs_amax) CAMPO_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, 2 * sizeof(unsigned), stream));
    for (size_t i = 0; i < 2; ++i) {
      Operand& op = operands_[i];
      const float* x = in[i].device_data<float>();
      if (needs_amax && op.numel > 0) {
        amax_kernel<<<cuda::grid_for(op.numel, sms), kBlock, 0, stream>>>(x, op.numel,
                                                                          amax_bits + i);
        cuda::check_launch("amax_kernel");
      }
      float* scale = scale_pair(int(i));
      update_scale_kernel<<<1, kBlock, 0, stream>>>(op.state.device_data<float>(), op.rule,
                                                    needs_amax ? amax_bits + i : nullptr, scale);
      cuda::check_launch("update_scale_kernel");
      if (op.numel == 0) continue;
      cast_kernel<<<cuda::grid_for(op.numel, sms), kBlock, 0, stream>>>(
          x, op.batch, op.rows, op.cols, op.transpose, scale, op.e5m2,
          quant_.recipe.saturation == Saturation::saturating, static_cast<uint8_t*>(op.codes.get()),
          static_cast<float*>(op.decoded.get()));
      cuda::check_launch("cast_kernel");
    }
    if (fp8_) {
      gemm_->run(ctx, operands_[0].codes.get(), operands_[1].codes.get(), out[0].device_data());
      return;
    }
    inner_->run(ctx, {operands_[0].view, operands_[1].view}, out);
    const int64_t n = out[0].numel();
    if (n == 0) return;
    unscale_kernel<<<cuda::grid_for(n, sms), kBlock, 0, stream>>>(
        out[0].device_data<float>(), n, inverse_scale(0), inverse_scale(1));
    cuda::check_launch("unscale_kernel");
  }

 private:
  struct Operand {
    Tensor state;
    Shape shape;
    int64_t numel = 0;
    bool e5m2 = false;
    ScaleRule rule;
    // The cast's view of the operand: [batch, rows, cols], written transposed or not.
    int64_t batch = 1, rows = 1, cols = 0;
    bool transpose = false;
    std::shared_ptr<void> codes;    // fp8: the codes, K-contiguous
    std::shared_ptr<void> decoded;  // emulated: the decoded codes, the operand's layout
    Tensor view;                    // emulated: `decoded` as a tensor of the operand's shape
  };

  // Whether operand i of a MatMul / BatchMatMulV2 is stored with K as its last dimension.
  static bool stored_k_contiguous(const KernelSpec& spec, int i) {
    if (spec.kind == OpKind::MatMul) {
      const auto& t = attrs_as<MatMulAttrs>(spec.attrs);
      return i == 0 ? !t.transpose_a : t.transpose_b;
    }
    const auto& t = attrs_as<BatchMatMulAttrs>(spec.attrs);
    return i == 0 ? !t.adj_x : t.adj_y;
  }

  float* scale_pair(int i) const { return static_cast<float*>(scratch_.get()) + 2 + 2 * i; }
  const float* inverse_scale(int i) const { return scale_pair(i) + 1; }

  GemmQuant quant_;
  std::string what_;
  bool fp8_ = false;
  std::shared_ptr<void> scratch_;
  std::array<Operand, 2> operands_;
  std::unique_ptr<cuda::Gemm> gemm_;  // fp8
  std::unique_ptr<Kernel> inner_;     // emulated: the op's f32 kernel
};

std::unique_ptr<Kernel> make_quantized_gemm(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<QuantizedGemmCudaKernel>(spec, ctx);
}

struct QuantizedGemmRegistrar {
  QuantizedGemmRegistrar() { register_quantized_gemm_kernel(Device::cuda, make_quantized_gemm); }
} quantized_gemm_cuda;

}  // namespace
}  // namespace campo
