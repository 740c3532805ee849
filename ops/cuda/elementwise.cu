// CUDA kernels of the element-wise ops: Relu, LeakyRelu, Tanh, Sigmoid, Gelu (exact and
// approximate) and their gradients, Add, AddN, Mul (b of a's shape, or broadcast along a's
// trailing dims as the CPU kernel). f32 / f16 / bf16 storage, f32 math, one rounding on
// store (ops/cpu/elementwise.cc is the specification). BroadcastTo, Sum's gradient, lives
// with the reductions (ops/cuda/reduce.cu), as on the CPU.
//
// Every op except AddN is one functor run by the map family of
// ops/cuda/elementwise.cuh (16-byte packs where the pointers allow, scalar tail).
// Products and sums are written with __fmul_rn / __fadd_rn where the CPU (compiled with
// -ffp-contract=off) rounds each operation: nvcc would otherwise contract a * b + c into
// an FMA and round once, so the arithmetic ops give the CPU's bits exactly. The
// transcendental ones use CUDA's tanhf / expf / normcdff / erff (at most 2 ulp, CUDA
// Programming Guide, "Mathematical Functions"), the CPU oneDNN's JIT'd approximations, so
// those two agree to a few ulp, not bit for bit.
#include <array>

#include "ops/cuda/elementwise.cuh"

namespace campo {
namespace {

using cuda::Inputs;
using cuda::launch_channel_map;
using cuda::launch_map;

// ---- functors (f32 in, f32 out) ----

// y = x < 0 ? 0 : x (NaN and -0 stay).
struct ReluF {
  __device__ float operator()(const float (&v)[1], int64_t) const {
    return v[0] < 0.0f ? 0.0f : v[0];
  }
};
// {dY, Y}: dX = Y > 0 ? dY : 0.
struct ReluGradF {
  __device__ float operator()(const float (&v)[2], int64_t) const {
    return v[1] > 0.0f ? v[0] : 0.0f;
  }
};
// y = max(v, 0) + alpha min(v, 0) with std::max / std::min's NaN rule (the first argument
// when unordered), which fmaxf / fminf do not follow: NaN stays NaN, -0 stays -0.
struct LeakyReluF {
  float alpha;
  __device__ float operator()(const float (&v)[1], int64_t) const {
    const float x = v[0];
    const float hi = x < 0.0f ? 0.0f : x;
    const float lo = 0.0f < x ? 0.0f : x;
    return __fadd_rn(hi, __fmul_rn(alpha, lo));
  }
};
// {dY, X}: dX = X > 0 ? dY : alpha dY.
struct LeakyReluGradF {
  float alpha;
  __device__ float operator()(const float (&v)[2], int64_t) const {
    return v[1] > 0.0f ? v[0] : __fmul_rn(alpha, v[0]);
  }
};
struct TanhF {
  __device__ float operator()(const float (&v)[1], int64_t) const { return tanhf(v[0]); }
};
// {dY, Y}: dX = dY (1 - Y^2).
struct TanhGradF {
  __device__ float operator()(const float (&v)[2], int64_t) const {
    return __fmul_rn(v[0], __fsub_rn(1.0f, __fmul_rn(v[1], v[1])));
  }
};
// y = 1 / (1 + exp(-x)); IEEE division (nvcc's default -prec-div=true).
struct SigmoidF {
  __device__ float operator()(const float (&v)[1], int64_t) const {
    return 1.0f / (1.0f + expf(-v[0]));
  }
};
// {dY, Y}: dX = dY Y (1 - Y), left to right as the CPU.
struct SigmoidGradF {
  __device__ float operator()(const float (&v)[2], int64_t) const {
    return __fmul_rn(__fmul_rn(v[0], v[1]), __fsub_rn(1.0f, v[1]));
  }
};

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

// Exact: y = x Phi(x), Phi through normcdff (accurate for large negative x too, where
// 1 + erf(x / sqrt 2) cancels). Approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
struct GeluF {
  bool approximate;
  __device__ float operator()(const float (&v)[1], int64_t) const {
    const float x = v[0];
    if (!approximate) return x * normcdff(x);
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
};
// {dY, X}: dX = dY f'(X) (the formulas of ops/cpu/elementwise.cc, DnnlEltwiseGradKernel).
struct GeluGradF {
  bool approximate;
  __device__ float operator()(const float (&v)[2], int64_t) const {
    const float x = v[1];
    float d;
    if (!approximate) {
      d = normcdff(x) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
    } else {
      const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
      d = 0.5f * (1.0f + t) +
          0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    }
    return v[0] * d;
  }
};
struct AddF {
  __device__ float operator()(const float (&v)[2], int64_t) const { return __fadd_rn(v[0], v[1]); }
};
struct MulF {
  __device__ float operator()(const float (&v)[2], int64_t) const { return __fmul_rn(v[0], v[1]); }
};
// c[o, i] = a[o, i] * b[o], a seen as [numel(b), inner] (the channel map's operand).
struct ScaleF {
  __device__ float operator()(float a, float b) const { return __fmul_rn(a, b); }
};

// ---- kernels ----

template <typename T>
T* out_ptr(const Tensor& t) {
  return static_cast<T*>(t.device_data());
}
template <typename T, int K>
Inputs<T, K> inputs_of(const std::vector<Tensor>& in) {
  Inputs<T, K> r;
  for (int k = 0; k < K; ++k) r.p[k] = static_cast<const T*>(in[size_t(k)].device_data());
  return r;
}

void check_plain(const KernelSpec& spec) {
  for (const TensorDesc& d : spec.inputs)
    CAMPO_CHECK(d.layout == Layout::plain, op_name(spec.kind), " '", spec.node_name,
                "': the CUDA kernel takes plain layouts only, not ", layout_name(d.layout));
}

// The K-input map with a functor built from the spec: Make(spec) -> F.
template <typename T, int K, typename F>
class MapKernel : public Kernel {
 public:
  MapKernel(const KernelSpec& spec, F f) : name_(op_name(spec.kind)), f_(f) {
    check_plain(spec);
    CAMPO_CHECK(int(spec.inputs.size()) == K, op_name(spec.kind), " '", spec.node_name,
                "': ", spec.inputs.size(), " inputs, expected ", K);
    for (const TensorDesc& d : spec.inputs)
      CAMPO_CHECK(d.shape == spec.inputs[0].shape, op_name(spec.kind), " '", spec.node_name,
                  "': inputs of shapes ", shape_str(spec.inputs[0].shape), " and ",
                  shape_str(d.shape), " (the CUDA kernel broadcasts nothing here, as the CPU's)");
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    launch_map(name_, cuda_stream(ctx), cuda_backend(ctx).multiprocessors(), inputs_of<T, K>(in),
               out_ptr<T>(out[0]), out[0].numel(), f_);
  }

