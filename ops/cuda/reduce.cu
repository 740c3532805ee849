// CUDA kernels of Mean / Sum and of their gradients MeanGrad / BroadcastTo; x and dY / dX in
// f32, f16 or bf16 (the node's compute type), Mean / Sum's output always f32 (ops/reduce.cc).
// The CPU kernels (ops/cpu/reduce.cc) are the specification; both use the same plan
// (ops/reduce_plan.h: contiguous runs of `inner` elements, kept and reduced offset tables,
// uploaded to the device at construction).
//
// Sums accumulate in double, as the CPU's do (an f32 sum of a million values of mixed sign
// loses digits of the result; FP64 adds cost nothing in a memory-bound pass), in a fixed
// order decided by the shape only: no atomics, so every run gives the same bits.
//  - inner reduced: output o sums `count` elements, cut into tasks of at most kChunk
//    elements; a task is a warp (small counts) or a block (large ones) accumulating a
//    strided share per thread and adding the shares with a fixed tree. With several tasks
//    per output their partial sums go to the workspace and a second kernel adds them in
//    order, one warp per output.
//  - inner kept: one thread per (output, chunk of reduced rows) adds its rows in order (reads
//    coalesced along the inner run); with several chunks a second kernel adds the chunks'
//    partial sums in order. Chunks are used only where the outputs alone would not fill
//    the device.
#include <cmath>
#include <limits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"
#include "ops/reduce_plan.h"

namespace campo {
namespace {

using cuda::from_float;
using cuda::to_float;

constexpr int64_t kChunk = 16384;        // elements of one output per block task
constexpr int64_t kWarpTaskMax = 4096;   // outputs of at most this many elements: one warp
constexpr int64_t kRowsOutputs = 32768;  // inner kept: outputs that fill the device alone
constexpr int64_t kRowsPerChunk = 64;    // inner kept: least rows per chunk
constexpr int64_t kMaxPartials = int64_t(1) << 20;  // inner kept: bound on partial sums

// Inner reduced, one task of kGroup threads (32: a warp, or the whole block) per
// (output o, chunk k): s = sum over j in [k chunk, min(count, (k+1) chunk)) of
// x[kept[o] + red[j / L] + j % L]. tpo tasks per output; tpo == 1 writes y[o] = s * scale,
// else partial[task] = s.
template <int kGroup, typename T>
__global__ void reduce_runs_kernel(const T* x, const int64_t* kept, const int64_t* red, int64_t L,
                                   int64_t count, int64_t chunk, int64_t tpo, int64_t tasks,
                                   double scale, float* y, double* partial) {
  constexpr int kPerBlock = cuda::kThreads / kGroup;
  __shared__ double scratch[cuda::kThreads / 32];
  const int64_t task = int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kGroup;
  const int lane = threadIdx.x % kGroup;
  double s = 0;
  if (task < tasks) {  // always true for kGroup == kThreads (the grid is exact)
    const int64_t o = task / tpo, k = task % tpo;
    const int64_t j0 = k * chunk, j1 = min(count, j0 + chunk);
    const T* xo = x + kept[o];
    for (int64_t j = j0 + lane; j < j1; j += kGroup) {
      const int64_t r = j / L;
      s += double(to_float(xo[red[r] + (j - r * L)]));
    }
  }
  if constexpr (kGroup == 32)
    s = cuda::warp_sum(s);
  else
    s = cuda::block_sum<kGroup>(s, scratch);
  if (lane != 0 || task >= tasks) return;
  if (tpo == 1)
    y[task] = float(s * scale);
  else
    partial[task] = s;
}

// y[o] = scale * sum_k partial[o tpo + k], one warp per output.
__global__ void sum_partials_kernel(const double* partial, int64_t tpo, int64_t outputs,
                                    double scale, float* y) {
  const int64_t o = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (o >= outputs) return;  // whole warps leave together (blockDim is a multiple of 32)
  double s = 0;
  for (int64_t k = lane; k < tpo; k += 32) s += partial[o * tpo + k];
  s = cuda::warp_sum(s);
  if (lane == 0) y[o] = float(s * scale);
}

// Inner kept: thread (c, q), q = o L + i, sums x[kept[o] + red[r] + i] over rows r of chunk c.
template <typename T>
__global__ void reduce_rows_kernel(const T* x, const int64_t* kept, const int64_t* red, int64_t L,
                                   int64_t outputs, int64_t rows, int64_t rows_per_chunk,
                                   int64_t chunks, double scale, float* y, double* partial) {
  CAMPO_CUDA_FOR(t, outputs * chunks) {
    const int64_t c = t / outputs, q = t % outputs;
    const int64_t o = q / L, i = q % L;
    const int64_t r0 = c * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    const T* xo = x + kept[o] + i;
    double s = 0;
    for (int64_t r = r0; r < r1; ++r) s += double(to_float(xo[red[r]]));
    if (chunks == 1)
      y[q] = float(s * scale);
    else
      partial[t] = s;
  }
}

// y[q] = scale * sum_c partial[c outputs + q].
__global__ void sum_chunks_kernel(const double* partial, int64_t outputs, int64_t chunks,
                                  double scale, float* y) {
  CAMPO_CUDA_FOR(q, outputs) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * outputs + q];
    y[q] = float(s * scale);
  }
}

