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
// A multi-tensor node (attrs `tensors` = k, UpdateLayout in ops/op.h) is one launch per up
// to kTensorsPerLaunch variables (ops/cuda/tensor_table.cuh): var / state / grad / copy
// addresses travel in the kernel's parameter, and a block finds its variable per chunk; a
// single update is a table of one. The per-element code is the same either way, so a group
// gives the bits of separate updates.
#include <cmath>
#include <cstdint>
#include <string>

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/context.h"
#include "ops/cuda/deferred_error.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/tensor_table.cuh"

namespace campo {
namespace {

using cuda::from_float;

constexpr int kTensorsPerLaunch = 64;
constexpr int64_t kChunk = 16384;  // elements per block task

// The hyperparameters of an update as the kernel sees them: scalars, or per-slice device
// tables (nullptr: the scalar for every slice). `slices` S cuts each variable on its own:
// element i of a variable of n elements belongs to slice i / (n / S).
struct SliceParams {
  const float* lr;  // device: [] or [S]
  bool lr_per_slice;
  const float* slice_a;  // momentum (Momentum); unused (Adam)
  const float* slice_wd;
  float a, wd;
  int64_t slices;
};

// The weight copy's format of a table entry.
enum class CopyFormat : uint8_t { none, f16, bf16 };

// A launch's variables: per role (ApplyMomentum: var, accum, grad; ApplyAdam: var, m, v,
// grad; UpdateLayout's order) the addresses, and the weight copies with their formats.
template <int Roles>
struct UpdateTable {
  float* role[Roles][kTensorsPerLaunch];
  void* copy[kTensorsPerLaunch];
  CopyFormat copy_format[kTensorsPerLaunch];
  cuda::ChunkIndex<kTensorsPerLaunch> chunks;
};
using MomentumTable = UpdateTable<3>;
using AdamTable = UpdateTable<4>;
static_assert(sizeof(AdamTable) <= cuda::kMaxTableBytes, "kernel parameters must fit in 4 KiB");

// A kernel's early exit on an overflowed step: flag (may be null) == 0.
__device__ __forceinline__ bool skipped(const float* flag) { return flag && *flag == 0.0f; }

// Slice length of a variable of n elements (0: one slice).
__device__ __forceinline__ int64_t slice_len_of(const SliceParams& p, int64_t n) {
  return p.slices > 1 ? n / p.slices : 0;
}

__device__ __forceinline__ void store_copy(void* copy, CopyFormat f, int64_t i, float x) {
  if (f == CopyFormat::f16)
    static_cast<__half*>(copy)[i] = from_float<__half>(x);
  else if (f == CopyFormat::bf16)
    static_cast<__nv_bfloat16*>(copy)[i] = from_float<__nv_bfloat16>(x);
}

// One chunk of the table per block task; threads stride over its elements.
__global__ void momentum_kernel(const MomentumTable table, SliceParams p, bool nesterov,
                                const float* flag) {
  if (skipped(flag)) return;
  const int64_t chunks = table.chunks.chunks();
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const cuda::TableChunk at = table.chunks.locate(c, kChunk);
    float* var = table.role[0][at.t];
    float* accum = table.role[1][at.t];
    const float* grad = table.role[2][at.t];
    void* copy = table.copy[at.t];
    const CopyFormat format = table.copy_format[at.t];
    const int64_t slice_len = slice_len_of(p, table.chunks.numel[at.t]);
    for (int64_t i = at.begin + threadIdx.x; i < at.end; i += blockDim.x) {
      const int64_t s = slice_len > 0 ? i / slice_len : 0;
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
      store_copy(copy, format, i, updated);
    }
  }
}

// step_size = lr / (1 - b1^t) (double, rounded to f32), bc2_sqrt = sqrt(1 - b2^t) (f32).
__global__ void adam_kernel(const AdamTable table, SliceParams p, const float* step, float b1,
                            float b2, float eps, const float* flag, unsigned long long* bad_step) {
  if (skipped(flag)) return;
  const int64_t chunks = table.chunks.chunks();
  const double t = *step;
  if (!(t >= 1.0)) {  // the CPU's check; also catches NaN
    if (blockIdx.x == 0 && threadIdx.x == 0) atomicMin(bad_step, 0ull);
    for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
      const cuda::TableChunk at = table.chunks.locate(c, kChunk);
      for (int64_t i = at.begin + threadIdx.x; i < at.end; i += blockDim.x)
        table.role[0][at.t][i] = NAN;
    }
    return;
  }
  const double bc1 = 1.0 - pow(double(b1), t);
  const float bc2_sqrt = float(sqrt(1.0 - pow(double(b2), t)));
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  // With one lr for all slices the step size is one value; per slice it is recomputed.
  const float scalar_step_size = float(double(p.lr[0]) / bc1);
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const cuda::TableChunk at = table.chunks.locate(c, kChunk);
    float* var = table.role[0][at.t];
    float* m = table.role[1][at.t];
    float* v = table.role[2][at.t];
    const float* grad = table.role[3][at.t];
    void* copy = table.copy[at.t];
    const CopyFormat format = table.copy_format[at.t];
    const int64_t slice_len = slice_len_of(p, table.chunks.numel[at.t]);
    for (int64_t i = at.begin + threadIdx.x; i < at.end; i += blockDim.x) {
      const int64_t s = slice_len > 0 ? i / slice_len : 0;
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
      store_copy(copy, format, i, updated);
    }
  }
}