 private:
  const char* name_;
  F f_;
};

template <typename T, int K, typename F>
std::unique_ptr<Kernel> map_kernel(const KernelSpec& spec, F f) {
  return std::make_unique<MapKernel<T, K, F>>(spec, f);
}

float leaky_alpha(const KernelSpec& spec) { return attrs_as<LeakyReluAttrs>(spec.attrs).alpha; }
bool gelu_approximate(const KernelSpec& spec) {
  return attrs_as<GeluAttrs>(spec.attrs).approximate;
}

// c = a * b, b of a's shape or of numel(b) dividing numel(a) (a's leading dims, or a scalar).
template <typename T>
class MulKernel : public Kernel {
 public:
  explicit MulKernel(const KernelSpec& spec) {
    check_plain(spec);
    numel_ = shape_numel(spec.inputs[0].shape);
    const int64_t outer = shape_numel(spec.inputs[1].shape);
    CAMPO_CHECK(outer > 0 ? numel_ % outer == 0 : numel_ == 0, "Mul '", spec.node_name,
                "': b of shape ", shape_str(spec.inputs[1].shape),
                " does not broadcast to a of shape ", shape_str(spec.inputs[0].shape));
    inner_ = outer == 0 ? 1 : numel_ / outer;
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (numel_ == 0) return;
    const int sms = cuda_backend(ctx).multiprocessors();
    if (inner_ == 1) {
      launch_map("Mul", cuda_stream(ctx), sms, inputs_of<T, 2>(in), out_ptr<T>(out[0]), numel_,
                 MulF{});
    } else {
      launch_channel_map("Mul", cuda_stream(ctx), sms, static_cast<const T*>(in[0].device_data()),
                         static_cast<const T*>(in[1].device_data()), out_ptr<T>(out[0]), numel_,
                         inner_, numel_ / inner_, ScaleF{});
    }
  }

