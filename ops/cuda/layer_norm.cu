// CUDA kernels of LayerNorm / LayerNormGrad over the last axis, data viewed as [R, C]; x, y,
// dy, dx in f32 / f16 / bf16 (the node's compute type); scale, offset, mean, inv_std,
// dscale, doffset always f32 (ops/layer_norm.cc). The CPU kernels (ops/cpu/layer_norm.cc)
// are the specification: the same f32 expressions (products rounded before they are added,
// __fmul_rn, as the CPU's -ffp-contract=off code does) and the row sums in double.
//  LayerNorm, one warp per row for C <= kWarpRowMax (BERT's 768), else one block:
//    mean = sum(x) / C, var = sum((x - mean)^2) / C, inv_std = 1 / sqrt(var + eps),
//    y = (x - mean) * inv_std * scale + offset.
//  LayerNormGrad, with xhat = (x - mean) inv_std and g = dy scale:
//    dx = inv_std (g - sum(g) / C - xhat sum(g xhat) / C)   (per row, as above), and the
//    column sums dscale = sum_rows(dy xhat), doffset = sum_rows(dy): one thread per
//    (column, chunk of rows) adds its rows in order into a double partial in the workspace,
//    and a second kernel adds the chunks in order. Chunks depend on the shape only: no
//    atomics, reproducible bits.
#include <cmath>
#include <type_traits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

using cuda::from_float;
using cuda::to_float;

constexpr int64_t kRowsPerChunk = 32;               // least rows per column chunk
constexpr int64_t kMaxPartials = int64_t(1) << 21;  // bound on 2 * chunks * C partial sums

template <int kGroup, typename T>
__global__ void layer_norm_kernel(const T* x, const float* scale, const float* offset, int64_t rows,
                                  int64_t C, double eps, T* y, float* mean_out,
                                  float* inv_std_out) {
  constexpr int kPerBlock = cuda::kThreads / kGroup;
  __shared__ double scratch[cuda::kThreads / 32];
  const int64_t r = int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kGroup;
  const int lane = threadIdx.x % kGroup;
  if (r >= rows) return;  // whole warps only (a block's grid is exact)
  const T* xr = x + r * C;
  T* yr = y + r * C;
  double s = 0;
  for (int64_t i = lane; i < C; i += kGroup) s += double(to_float(xr[i]));
  s = cuda::group_sum<kGroup>(s, scratch);
  const float mean = float(s / double(C));
  double sq = 0;
  for (int64_t i = lane; i < C; i += kGroup) {
    const float v = to_float(xr[i]) - mean;
    sq += double(__fmul_rn(v, v));
  }
  sq = cuda::group_sum<kGroup>(sq, scratch);
  const float inv_std = float(1.0 / sqrt(sq / double(C) + eps));
  if (lane == 0) {
    mean_out[r] = mean;
    inv_std_out[r] = inv_std;
  }
  for (int64_t i = lane; i < C; i += kGroup) {
    const float v = __fmul_rn(__fmul_rn(to_float(xr[i]) - mean, inv_std), scale[i]);
    yr[i] = from_float<T>(v + offset[i]);
  }
}

template <int kGroup, typename T>
__global__ void layer_norm_dx_kernel(const T* dy, const T* x, const float* scale,
                                     const float* mean_in, const float* inv_std_in, int64_t rows,
                                     int64_t C, T* dx) {
  constexpr int kPerBlock = cuda::kThreads / kGroup;
  __shared__ double scratch[cuda::kThreads / 32];
  const int64_t r = int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kGroup;
  const int lane = threadIdx.x % kGroup;
  if (r >= rows) return;
  const T* dyr = dy + r * C;
  const T* xr = x + r * C;
  T* dxr = dx + r * C;
  const float mean = mean_in[r], inv_std = inv_std_in[r];
  double sum_g = 0, sum_gx = 0;
  for (int64_t i = lane; i < C; i += kGroup) {
    const float g = __fmul_rn(to_float(dyr[i]), scale[i]);
    const float xhat = __fmul_rn(to_float(xr[i]) - mean, inv_std);
    sum_g += double(g);
    sum_gx += double(__fmul_rn(g, xhat));
  }
  sum_g = cuda::group_sum<kGroup>(sum_g, scratch);
  sum_gx = cuda::group_sum<kGroup>(sum_gx, scratch);
  const float mean_g = float(sum_g / double(C)), mean_gx = float(sum_gx / double(C));
  for (int64_t i = lane; i < C; i += kGroup) {
    const float g = __fmul_rn(to_float(dyr[i]), scale[i]);
    const float xhat = __fmul_rn(to_float(xr[i]) - mean, inv_std);
    dxr[i] = from_float<T>(__fmul_rn(inv_std, (g - mean_g) - __fmul_rn(xhat, mean_gx)));
  }
}