// The format of variable t's weight copy (none when the node has no copies).
CopyFormat copy_format(const std::vector<Tensor>& in, const UpdateLayout& l, int t,
                       const char* what) {
  if (int(in.size()) <= l.required()) return CopyFormat::none;
  const DType d = in[size_t(l.copy(t))].dtype();
  CAMPO_CHECK(d == DType::f16 || d == DType::bf16, what,
              ": the weight copy must be f16 or bf16, got ", dtype_name(d));
  return d == DType::f16 ? CopyFormat::f16 : CopyFormat::bf16;
}

// Fills tables of up to kTensorsPerLaunch variables of an update (empty ones skipped) and
// calls launch(table) for each.
template <int Roles, typename Launch>
void for_each_table(const std::vector<Tensor>& in, const UpdateLayout& l, const char* what,
                    Launch launch) {
  UpdateTable<Roles> table{};
  for (int t = 0; t < l.tensors; ++t) {
    const int64_t n = in[size_t(l.input(0, t))].numel();
    if (n == 0) continue;
    const int slot = table.chunks.add(n, kChunk);
    for (int role = 0; role < Roles; ++role)
      table.role[role][slot] = in[size_t(l.input(role, t))].device_data<float>();
    table.copy_format[slot] = copy_format(in, l, t, what);
    if (table.copy_format[slot] != CopyFormat::none)
      table.copy[slot] = in[size_t(l.copy(t))].device_data();
    if (table.chunks.full()) {
      launch(table);
      table = UpdateTable<Roles>{};
    }
  }
  if (table.chunks.count > 0) launch(table);
}

// The slice count (ops/op.h): lr's size when it is [S], else the per-slice vectors' size
// (checked equal by the schema), else 1.
int64_t slice_count(const Shape& lr, size_t attr_slices) {
  if (!lr.empty()) return shape_numel(lr);
  return attr_slices > 0 ? int64_t(attr_slices) : 1;
}

// These kernels keep var and the state in f32: a node that stores them in bf16 (pure
// low-precision training, ops/op.h) is refused when its kernel is made, never read as f32.
void require_f32_storage(const KernelSpec& spec, const UpdateLayout& l) {
  for (int t = 0; t < l.tensors; ++t)
    for (int role = 0; role + 1 < l.roles; ++role) {
      const DType d = spec.inputs[size_t(l.input(role, t))].dtype;
      CAMPO_CHECK(d == DType::f32, op_name(spec.kind), " '", spec.node_name,
                  "': weights or optimizer state stored in ", dtype_name(d),
                  " (--master-weights none, --optimizer-state bf16) are not built for cuda yet");
    }
}

// Per-slice tables on the device, or none for an empty vector.
std::shared_ptr<void> upload_if_any(ExecContext& ctx, const std::vector<float>& values) {
  return values.empty() ? nullptr : cuda::upload_table(ctx, values);
}