 private:
  int64_t numel_ = 0, inner_ = 1;
};

// ---- AddN ----

// Inputs summed per pass; more take several passes through an f32 accumulator.
constexpr int kAddNPerPass = 32;

struct AddNArgs {
  const void* x[kAddNPerPass];
  int count;
};

// out[i] = acc_in[i] + x_0[i] + x_1[i] + ... (or x_0[i] + x_1[i] + ... without acc_in), left
// to right in f32: the CPU's order (acc = x0 + x1, then acc += xj). acc_in and out may be
// the same f32 buffer (the middle passes), so neither is __restrict__.
template <typename T, typename Out>
__global__ void add_n_kernel(AddNArgs args, const float* acc_in, Out* out, int64_t n) {
  CAMPO_CUDA_FOR(i, n) {
    int j = 0;
    float acc;
    if (acc_in) {
      acc = acc_in[i];
    } else {
      acc = cuda::to_float(static_cast<const T*>(args.x[0])[i]);
      j = 1;
    }
    for (; j < args.count; ++j)
      acc = __fadd_rn(acc, cuda::to_float(static_cast<const T*>(args.x[j])[i]));
    out[i] = cuda::from_float<Out>(acc);
  }
}

// The same on 16-byte packs of T (all pointers aligned), the tail (< one pack) on the first
// threads of the grid.
template <typename T, typename Out>
__global__ void add_n_packed_kernel(AddNArgs args, const float* acc_in, Out* out, int64_t n) {
  constexpr int V = cuda::kPack<T>;
  const int64_t packs = n / V;
  CAMPO_CUDA_FOR(p, packs) {
    float acc[V];
    int j = 0;
    if (acc_in) {
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = acc_in[p * V + e];
    } else {
      const auto a = static_cast<const cuda::Pack<T>*>(args.x[0])[p];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = cuda::to_float(a.v[e]);
      j = 1;
    }
    for (; j < args.count; ++j) {
      const auto a = static_cast<const cuda::Pack<T>*>(args.x[j])[p];
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] = __fadd_rn(acc[e], cuda::to_float(a.v[e]));
    }
#pragma unroll
    for (int e = 0; e < V; ++e) out[p * V + e] = cuda::from_float<Out>(acc[e]);
  }
  const int64_t i = packs * V + int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    int j = 0;
    float acc;
    if (acc_in) {
      acc = acc_in[i];
    } else {
      acc = cuda::to_float(static_cast<const T*>(args.x[0])[i]);
      j = 1;
    }
    for (; j < args.count; ++j)
      acc = __fadd_rn(acc, cuda::to_float(static_cast<const T*>(args.x[j])[i]));
    out[i] = cuda::from_float<Out>(acc);
  }
}

template <typename T>
class AddNKernel : public Kernel {
 public:
  AddNKernel(const KernelSpec& spec, ExecContext& ctx) : k_(int(spec.inputs.size())) {
    check_plain(spec);
    CAMPO_CHECK(k_ >= 1, "AddN '", spec.node_name, "' has no inputs");
    for (const TensorDesc& d : spec.inputs)
      CAMPO_CHECK(d.shape == spec.inputs[0].shape, "AddN '", spec.node_name, "': inputs of shapes ",
                  shape_str(spec.inputs[0].shape), " and ", shape_str(d.shape));
    // More inputs than one pass takes: an f32 accumulator, so the sum is rounded once.
    if (k_ > kAddNPerPass)
      ctx.reserve_workspace(size_t(shape_numel(spec.inputs[0].shape)) * sizeof(float));
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const int64_t n = out[0].numel();
    if (n == 0) return;
    T* y = out_ptr<T>(out[0]);
    float* acc = k_ > kAddNPerPass ? static_cast<float*>(ctx.workspace()) : nullptr;
    cudaStream_t stream = cuda_stream(ctx);
    const int sms = cuda_backend(ctx).multiprocessors();
    const float* acc_in = nullptr;
    for (int first = 0; first < k_; first += kAddNPerPass) {
      AddNArgs args{};
      args.count = std::min(kAddNPerPass, k_ - first);
      bool packed = cuda::aligned16(y) && (acc == nullptr || cuda::aligned16(acc));
      for (int j = 0; j < args.count; ++j) {
        args.x[j] = in[size_t(first + j)].device_data();
        packed = packed && cuda::aligned16(args.x[j]);
      }
      const bool last = first + args.count >= k_;
      if (last)
        launch(args, acc_in, y, n, packed, stream, sms);
      else
        launch(args, acc_in, acc, n, packed, stream, sms);
      acc_in = acc;
    }
    cuda::check_launch("AddN");
  }