// Thread (k, i): partial[(2k) C + i] = sum of dy xhat, partial[(2k+1) C + i] = sum of dy over
// rows [k rpc, min(rows, (k+1) rpc)) of column i.
template <typename T>
__global__ void layer_norm_columns_kernel(const T* dy, const T* x, const float* mean_in,
                                          const float* inv_std_in, int64_t rows, int64_t C,
                                          int64_t rows_per_chunk, int64_t chunks, double* partial) {
  CAMPO_CUDA_FOR(t, chunks * C) {
    const int64_t k = t / C, i = t % C;
    const int64_t r0 = k * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    double ds = 0, db = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const float d = to_float(dy[r * C + i]);
      const float xhat = __fmul_rn(to_float(x[r * C + i]) - mean_in[r], inv_std_in[r]);
      ds += double(__fmul_rn(d, xhat));
      db += double(d);
    }
    partial[2 * k * C + i] = ds;
    partial[(2 * k + 1) * C + i] = db;
  }
}

__global__ void layer_norm_sum_chunks_kernel(const double* partial, int64_t C, int64_t chunks,
                                             float* dscale, float* doffset) {
  CAMPO_CUDA_FOR(i, C) {
    double s = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      s += partial[2 * k * C + i];
      b += partial[(2 * k + 1) * C + i];
    }
    dscale[i] = float(s);
    doffset[i] = float(b);
  }
}

// inputs {x, scale, offset}; outputs {y, mean, inv_std}.
template <typename T>
class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(const KernelSpec& spec, ExecContext&)
      : eps_(attrs_as<LayerNormAttrs>(spec.attrs).epsilon),
        dims_(cuda::rows_of(spec.inputs[0].shape)) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].device_data());
    const float* scale = in[1].device_data<float>();
    const float* offset = in[2].device_data<float>();
    T* y = static_cast<T*>(out[0].device_data());
    float* mean = out[1].device_data<float>();
    float* inv_std = out[2].device_data<float>();
    cudaStream_t stream = cuda_stream(ctx);
    const double eps = eps_;
    cuda::launch_rows(dims_, "LayerNorm", [&](auto group, unsigned blocks) {
      layer_norm_kernel<decltype(group)::value, T><<<blocks, cuda::kThreads, 0, stream>>>(
          x, scale, offset, dims_.rows, dims_.cols, eps, y, mean, inv_std);
    });
  }

 private:
  float eps_;
  cuda::Rows dims_;
};

// inputs {dy, x, scale, mean, inv_std}; outputs {dx, dscale, doffset}.
template <typename T>
class LayerNormGradKernel final : public Kernel {
 public:
  LayerNormGradKernel(const KernelSpec& spec, ExecContext& ctx)
      : dims_(cuda::rows_of(spec.inputs[1].shape)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {
    if (dims_.cols == 0) return;
    // Chunks of rows for the column sums: enough (column, chunk) threads to fill the device
    // when C is small, within a bound on the workspace.
    chunks_ = std::min((dims_.rows + kRowsPerChunk - 1) / kRowsPerChunk,
                       std::max<int64_t>(1, kMaxPartials / (2 * dims_.cols)));
    rows_per_chunk_ = chunks_ == 0 ? 0 : (dims_.rows + chunks_ - 1) / chunks_;
    if (rows_per_chunk_ > 0) chunks_ = (dims_.rows + rows_per_chunk_ - 1) / rows_per_chunk_;
    if (chunks_ > 0) ctx.reserve_workspace(size_t(2 * chunks_ * dims_.cols) * sizeof(double));
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (dims_.cols == 0) return;
    const T* dy = static_cast<const T*>(in[0].device_data());
    const T* x = static_cast<const T*>(in[1].device_data());
    const float* scale = in[2].device_data<float>();
    const float* mean = in[3].device_data<float>();
    const float* inv_std = in[4].device_data<float>();
    T* dx = static_cast<T*>(out[0].device_data());
    float* dscale = out[1].device_data<float>();
    float* doffset = out[2].device_data<float>();
    cudaStream_t stream = cuda_stream(ctx);
    auto* partial = static_cast<double*>(ctx.workspace());
    cuda::launch_rows(dims_, "LayerNormGrad dx", [&](auto group, unsigned blocks) {
      layer_norm_dx_kernel<decltype(group)::value, T><<<blocks, cuda::kThreads, 0, stream>>>(
          dy, x, scale, mean, inv_std, dims_.rows, dims_.cols, dx);
    });
    if (chunks_ > 0) {
      layer_norm_columns_kernel<T>
          <<<cuda::grid_for(chunks_ * dims_.cols, multiprocessors_), cuda::kThreads, 0, stream>>>(
              dy, x, mean, inv_std, dims_.rows, dims_.cols, rows_per_chunk_, chunks_, partial);
      cuda::check_launch("LayerNormGrad columns");
    }
    // With no rows, this writes dscale = doffset = 0.
    layer_norm_sum_chunks_kernel<<<cuda::grid_for(dims_.cols, multiprocessors_), cuda::kThreads, 0,
                                   stream>>>(partial, dims_.cols, chunks_, dscale, doffset);
    cuda::check_launch("LayerNormGrad sum_chunks");
  }

 private:
  cuda::Rows dims_;
  int multiprocessors_;
  int64_t chunks_ = 0, rows_per_chunk_ = 0;
};

cuda::FloatKernelRegistrar<LayerNormKernel> layer_norm_kernels(OpKind::LayerNorm);
cuda::FloatKernelRegistrar<LayerNormGradKernel> layer_norm_grad_kernels(OpKind::LayerNormGrad);

}  // namespace
}  // namespace campo
