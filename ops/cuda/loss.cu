// CUDA kernels of the losses; logits / targets / dloss / dx in f32, f16 or bf16 (the node's
// compute type), the softmax loss's outputs always f32 (ops/loss.cc). The CPU kernels
// (ops/cpu/loss.cc) are the specification; math in f32 as there (products are rounded
// before they are added, __fmul_rn, as the CPU's -ffp-contract=off code does).
//  SparseSoftmaxCrossEntropyWithLogits, per row n (a warp for C <= kWarpRowMax, else a
//    block): m = max_c x[c], s = sum_c exp(x[c] - m) accumulated in double,
//    loss = log(s) + m - x[label], backprop[c] = exp(x[c] - m) * float(1 / s) - (c == label);
//    a row whose label is the ignore_label gets loss 0 and backprop 0.
//    Labels outside [0, C) (and not the ignore_label): the CPU throws before computing. The
//    GPU cannot throw from a kernel without stopping the stream, so the row's loss and
//    backprop become NaN (the step's loss and gradients show it at once) and the first bad
//    (row, label) is recorded on the device and copied to pinned host memory behind the
//    kernel; a later run() of the same node throws the CPU's error for it, as soon as that
//    copy has landed (ops/cuda/deferred_error.h). The host never waits inside a step.
//  SigmoidCrossEntropyWithLogits: loss = max(x, 0) - x z + log1p(exp(-|x|)).
//  SigmoidCrossEntropyWithLogitsGrad: dx = dloss * (sigmoid(x) - z), sigmoid(x) =
//    (x >= 0 ? 1 : e) / (1 + e) with e = exp(-|x|) (never overflows).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/deferred_error.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

using cuda::from_float;
using cuda::to_float;

constexpr int64_t kWarpRowMax = 1024;  // rows up to this long: one warp each

template <int kGroup, typename T>
__global__ void softmax_ce_kernel(const T* logits, const int32_t* labels, int64_t N, int64_t C,
                                  bool has_ignore, int32_t ignore_label, float* loss,
                                  float* backprop, unsigned long long* first_bad) {
  constexpr int kPerBlock = cuda::kThreads / kGroup;
  __shared__ float fscratch[cuda::kThreads / 32];
  __shared__ double dscratch[cuda::kThreads / 32];
  const int64_t n = int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kGroup;
  const int lane = threadIdx.x % kGroup;
  if (n >= N) return;  // only whole warps of a warp-per-row block (the block grid is exact)
  const T* x = logits + n * C;
  float* bp = backprop + n * C;
  const int32_t label = labels[n];
  if (has_ignore && label == ignore_label) {
    for (int64_t c = lane; c < C; c += kGroup) bp[c] = 0.0f;
    if (lane == 0) loss[n] = 0.0f;
    return;
  }
  if (label < 0 || int64_t(label) >= C) {
    for (int64_t c = lane; c < C; c += kGroup) bp[c] = NAN;
    if (lane == 0) {
      loss[n] = NAN;
      // Row in the high half: the smallest value is the first bad row.
      atomicMin(first_bad, (static_cast<unsigned long long>(n) << 32) | uint32_t(label));
    }
    return;
  }
  float m = -INFINITY;
  for (int64_t c = lane; c < C; c += kGroup) m = fmaxf(m, to_float(x[c]));
  double s = 0;
  if constexpr (kGroup == 32) {
    m = cuda::warp_max(m);
    for (int64_t c = lane; c < C; c += kGroup) s += double(expf(to_float(x[c]) - m));
    s = cuda::warp_sum(s);
  } else {
    m = cuda::block_max<kGroup>(m, fscratch);
    for (int64_t c = lane; c < C; c += kGroup) s += double(expf(to_float(x[c]) - m));
    s = cuda::block_sum<kGroup>(s, dscratch);
  }
  const float inv = float(1.0 / s);
  for (int64_t c = lane; c < C; c += kGroup) {
    const float p = __fmul_rn(expf(to_float(x[c]) - m), inv);
    bp[c] = c == label ? p - 1.0f : p;
  }
  if (lane == 0) loss[n] = float(log(s) + double(m) - double(to_float(x[label])));
}

// inputs {logits [N, C] T, labels [N] i32}; outputs {loss [N] f32, backprop [N, C] f32}.
template <typename T>
class SparseSoftmaxCrossEntropyKernel final : public Kernel {
 public:
  SparseSoftmaxCrossEntropyKernel(const KernelSpec& spec, ExecContext& ctx)
      : bad_label_(ctx),
        node_name_(spec.node_name),
        ignore_label_(ignore_label_of(spec.attrs)),
        N_(spec.inputs[0].shape[0]),
        C_(spec.inputs[0].shape[1]) {
    CAMPO_CHECK(N_ < (int64_t(1) << 31), "SparseSoftmaxCrossEntropyWithLogits '", node_name_,
                "': the CUDA kernel takes fewer than 2^31 rows, got ", N_);
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    cudaStream_t stream = cuda_stream(ctx);
    unsigned long long* first_bad = bad_label_.device_word();
    const T* logits = static_cast<const T*>(in[0].device_data());
    const int32_t* labels = in[1].device_data<int32_t>();
    float* loss = out[0].device_data<float>();
    float* backprop = out[1].device_data<float>();
    const bool has_ignore = ignore_label_.has_value();
    const int32_t ignore = ignore_label_.value_or(0);
    if (N_ > 0) {
      if (C_ <= kWarpRowMax) {
        constexpr int kRowsPerBlock = cuda::kThreads / 32;
        softmax_ce_kernel<32, T>
            <<<unsigned((N_ + kRowsPerBlock - 1) / kRowsPerBlock), cuda::kThreads, 0, stream>>>(
                logits, labels, N_, C_, has_ignore, ignore, loss, backprop, first_bad);
      } else {
        softmax_ce_kernel<cuda::kThreads, T><<<unsigned(N_), cuda::kThreads, 0, stream>>>(
            logits, labels, N_, C_, has_ignore, ignore, loss, backprop, first_bad);
      }
      cuda::check_launch("SparseSoftmaxCrossEntropyWithLogits");
    }
    bad_label_.copy(stream);
  }
  void before_run(ExecContext&) override { check_labels(); }  // an earlier run's (no wait)
  void after_run(ExecContext& ctx) override { bad_label_.mark(cuda_stream(ctx)); }

