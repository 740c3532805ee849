// CUDA kernels of FusedBatchNorm / FusedBatchNormGrad: own kernels, not cuDNN's
// cudnnBatchNormalization*. The semantics are the CPU kernels' (ops/cpu/batch_norm.cc), which
// cuDNN's do not cover: inference reports the running statistics as outputs 1 and 2 (mean and
// 1 / sqrt(running_var + eps)), FusedBatchNormGrad also has an inference form (statistics as
// constants), statistics are two-pass (mean, then centred squares) in double, and the running
// variance takes the unbiased variance with the CPU's momentum rule:
//   running = (1 - momentum) * running + momentum * batch      (in place, f32)
//
// Data is viewed as [N, C, S] (S = H * W, or 1 for [N, C]); a channel has M = N * S values.
// Per-channel sums run in two steps: `channel_partials` (grid C x P, each block summing a
// strided share of the channel's values, per thread and then across the block, in double)
// writes P partial sums per channel, and a per-channel `finalize_*` adds them in order (so
// results do not depend on scheduling) and derives the statistics and the per-channel
// coefficients of the element-wise pass. Partials and coefficients live in the context's
// workspace, sized at creation.
//
// x, y, dy, dx are f32, f16 or bf16; scale, offset and every statistic are f32 (the schema's
// fp32_inputs). Math in f32 per element (double for the sums), one rounding on store.
#include <algorithm>

#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

using cuda::from_float;
using cuda::kThreads;
using cuda::to_float;

struct BnDims {
  int64_t n = 0, c = 0, s = 0;
  // Every flat index fits 31 bits: the per-element index arithmetic runs in 32 bits (64-bit
  // divisions cost several times as much).
  bool narrow = false;
  __host__ __device__ int64_t count() const { return n * s; }  // M
  __host__ __device__ int64_t numel() const { return n * c * s; }
};

BnDims bn_dims(const KernelSpec& spec, const TensorDesc& x) {
  CAMPO_CHECK(x.layout == Layout::plain, op_name(spec.kind), " '", spec.node_name,
              "': the CUDA kernel takes plain NCHW data, got ", layout_name(x.layout));
  CAMPO_CHECK(x.shape.size() == 4 || x.shape.size() == 2, op_name(spec.kind), " '", spec.node_name,
              "': x must be [N, C, H, W] or [N, C], got ", shape_str(x.shape));
  BnDims d;
  d.n = x.shape[0];
  d.c = x.shape[1];
  d.s = x.shape.size() == 4 ? x.shape[2] * x.shape[3] : 1;
  d.narrow = d.numel() <= INT32_MAX;
  return d;
}

// The flat index of value i < M of channel c.
__device__ __forceinline__ int64_t channel_index(const BnDims& d, int64_t c, int64_t i) {
  if (d.narrow) {
    const uint32_t s = uint32_t(d.s), n = uint32_t(i) / s;
    return int64_t((n * uint32_t(d.c) + uint32_t(c)) * s + (uint32_t(i) - n * s));
  }
  const int64_t n = i / d.s;
  return (n * d.c + c) * d.s + (i - n * d.s);
}

// The channel of flat index i.
__device__ __forceinline__ int64_t channel_of(const BnDims& d, int64_t i) {
  if (d.narrow) return int64_t((uint32_t(i) / uint32_t(d.s)) % uint32_t(d.c));
  return (i / d.s) % d.c;
}