class ApplyMomentumKernel final : public Kernel {
 public:
  ApplyMomentumKernel(const KernelSpec& spec, ExecContext& ctx)
      : attrs_(attrs_as<MomentumAttrs>(spec.attrs)),
        layout_(update_layout(spec.kind, spec.attrs)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()),
        slice_momentum_(upload_if_any(ctx, attrs_.slice_momentum)),
        slice_weight_decay_(upload_if_any(ctx, attrs_.slice_weight_decay)),
        slices_(slice_count(
            spec.inputs[size_t(layout_.lr())].shape,
            std::max(attrs_.slice_momentum.size(), attrs_.slice_weight_decay.size()))) {
    require_f32_storage(spec, layout_);
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    const UpdateLayout& l = layout_;
    const float* flag = l.has_flag ? in[size_t(l.flag())].device_data<float>() : nullptr;
    const Tensor& lr = in[size_t(l.lr())];
    const SliceParams p{lr.device_data<float>(),
                        !lr.shape().empty(),
                        static_cast<const float*>(slice_momentum_.get()),
                        static_cast<const float*>(slice_weight_decay_.get()),
                        attrs_.momentum,
                        attrs_.weight_decay,
                        slices_};
    cudaStream_t stream = cuda_stream(ctx);
    for_each_table<3>(in, l, "ApplyMomentum", [&](const MomentumTable& table) {
      momentum_kernel<<<table.chunks.blocks(multiprocessors_), cuda::kThreads, 0, stream>>>(
          table, p, attrs_.nesterov, flag);
      cuda::check_launch("ApplyMomentum");
    });
  }

 private:
  MomentumAttrs attrs_;
  UpdateLayout layout_;
  int multiprocessors_;
  std::shared_ptr<void> slice_momentum_, slice_weight_decay_;
  int64_t slices_;
};

class ApplyAdamKernel final : public Kernel {
 public:
  ApplyAdamKernel(const KernelSpec& spec, ExecContext& ctx)
      : attrs_(attrs_as<AdamAttrs>(spec.attrs)),
        layout_(update_layout(spec.kind, spec.attrs)),
        node_name_(spec.node_name),
        multiprocessors_(cuda_backend(ctx).multiprocessors()),
        slice_weight_decay_(upload_if_any(ctx, attrs_.slice_weight_decay)),
        bad_step_(ctx),
        slices_(slice_count(spec.inputs[size_t(layout_.lr())].shape,
                            attrs_.slice_weight_decay.size())) {
    require_f32_storage(spec, layout_);
  }

  // An earlier run's step check (does not wait).
  void before_run(ExecContext&) override {
    CAMPO_CHECK(!bad_step_.found(), "ApplyAdam '", node_name_,
                "': step must be >= 1 (1-based); an earlier run of this node on the GPU got a "
                "smaller step (or NaN) and wrote NaN into var");
  }
  void after_run(ExecContext& ctx) override { bad_step_.mark(cuda_stream(ctx)); }
  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    const UpdateLayout& l = layout_;
    const float* flag = l.has_flag ? in[size_t(l.flag())].device_data<float>() : nullptr;
    const Tensor& lr = in[size_t(l.lr())];
    const float* step = in[size_t(l.lr() + 1)].device_data<float>();
    const SliceParams p{lr.device_data<float>(),
                        !lr.shape().empty(),
                        nullptr,
                        static_cast<const float*>(slice_weight_decay_.get()),
                        0.0f,
                        attrs_.weight_decay,
                        slices_};
    cudaStream_t stream = cuda_stream(ctx);
    unsigned long long* bad_step = bad_step_.device_word();
    for_each_table<4>(in, l, "ApplyAdam", [&](const AdamTable& table) {
      adam_kernel<<<table.chunks.blocks(multiprocessors_), cuda::kThreads, 0, stream>>>(
          table, p, step, attrs_.beta1, attrs_.beta2, attrs_.epsilon, flag, bad_step);
      cuda::check_launch("ApplyAdam");
    });
    bad_step_.copy(stream);
  }

 private:
  AdamAttrs attrs_;
  UpdateLayout layout_;
  std::string node_name_;
  int multiprocessors_;
  std::shared_ptr<void> slice_weight_decay_;
  cuda::DeferredError bad_step_;
  int64_t slices_;
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