__global__ void fill_kernel(float* y, int64_t n, float value) { CAMPO_CUDA_FOR(i, n) y[i] = value; }

unsigned blocks_for(int64_t n, int per_block) {
  const int64_t b = (n + per_block - 1) / per_block;
  CAMPO_CHECK(b < (int64_t(1) << 31), "internal: a CUDA reduction needs ", b, " blocks");
  return unsigned(std::max<int64_t>(1, b));
}

// Mean / Sum: y = scale * sum over the reduced axes, scale = 1 / count for Mean (NaN for an
// empty Mean, as 0 / 0), 1 for Sum.
template <typename T>
class ReduceKernel final : public Kernel {
 public:
  ReduceKernel(const KernelSpec& spec, ExecContext& ctx, bool is_mean)
      : plan_(make_reduce_plan(spec.inputs[0].shape, attrs_as<ReduceAttrs>(spec.attrs).axes)),
        is_mean_(is_mean),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {
    if (plan_.input_is_empty) return;
    kept_ = cuda::upload_table(ctx, plan_.kept_offsets);
    red_ = cuda::upload_table(ctx, plan_.reduced_offsets);
    const int64_t outer_kept = int64_t(plan_.kept_offsets.size());
    const int64_t outer_reduced = int64_t(plan_.reduced_offsets.size());
    size_t partials = 0;
    if (plan_.inner_is_reduced) {
      warp_tasks_ = plan_.count <= kWarpTaskMax;
      chunk_ = warp_tasks_ ? plan_.count : kChunk;
      tasks_per_output_ = (plan_.count + chunk_ - 1) / chunk_;
      if (tasks_per_output_ > 1) partials = size_t(outer_kept * tasks_per_output_);
    } else {
      const int64_t outputs = outer_kept * plan_.inner;
      if (outputs < kRowsOutputs && outer_reduced > kRowsPerChunk) {
        chunks_ = std::min((outer_reduced + kRowsPerChunk - 1) / kRowsPerChunk,
                           std::max<int64_t>(1, kMaxPartials / outputs));
      }
      rows_per_chunk_ = (outer_reduced + chunks_ - 1) / chunks_;
      chunks_ = (outer_reduced + rows_per_chunk_ - 1) / rows_per_chunk_;
      if (chunks_ > 1) partials = size_t(chunks_ * outputs);
    }
    if (partials > 0) ctx.reserve_workspace(partials * sizeof(double));
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    cudaStream_t stream = cuda_stream(ctx);
    float* y = out[0].device_data<float>();
    const int64_t out_numel = out[0].numel();
    if (plan_.input_is_empty) {
      if (out_numel == 0) return;
      const float fill = is_mean_ ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
      fill_kernel<<<cuda::grid_for(out_numel, multiprocessors_), cuda::kThreads, 0, stream>>>(
          y, out_numel, fill);
      cuda::check_launch("Mean/Sum fill");
      return;
    }
    const T* x = static_cast<const T*>(in[0].device_data());
    const auto* kept = static_cast<const int64_t*>(kept_.get());
    const auto* red = static_cast<const int64_t*>(red_.get());
    auto* partial = static_cast<double*>(ctx.workspace());
    const double scale = is_mean_ ? 1.0 / double(plan_.count) : 1.0;
    const int64_t outer_kept = int64_t(plan_.kept_offsets.size());
    const int64_t outer_reduced = int64_t(plan_.reduced_offsets.size());
    const int64_t L = plan_.inner;
    if (plan_.inner_is_reduced) {
      const int64_t tpo = tasks_per_output_, tasks = outer_kept * tpo;
      if (warp_tasks_)
        reduce_runs_kernel<32, T>
            <<<blocks_for(tasks, cuda::kThreads / 32), cuda::kThreads, 0, stream>>>(
                x, kept, red, L, plan_.count, chunk_, tpo, tasks, scale, y, partial);
      else
        reduce_runs_kernel<cuda::kThreads, T><<<blocks_for(tasks, 1), cuda::kThreads, 0, stream>>>(
            x, kept, red, L, plan_.count, chunk_, tpo, tasks, scale, y, partial);
      cuda::check_launch("Mean/Sum reduce_runs");
      if (tpo > 1) {
        sum_partials_kernel<<<blocks_for(outer_kept, cuda::kThreads / 32), cuda::kThreads, 0,
                              stream>>>(partial, tpo, outer_kept, scale, y);
        cuda::check_launch("Mean/Sum sum_partials");
      }
      return;
    }
    const int64_t outputs = outer_kept * L;
    reduce_rows_kernel<T>
        <<<cuda::grid_for(outputs * chunks_, multiprocessors_), cuda::kThreads, 0, stream>>>(
            x, kept, red, L, outputs, outer_reduced, rows_per_chunk_, chunks_, scale, y, partial);
    cuda::check_launch("Mean/Sum reduce_rows");
    if (chunks_ > 1) {
      sum_chunks_kernel<<<cuda::grid_for(outputs, multiprocessors_), cuda::kThreads, 0, stream>>>(
          partial, outputs, chunks_, scale, y);
      cuda::check_launch("Mean/Sum sum_chunks");
    }
  }

