// CUDA kernels of the optimizer updates, in place on var and its state (all f32; the
// optional weight copy f16 / bf16), PyTorch semantics as ops/op.h and the CPU kernels
// (ops/cpu/optimizer.cc) define them:
//  ApplyMomentum {var, accum, grad, lr [, all_finite] [, copy]}:
//    g = grad + wd var; accum = mu accum + g; var -= lr (nesterov ? g + mu accum : accum)
//  ApplyAdam {var, m, v, grad, lr, step [, all_finite] [, copy]}:
//    g = grad + wd var; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//    var -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Every f32 operation is the CPU's, in the CPU's order, each rounded on its own (__fmul_rn
// and friends: nvcc would otherwise fuse a multiply and an add into an FMA, which the CPU's
// -ffp-contract=off build never does; division and sqrt are IEEE-rounded on both), and the
// bias corrections are computed in double as there: the updated values are the CPU's bits
// (up to the last ulp of the double pow, which rounding to f32 almost always hides).
//
// lr, step and the AllFinite flag are device tensors: the kernel reads them (the host never
// waits). A flag of 0 leaves var, the state and the copy untouched (a loss-scale overflow).
// Slices (ops/op.h): element i belongs to slice i / (numel / S), with lr[s] when lr is [S]
// and the per-slice momentum / weight decay from tables uploaded at construction.
// A step below 1 (the CPU throws) gives NaN in var and the CPU's error at a later run of
// the node (ops/cuda/deferred_error.h).
//
// One kernel per variable, as the graph has one update node per variable. A multi-tensor
// launch (all variables in one kernel, as AllFinite does) would need a grouped update node
// or an executor pass that gathers the update nodes of a step, their var / state / grad /
// copy addresses and per-variable hyperparameters into a table.
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/deferred_error.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

using cuda::from_float;

// The hyperparameters of an update as the kernel sees them: scalars, or per-slice device
// tables (nullptr: the scalar for every slice).
struct SliceParams {
  const float* lr;  // device: [] or [S]
  bool lr_per_slice;
  const float* slice_a;  // momentum (Momentum); unused (Adam)
  const float* slice_wd;
  float a, wd;
  int64_t slice_len;
};

__device__ __forceinline__ int64_t slice_of(const SliceParams& p, int64_t i) {
  return p.slice_len > 0 ? i / p.slice_len : 0;
}

// A kernel's early exit on an overflowed step: flag (may be null) == 0.
__device__ __forceinline__ bool skipped(const float* flag) { return flag && *flag == 0.0f; }

template <typename C>
__global__ void momentum_kernel(float* var, float* accum, const float* grad, SliceParams p,
                                bool nesterov, const float* flag, int64_t n, C* copy) {
  if (skipped(flag)) return;
  CAMPO_CUDA_FOR(i, n) {
    const int64_t s = slice_of(p, i);
    const float lr = p.lr[p.lr_per_slice ? s : 0];
    const float mu = p.slice_a ? p.slice_a[s] : p.a;
    const float wd = p.slice_wd ? p.slice_wd[s] : p.wd;
    const float w = var[i];
    const float g = grad[i] + __fmul_rn(wd, w);
    const float a = __fmul_rn(mu, accum[i]) + g;
    accum[i] = a;
    const float step = nesterov ? g + __fmul_rn(mu, a) : a;
    const float updated = w - __fmul_rn(lr, step);
    var[i] = updated;
    if constexpr (!std::is_same_v<C, float>) {
      if (copy) copy[i] = from_float<C>(updated);
    }
  }
}