// Sums of a block's threads' values (two at once); the result is valid in thread 0.
// blockDim.x == kThreads.
__device__ void block_sums(double& v0, double& v1) {
  __shared__ double shared[2][kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    v0 += __shfl_down_sync(0xffffffffu, v0, o);
    v1 += __shfl_down_sync(0xffffffffu, v1, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    shared[0][warp] = v0;
    shared[1][warp] = v1;
  }
  __syncthreads();
  if (warp == 0) {
    v0 = lane < kThreads / 32 ? shared[0][lane] : 0.0;
    v1 = lane < kThreads / 32 ? shared[1][lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      v0 += __shfl_down_sync(0xffffffffu, v0, o);
      v1 += __shfl_down_sync(0xffffffffu, v1, o);
    }
  }
}

// Block (c, p) of a grid C x P: partial[c * P + p] = its share of
//   kind 0: sum x                          (partial1 unused)
//   kind 1: sum (x - mean[c])^2            (partial1 unused)
//   kind 2: sum dy, and into partial1 sum dy * (x - mean[c])
template <typename T, int KIND>
__global__ void channel_partials(const T* x, const T* dy, const float* mean, BnDims d,
                                 double* partial0, double* partial1) {
  const int64_t c = blockIdx.x, p = blockIdx.y, parts = gridDim.y, m = d.count();
  const float mu = KIND == 0 ? 0.0f : mean[c];
  double s0 = 0.0, s1 = 0.0;
  for (int64_t i = p * kThreads + threadIdx.x; i < m; i += parts * kThreads) {
    const int64_t k = channel_index(d, c, i);
    if constexpr (KIND == 0) {
      s0 += double(to_float(x[k]));
    } else if constexpr (KIND == 1) {
      const float v = to_float(x[k]) - mu;
      s0 += double(v * v);
    } else {
      const float g = to_float(dy[k]);
      s0 += double(g);
      s1 += double(g * (to_float(x[k]) - mu));
    }
  }
  block_sums(s0, s1);
  if (threadIdx.x == 0) {
    partial0[c * parts + p] = s0;
    if constexpr (KIND == 2) partial1[c * parts + p] = s1;
  }
}

__device__ __forceinline__ double add_partials(const double* partial, int64_t c, int parts) {
  double s = 0.0;
  for (int p = 0; p < parts; ++p) s += partial[c * parts + p];
  return s;
}

// mean[c] = sum x / M.
__global__ void finalize_mean(const double* partial, int parts, int64_t channels, double m,
                              float* mean) {
  CAMPO_CUDA_FOR(c, channels) mean[c] = float(add_partials(partial, c, parts) / m);
}

// Per-channel y = x * a + b for the statistics (mean, inv_std), and the outputs.
__device__ __forceinline__ void affine_of(int64_t c, float mean, double inv_std, const float* scale,
                                          const float* offset, float* mean_out, float* inv_std_out,
                                          float* a, float* b) {
  mean_out[c] = mean;
  inv_std_out[c] = float(inv_std);
  const double ak = double(scale[c]) * inv_std;
  a[c] = float(ak);
  b[c] = float(double(offset[c]) - double(mean) * ak);
}

// Training: var = sum (x - mean)^2 / M (partial), inv_std, the running-statistics update
// (unbiased variance), outputs and coefficients.
__global__ void finalize_training(const double* partial, int parts, int64_t channels, double m,
                                  double eps, double momentum, const float* mean,
                                  const float* scale, const float* offset, float* running_mean,
                                  float* running_var, float* mean_out, float* inv_std_out, float* a,
                                  float* b) {
  CAMPO_CUDA_FOR(c, channels) {
    const double var = add_partials(partial, c, parts) / m;
    const double inv_std = 1.0 / sqrt(var + eps);
    running_mean[c] = float((1.0 - momentum) * running_mean[c] + momentum * mean[c]);
    running_var[c] = float((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
    affine_of(c, mean[c], inv_std, scale, offset, mean_out, inv_std_out, a, b);
  }
}

// Inference: the running statistics.
__global__ void finalize_inference(int64_t channels, double eps, const float* scale,
                                   const float* offset, const float* running_mean,
                                   const float* running_var, float* mean_out, float* inv_std_out,
                                   float* a, float* b) {
  CAMPO_CUDA_FOR(c, channels) {
    const double inv_std = 1.0 / sqrt(double(running_var[c]) + eps);
    affine_of(c, running_mean[c], inv_std, scale, offset, mean_out, inv_std_out, a, b);
  }
}

template <typename T>
__global__ void apply_affine(const T* x, T* y, BnDims d, const float* a, const float* b) {
  CAMPO_CUDA_FOR(i, d.numel()) {
    const int64_t c = channel_of(d, i);
    y[i] = from_float<T>(to_float(x[i]) * a[c] + b[c]);
  }
}

// The gradient's sums -> dscale, doffset and dx = a * dy + b * (x - mean) + e.
__global__ void finalize_grad(const double* partial0, const double* partial1, int parts,
                              int64_t channels, double m, bool is_training, const float* scale,
                              const float* inv_std_in, float* dscale, float* doffset, float* a,
                              float* b, float* e) {
  CAMPO_CUDA_FOR(c, channels) {
    const double sum_dy = add_partials(partial0, c, parts);
    const double sum_dy_xmu = add_partials(partial1, c, parts);
    const double inv_std = inv_std_in[c];
    const double ak = double(scale[c]) * inv_std;
    dscale[c] = float(sum_dy_xmu * inv_std);
    doffset[c] = float(sum_dy);
    a[c] = float(ak);
    b[c] = is_training ? float(-ak * inv_std * inv_std * sum_dy_xmu / m) : 0.0f;
    e[c] = is_training ? float(-ak * sum_dy / m) : 0.0f;
  }
}

template <typename T>
__global__ void apply_grad(const T* dy, const T* x, T* dx, BnDims d, const float* mean,
                           const float* a, const float* b, const float* e) {
  CAMPO_CUDA_FOR(i, d.numel()) {
    const int64_t c = channel_of(d, i);
    dx[i] = from_float<T>(a[c] * to_float(dy[i]) + b[c] * (to_float(x[i]) - mean[c]) + e[c]);
  }
}

// Blocks per channel of the partial sums: enough that the grid fills the GPU (~4 blocks per
// multiprocessor), no more than the channel has blocks of values.
int parts_for(const BnDims& d, int multiprocessors) {
  const int64_t by_size = std::max<int64_t>(1, (d.count() + kThreads - 1) / kThreads);
  const int64_t by_grid =
      std::max<int64_t>(1, (int64_t(multiprocessors) * 4 + d.c - 1) / std::max<int64_t>(d.c, 1));
  return int(std::min<int64_t>({by_size, by_grid, 65535}));
}

// The workspace: two partial arrays [C, P] of doubles, then four per-channel f32 arrays.
struct Scratch {
  double *partial0, *partial1;
  float *mean, *a, *b, *e;

  static size_t bytes(const BnDims& d, int parts) {
    return size_t(2 * d.c * parts) * sizeof(double) + size_t(4 * d.c) * sizeof(float);
  }
  Scratch(void* ws, const BnDims& d, int parts) {
    partial0 = static_cast<double*>(ws);
    partial1 = partial0 + d.c * parts;
    mean = reinterpret_cast<float*>(partial1 + d.c * parts);
    a = mean + d.c;
    b = a + d.c;
    e = b + d.c;
  }
};

template <typename T>
class BatchNormKernel final : public Kernel {
 public:
  BatchNormKernel(const KernelSpec& spec, ExecContext& ctx)
      : attrs_(attrs_as<BatchNormAttrs>(spec.attrs)), dims_(bn_dims(spec, spec.inputs[0])) {
    CAMPO_CHECK(dims_.c <= INT32_MAX, "FusedBatchNorm '", spec.node_name, "': too many channels");
    parts_ = parts_for(dims_, cuda_backend(ctx).multiprocessors());
    ctx.reserve_workspace(Scratch::bytes(dims_, parts_));
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const BnDims d = dims_;
    if (d.c == 0) return;
    cuda::CudaBackend& backend = cuda_backend(ctx);
    const cudaStream_t stream = backend.stream();
    const int sms = backend.multiprocessors();
    const T* x = static_cast<const T*>(in[0].device_data());
    const float* scale = in[1].device_data<float>();
    const float* offset = in[2].device_data<float>();
    float* running_mean = in[3].device_data<float>();
    float* running_var = in[4].device_data<float>();
    T* y = static_cast<T*>(out[0].device_data());
    float* mean_out = out[1].device_data<float>();
    float* inv_std_out = out[2].device_data<float>();
    Scratch w(ctx.workspace(), d, parts_);
    const double m = double(d.count());
    const unsigned channel_grid = cuda::grid_for(d.c, sms);
    if (attrs_.is_training) {
      const dim3 grid(unsigned(d.c), unsigned(parts_));
      channel_partials<T, 0>
          <<<grid, kThreads, 0, stream>>>(x, nullptr, nullptr, d, w.partial0, nullptr);
      cuda::check_launch("channel_partials (batch norm sums)");
      finalize_mean<<<channel_grid, kThreads, 0, stream>>>(w.partial0, parts_, d.c, m, w.mean);
      cuda::check_launch("finalize_mean");
      channel_partials<T, 1>
          <<<grid, kThreads, 0, stream>>>(x, nullptr, w.mean, d, w.partial0, nullptr);
      cuda::check_launch("channel_partials (batch norm centred squares)");
      finalize_training<<<channel_grid, kThreads, 0, stream>>>(
          w.partial0, parts_, d.c, m, attrs_.epsilon, attrs_.momentum, w.mean, scale, offset,
          running_mean, running_var, mean_out, inv_std_out, w.a, w.b);
      cuda::check_launch("finalize_training");
    } else {
      finalize_inference<<<channel_grid, kThreads, 0, stream>>>(d.c, attrs_.epsilon, scale, offset,
                                                                running_mean, running_var, mean_out,
                                                                inv_std_out, w.a, w.b);
      cuda::check_launch("finalize_inference");
    }
    if (d.numel() == 0) return;
    apply_affine<T><<<cuda::grid_for(d.numel(), sms), kThreads, 0, stream>>>(x, y, d, w.a, w.b);
    cuda::check_launch("apply_affine");
  }

 private:
  BatchNormAttrs attrs_;
  BnDims dims_;
  int parts_ = 1;
};

// With xhat = (x - mean) * inv_std, sums over a channel's M values:
//   doffset = sum dy,  dscale = sum dy * xhat
//   training:  dx = scale * inv_std * (dy - doffset / M - xhat * dscale / M)
//   inference: dx = scale * inv_std * dy
template <typename T>
class BatchNormGradKernel final : public Kernel {
 public:
  BatchNormGradKernel(const KernelSpec& spec, ExecContext& ctx)
      : attrs_(attrs_as<BatchNormAttrs>(spec.attrs)), dims_(bn_dims(spec, spec.inputs[1])) {
    CAMPO_CHECK(spec.inputs[0].layout == Layout::plain && spec.outputs[0].layout == Layout::plain,
                "FusedBatchNormGrad '", spec.node_name, "': the CUDA kernel takes plain NCHW data");
    CAMPO_CHECK(dims_.c <= INT32_MAX, "FusedBatchNormGrad '", spec.node_name,
                "': too many channels");
    parts_ = parts_for(dims_, cuda_backend(ctx).multiprocessors());
    ctx.reserve_workspace(Scratch::bytes(dims_, parts_));
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const BnDims d = dims_;
    if (d.c == 0) return;
    cuda::CudaBackend& backend = cuda_backend(ctx);
    const cudaStream_t stream = backend.stream();
    const int sms = backend.multiprocessors();
    const T* dy = static_cast<const T*>(in[0].device_data());
    const T* x = static_cast<const T*>(in[1].device_data());
    const float* scale = in[2].device_data<float>();
    const float* mean = in[3].device_data<float>();
    const float* inv_std = in[4].device_data<float>();
    T* dx = static_cast<T*>(out[0].device_data());
    float* dscale = out[1].device_data<float>();
    float* doffset = out[2].device_data<float>();
    Scratch w(ctx.workspace(), d, parts_);
    channel_partials<T, 2><<<dim3(unsigned(d.c), unsigned(parts_)), kThreads, 0, stream>>>(
        x, dy, mean, d, w.partial0, w.partial1);
    cuda::check_launch("channel_partials (batch norm gradient sums)");
    finalize_grad<<<cuda::grid_for(d.c, sms), kThreads, 0, stream>>>(
        w.partial0, w.partial1, parts_, d.c, double(d.count()), attrs_.is_training, scale, inv_std,
        dscale, doffset, w.a, w.b, w.e);
    cuda::check_launch("finalize_grad");
    if (d.numel() == 0) return;
    apply_grad<T><<<cuda::grid_for(d.numel(), sms), kThreads, 0, stream>>>(dy, x, dx, d, mean, w.a,
                                                                           w.b, w.e);
    cuda::check_launch("apply_grad");
  }

 private:
  BatchNormAttrs attrs_;
  BnDims dims_;
  int parts_ = 1;
};

cuda::FloatKernelRegistrar<BatchNormKernel> batch_norm_kernels(OpKind::FusedBatchNorm);
cuda::FloatKernelRegistrar<BatchNormGradKernel> batch_norm_grad_kernels(OpKind::FusedBatchNormGrad);

}  // namespace
}  // namespace campo