  // Throws the CPU kernel's error for the first out-of-range label an earlier run found.
  void check_labels() {
    const std::optional<uint64_t> found = bad_label_.found();
    if (!found) return;
    const uint64_t bad = *found;
    const int64_t row = int64_t(bad >> 32);
    const int32_t label = int32_t(uint32_t(bad & 0xffffffffu));
    CAMPO_FAIL("SparseSoftmaxCrossEntropyWithLogits '", node_name_, "': label ", label, " in row ",
               row, " is outside [0, ", C_, ")",
               ignore_label_ ? " and is not the ignore_label " : "",
               ignore_label_ ? std::to_string(*ignore_label_) : "",
               " (found on the GPU in an earlier run of this node, whose loss and backprop "
               "rows for it are NaN)");
  }

 private:
  cuda::DeferredError bad_label_;  // (row << 32 | label) of the first bad label
  std::string node_name_;
  std::optional<int32_t> ignore_label_;
  int64_t N_, C_;
};

// loss = max(x, 0) - x z + log1p(exp(-|x|)).
template <typename T>
__global__ void sigmoid_ce_kernel(const T* x, const T* z, int64_t n, T* loss) {
  CAMPO_CUDA_FOR(i, n) {
    const float xi = to_float(x[i]), zi = to_float(z[i]);
    loss[i] = from_float<T>(fmaxf(xi, 0.0f) - __fmul_rn(xi, zi) + log1pf(expf(-fabsf(xi))));
  }
}

// dx = dloss * (sigmoid(x) - z).
template <typename T>
__global__ void sigmoid_ce_grad_kernel(const T* dloss, const T* x, const T* z, int64_t n, T* dx) {
  CAMPO_CUDA_FOR(i, n) {
    const float xi = to_float(x[i]);
    const float e = expf(-fabsf(xi));
    const float sigmoid = (xi >= 0.0f ? 1.0f : e) / (1.0f + e);
    dx[i] = from_float<T>(to_float(dloss[i]) * (sigmoid - to_float(z[i])));
  }
}

template <typename T>
class SigmoidCrossEntropyKernel final : public Kernel {
 public:
  SigmoidCrossEntropyKernel(const KernelSpec&, ExecContext& ctx)
      : multiprocessors_(cuda_backend(ctx).multiprocessors()) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const int64_t n = in[0].numel();
    if (n == 0) return;
    sigmoid_ce_kernel<T>
        <<<cuda::grid_for(n, multiprocessors_), cuda::kThreads, 0, cuda_stream(ctx)>>>(
            static_cast<const T*>(in[0].device_data()), static_cast<const T*>(in[1].device_data()),
            n, static_cast<T*>(out[0].device_data()));
    cuda::check_launch("SigmoidCrossEntropyWithLogits");
  }

 private:
  int multiprocessors_;
};

template <typename T>
class SigmoidCrossEntropyGradKernel final : public Kernel {
 public:
  SigmoidCrossEntropyGradKernel(const KernelSpec&, ExecContext& ctx)
      : multiprocessors_(cuda_backend(ctx).multiprocessors()) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const int64_t n = in[0].numel();
    if (n == 0) return;
    sigmoid_ce_grad_kernel<T>
        <<<cuda::grid_for(n, multiprocessors_), cuda::kThreads, 0, cuda_stream(ctx)>>>(
            static_cast<const T*>(in[0].device_data()), static_cast<const T*>(in[1].device_data()),
            static_cast<const T*>(in[2].device_data()), n, static_cast<T*>(out[0].device_data()));
    cuda::check_launch("SigmoidCrossEntropyWithLogitsGrad");
  }

 private:
  int multiprocessors_;
};

cuda::FloatKernelRegistrar<SparseSoftmaxCrossEntropyKernel> sparse_softmax_cross_entropy_kernels(
    OpKind::SparseSoftmaxCrossEntropyWithLogits);
cuda::FloatKernelRegistrar<SigmoidCrossEntropyKernel> sigmoid_cross_entropy_kernels(
    OpKind::SigmoidCrossEntropyWithLogits);
cuda::FloatKernelRegistrar<SigmoidCrossEntropyGradKernel> sigmoid_cross_entropy_grad_kernels(
    OpKind::SigmoidCrossEntropyWithLogitsGrad);

}  // namespace
}  // namespace campo