// step_size = lr / (1 - b1^t) (double, rounded to f32), bc2_sqrt = sqrt(1 - b2^t) (f32).
template <typename C>
__global__ void adam_kernel(float* var, float* m, float* v, const float* grad, SliceParams p,
                            const float* step, float b1, float b2, float eps, const float* flag,
                            int64_t n, C* copy, unsigned long long* bad_step) {
  if (skipped(flag)) return;
  const double t = *step;
  if (!(t >= 1.0)) {  // the CPU's check; also catches NaN
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicMin(bad_step, 0ull);
    CAMPO_CUDA_FOR(i, n) var[i] = NAN;
    return;
  }
  const double bc1 = 1.0 - pow(double(b1), t);
  const float bc2_sqrt = float(sqrt(1.0 - pow(double(b2), t)));
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  // With one lr for all slices the step size is one value; per slice it is recomputed.
  const float scalar_step_size = float(double(p.lr[0]) / bc1);
  CAMPO_CUDA_FOR(i, n) {
    const int64_t s = slice_of(p, i);
    const float step_size = p.lr_per_slice ? float(double(p.lr[s]) / bc1) : scalar_step_size;
    const float wd = p.slice_wd ? p.slice_wd[s] : p.wd;
    const float w = var[i];
    const float g = grad[i] + __fmul_rn(wd, w);
    const float mi = __fmul_rn(b1, m[i]) + __fmul_rn(one_minus_b1, g);
    const float vi = __fmul_rn(b2, v[i]) + __fmul_rn(__fmul_rn(one_minus_b2, g), g);
    m[i] = mi;
    v[i] = vi;
    const float denom = __fdiv_rn(__fsqrt_rn(vi), bc2_sqrt) + eps;
    const float updated = w - __fdiv_rn(__fmul_rn(step_size, mi), denom);
    var[i] = updated;
    if constexpr (!std::is_same_v<C, float>) {
      if (copy) copy[i] = from_float<C>(updated);
    }
  }
}

// Calls body(C* copy) with the weight copy's element type (float and nullptr: no copy).
template <typename Body>
void with_copy(const Tensor* copy, const char* what, Body body) {
  if (!copy) return body(static_cast<float*>(nullptr));
  switch (copy->dtype()) {
    case DType::f16:
      return body(static_cast<__half*>(copy->device_data()));
    case DType::bf16:
      return body(static_cast<__nv_bfloat16*>(copy->device_data()));
    default:
      CAMPO_FAIL(what, ": the weight copy must be f16 or bf16, got ", dtype_name(copy->dtype()));
  }
}

// The slice count (ops/op.h): lr's size when it is [S], else the per-slice vectors' size
// (checked equal by the schema), else 1.
int64_t slice_count(const Shape& lr, size_t attr_slices) {
  if (!lr.empty()) return shape_numel(lr);
  return attr_slices > 0 ? int64_t(attr_slices) : 1;
}

// Per-slice tables on the device, or none for an empty vector.
std::shared_ptr<void> upload_if_any(ExecContext& ctx, const std::vector<float>& values) {
  return values.empty() ? nullptr : cuda::upload_table(ctx, values);
}

class ApplyMomentumKernel final : public Kernel {
 public:
  ApplyMomentumKernel(const KernelSpec& spec, ExecContext& ctx)
      : attrs_(attrs_as<MomentumAttrs>(spec.attrs)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()),
        slice_momentum_(upload_if_any(ctx, attrs_.slice_momentum)),
        slice_weight_decay_(upload_if_any(ctx, attrs_.slice_weight_decay)) {
    const int64_t numel = shape_numel(spec.inputs[0].shape);
    const int64_t slices =
        slice_count(spec.inputs[3].shape,
                    std::max(attrs_.slice_momentum.size(), attrs_.slice_weight_decay.size()));
    slice_len_ = slices > 1 ? numel / slices : 0;
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    const size_t flag_slot = attrs_.skip_if_not_finite ? 1 : 0;
    const float* flag = flag_slot ? in[4].device_data<float>() : nullptr;
    const Tensor* copy = in.size() > 4 + flag_slot ? &in[4 + flag_slot] : nullptr;
    const int64_t n = in[0].numel();
    if (n == 0) return;
    const SliceParams p{in[3].device_data<float>(),
                        !in[3].shape().empty(),
                        static_cast<const float*>(slice_momentum_.get()),
                        static_cast<const float*>(slice_weight_decay_.get()),
                        attrs_.momentum,
                        attrs_.weight_decay,
                        slice_len_};
    cudaStream_t stream = cuda_stream(ctx);
    with_copy(copy, "ApplyMomentum", [&](auto* c) {
      momentum_kernel<<<cuda::grid_for(n, multiprocessors_), cuda::kThreads, 0, stream>>>(
          in[0].device_data<float>(), in[1].device_data<float>(), in[2].device_data<float>(), p,
          attrs_.nesterov, flag, n, c);
    });
    cuda::check_launch("ApplyMomentum");
  }