 private:
  template <typename Out>
  static void launch(const AddNArgs& args, const float* acc_in, Out* out, int64_t n, bool packed,
                     cudaStream_t stream, int sms) {
    if (packed) {
      const int64_t packs = n / cuda::kPack<T>;
      add_n_packed_kernel<T, Out>
          <<<cuda::grid_for(packs, sms), cuda::kThreads, 0, stream>>>(args, acc_in, out, n);
    } else {
      add_n_kernel<T, Out>
          <<<cuda::grid_for(n, sms), cuda::kThreads, 0, stream>>>(args, acc_in, out, n);
    }
  }

  int k_;
};

// ---- registration ----

template <typename T>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  switch (spec.kind) {
    case OpKind::Relu:
      return map_kernel<T, 1>(spec, ReluF{});
    case OpKind::ReluGrad:
      return map_kernel<T, 2>(spec, ReluGradF{});
    case OpKind::LeakyRelu:
      return map_kernel<T, 1>(spec, LeakyReluF{leaky_alpha(spec)});
    case OpKind::LeakyReluGrad:
      return map_kernel<T, 2>(spec, LeakyReluGradF{leaky_alpha(spec)});
    case OpKind::Tanh:
      return map_kernel<T, 1>(spec, TanhF{});
    case OpKind::TanhGrad:
      return map_kernel<T, 2>(spec, TanhGradF{});
    case OpKind::Sigmoid:
      return map_kernel<T, 1>(spec, SigmoidF{});
    case OpKind::SigmoidGrad:
      return map_kernel<T, 2>(spec, SigmoidGradF{});
    case OpKind::Gelu:
      return map_kernel<T, 1>(spec, GeluF{gelu_approximate(spec)});
    case OpKind::GeluGrad:
      return map_kernel<T, 2>(spec, GeluGradF{gelu_approximate(spec)});
    case OpKind::Add:
      return map_kernel<T, 2>(spec, AddF{});
    case OpKind::Mul:
      return std::make_unique<MulKernel<T>>(spec);
    case OpKind::AddN:
      return std::make_unique<AddNKernel<T>>(spec, ctx);
    default:
      CAMPO_FAIL("internal: ", op_name(spec.kind), " is not a CUDA element-wise op");
  }
}

struct Registrations {
  Registrations() {
    for (OpKind kind :
         {OpKind::Relu, OpKind::ReluGrad, OpKind::LeakyRelu, OpKind::LeakyReluGrad, OpKind::Tanh,
          OpKind::TanhGrad, OpKind::Sigmoid, OpKind::SigmoidGrad, OpKind::Gelu, OpKind::GeluGrad,
          OpKind::Add, OpKind::AddN, OpKind::Mul}) {
      register_kernel(kind, Device::cuda, DType::f32, make<float>);
      register_kernel(kind, Device::cuda, DType::f16, make<__half>);
      register_kernel(kind, Device::cuda, DType::bf16, make<__nv_bfloat16>);
    }
  }
} registrations;

}  // namespace
}  // namespace campo