 private:
  ReducePlan plan_;
  bool is_mean_;
  int multiprocessors_;
  std::shared_ptr<void> kept_, red_;  // the plan's offset tables on the device
  bool warp_tasks_ = false;
  int64_t chunk_ = kChunk, tasks_per_output_ = 1;  // inner reduced
  int64_t chunks_ = 1, rows_per_chunk_ = 1;        // inner kept
};

// dX[kept[o] + red[r] + i] = dY[inner reduced ? o : o L + i] * scale, one thread per dX
// element in (o, r, i) order; writes are disjoint.
template <typename T>
__global__ void broadcast_back_kernel(const T* dy, const int64_t* kept, const int64_t* red,
                                      int64_t L, int64_t outer_reduced, bool inner_is_reduced,
                                      float scale, int64_t n, T* dx) {
  CAMPO_CUDA_FOR(t, n) {
    const int64_t i = t % L, q = t / L;
    const int64_t r = q % outer_reduced, o = q / outer_reduced;
    const float g = to_float(dy[inner_is_reduced ? o : o * L + i]);
    dx[kept[o] + red[r] + i] = from_float<T>(g * scale);
  }
}

// MeanGrad / BroadcastTo, input {dY}: scale = 1 / count (as an f32, like the CPU's) for
// MeanGrad, 1 for BroadcastTo.
template <typename T>
class BroadcastBackKernel final : public Kernel {
 public:
  BroadcastBackKernel(const KernelSpec& spec, ExecContext& ctx, bool is_mean)
      : multiprocessors_(cuda_backend(ctx).multiprocessors()) {
    const auto& a = attrs_as<ReduceAttrs>(spec.attrs);
    plan_ = make_reduce_plan(a.input_shape, a.axes);
    scale_ = is_mean ? float(1.0 / double(plan_.count)) : 1.0f;
    numel_ = shape_numel(a.input_shape);
    if (plan_.input_is_empty) return;
    kept_ = cuda::upload_table(ctx, plan_.kept_offsets);
    red_ = cuda::upload_table(ctx, plan_.reduced_offsets);
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (plan_.input_is_empty) return;
    broadcast_back_kernel<T>
        <<<cuda::grid_for(numel_, multiprocessors_), cuda::kThreads, 0, cuda_stream(ctx)>>>(
            static_cast<const T*>(in[0].device_data()), static_cast<const int64_t*>(kept_.get()),
            static_cast<const int64_t*>(red_.get()), plan_.inner,
            int64_t(plan_.reduced_offsets.size()), plan_.inner_is_reduced, scale_, numel_,
            static_cast<T*>(out[0].device_data()));
    cuda::check_launch("MeanGrad/BroadcastTo");
  }

 private:
  ReducePlan plan_;
  float scale_ = 1.0f;
  int64_t numel_ = 0;
  int multiprocessors_;
  std::shared_ptr<void> kept_, red_;
};

template <template <typename> class K, bool kIsMean, DType kType>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  return CAMPO_CUDA_DISPATCH_FLOAT(kType, op_name(spec.kind), [&]() -> std::unique_ptr<Kernel> {
    return std::make_unique<K<T>>(spec, ctx, kIsMean);
  });
}

#define CAMPO_REGISTER_REDUCE(op, K, is_mean, dtype, tag) \
  KernelRegistrar op##_##tag(OpKind::op, Device::cuda, DType::dtype, make<K, is_mean, DType::dtype>)
CAMPO_REGISTER_REDUCE(Mean, ReduceKernel, true, f32, f32);
CAMPO_REGISTER_REDUCE(Mean, ReduceKernel, true, f16, f16);
CAMPO_REGISTER_REDUCE(Mean, ReduceKernel, true, bf16, bf16);
CAMPO_REGISTER_REDUCE(Sum, ReduceKernel, false, f32, f32);
CAMPO_REGISTER_REDUCE(Sum, ReduceKernel, false, f16, f16);
CAMPO_REGISTER_REDUCE(Sum, ReduceKernel, false, bf16, bf16);
CAMPO_REGISTER_REDUCE(MeanGrad, BroadcastBackKernel, true, f32, f32);
CAMPO_REGISTER_REDUCE(MeanGrad, BroadcastBackKernel, true, f16, f16);
CAMPO_REGISTER_REDUCE(MeanGrad, BroadcastBackKernel, true, bf16, bf16);
CAMPO_REGISTER_REDUCE(BroadcastTo, BroadcastBackKernel, false, f32, f32);
CAMPO_REGISTER_REDUCE(BroadcastTo, BroadcastBackKernel, false, f16, f16);
CAMPO_REGISTER_REDUCE(BroadcastTo, BroadcastBackKernel, false, bf16, bf16);
#undef CAMPO_REGISTER_REDUCE

}  // namespace
}  // namespace campo