 private:
  MomentumAttrs attrs_;
  int multiprocessors_;
  std::shared_ptr<void> slice_momentum_, slice_weight_decay_;
  int64_t slice_len_ = 0;  // 0: one slice
};

class ApplyAdamKernel final : public Kernel {
 public:
  ApplyAdamKernel(const KernelSpec& spec, ExecContext& ctx)
      : attrs_(attrs_as<AdamAttrs>(spec.attrs)),
        node_name_(spec.node_name),
        multiprocessors_(cuda_backend(ctx).multiprocessors()),
        slice_weight_decay_(upload_if_any(ctx, attrs_.slice_weight_decay)),
        bad_step_(ctx) {
    const int64_t numel = shape_numel(spec.inputs[0].shape);
    const int64_t slices = slice_count(spec.inputs[4].shape, attrs_.slice_weight_decay.size());
    slice_len_ = slices > 1 ? numel / slices : 0;
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    // An earlier run's step check (does not wait).
    CAMPO_CHECK(!bad_step_.found(), "ApplyAdam '", node_name_,
                "': step must be >= 1 (1-based); an earlier run of this node on the GPU got a "
                "smaller step (or NaN) and wrote NaN into var");
    const size_t flag_slot = attrs_.skip_if_not_finite ? 1 : 0;
    const float* flag = flag_slot ? in[6].device_data<float>() : nullptr;
    const Tensor* copy = in.size() > 6 + flag_slot ? &in[6 + flag_slot] : nullptr;
    const int64_t n = in[0].numel();
    if (n == 0) return;
    const SliceParams p{in[4].device_data<float>(),
                        !in[4].shape().empty(),
                        nullptr,
                        static_cast<const float*>(slice_weight_decay_.get()),
                        0.0f,
                        attrs_.weight_decay,
                        slice_len_};
    cudaStream_t stream = cuda_stream(ctx);
    unsigned long long* bad_step = bad_step_.device_word();
    with_copy(copy, "ApplyAdam", [&](auto* c) {
      adam_kernel<<<cuda::grid_for(n, multiprocessors_), cuda::kThreads, 0, stream>>>(
          in[0].device_data<float>(), in[1].device_data<float>(), in[2].device_data<float>(),
          in[3].device_data<float>(), p, in[5].device_data<float>(), attrs_.beta1, attrs_.beta2,
          attrs_.epsilon, flag, n, c, bad_step);
    });
    cuda::check_launch("ApplyAdam");
    bad_step_.publish(stream);
  }

 private:
  AdamAttrs attrs_;
  std::string node_name_;
  int multiprocessors_;
  std::shared_ptr<void> slice_weight_decay_;
  cuda::DeferredError bad_step_;
  int64_t slice_len_ = 0;
};

std::unique_ptr<Kernel> make_momentum(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ApplyMomentumKernel>(spec, ctx);
}
std::unique_ptr<Kernel> make_adam(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ApplyAdamKernel>(spec, ctx);
}

// The updates are on the fp32 list: var and state are f32 whatever the precision policy.
KernelRegistrar momentum_f32(OpKind::ApplyMomentum, Device::cuda, DType::f32, make_momentum);
KernelRegistrar adam_f32(OpKind::ApplyAdam, Device::cuda, DType::f32, make_adam);

}  // namespace
}  // namespace campo
