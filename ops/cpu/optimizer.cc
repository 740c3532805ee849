// CPU kernels of the optimizer updates (f32, in place on var and state; PyTorch semantics):
//  ApplyMomentum {var, accum, grad, lr}:
//    g = grad + wd var; accum = mu accum + g; var -= lr (nesterov ? g + mu accum : accum)
//  ApplyAdam {var, m, v, grad, lr, step}:
//    g = grad + wd var; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//    var -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//  Bias corrections are computed in double once per step, as PyTorch does in Python floats.
// With a weight copy (the optional last input, f16/bf16), each block of var is rounded
// into it right after its update, while it is still in cache: the same rounding as Cast
// (runtime/dtype.h), without a separate pass over the weights.
// With S slices (ops/op.h: lr [S], per-slice momentum / weight decay) every slice is cut
// into its own blocks, each updated with its slice's hyperparameters by the same block
// function, so an update of S slices gives the bits of S separate updates of the slices.
// A multi-tensor node (ops/op.h, UpdateLayout) updates its variables one after the other.
// Pure low-precision training (ops/op.h): a var or state stored in bf16 is decoded block by
// block into f32 staging on the thread's stack, updated there by the same block function
// (so the f32 arithmetic is the f32 update's), and rounded back to bf16: to nearest even,
// or stochastically (runtime/stochastic_rounding.h), element i of role r of variable t
// drawing from the stream update_stream(node, t, r, step) under the run's seed. Blocks
// never share an element, so the bits do not depend on the thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/kernel.h"
#include "runtime/hash.h"
#include "runtime/stochastic_rounding.h"

namespace campo {
namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;
constexpr int64_t kBlock = 4096;  // elements per parallel work item

// One block of an update, compiled for AVX-512 and for the baseline ISA (picked at load
// time). The project builds with -ffp-contract=off, so both give the same bits.
struct MomentumBlock {
  float* var;
  float* accum;
  const float* grad;
  float lr, mu, wd;
  bool nesterov;
};

__attribute__((target_clones("avx512f", "default"))) void momentum_block(const MomentumBlock& p,
                                                                          int64_t begin,
                                                                          int64_t end) {
  float* __restrict var = p.var;
  float* __restrict accum = p.accum;
  const float* __restrict grad = p.grad;
  const float lr = p.lr, mu = p.mu, wd = p.wd;
  if (p.nesterov) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] + wd * var[i];
      const float a = mu * accum[i] + g;
      accum[i] = a;
      var[i] -= lr * (g + mu * a);
    }
  } else {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] + wd * var[i];
      const float a = mu * accum[i] + g;
      accum[i] = a;
      var[i] -= lr * a;
    }
  }
}

struct AdamBlock {
  float* var;
  float* m;
  float* v;
  const float* grad;
  float step_size, bc2_sqrt, b1, b2, eps, wd;
};

__attribute__((target_clones("avx512f", "default"))) void adam_block(const AdamBlock& p,
                                                                      int64_t begin, int64_t end) {
  float* __restrict var = p.var;
  float* __restrict m = p.m;
  float* __restrict v = p.v;
  const float* __restrict grad = p.grad;
  const float b1 = p.b1, b2 = p.b2, eps = p.eps, wd = p.wd;
  const float step_size = p.step_size, bc2_sqrt = p.bc2_sqrt;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] + wd * var[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    var[i] -= step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

// One stored input of a variable's update (var, or a state: accum; m, v) as the block
// functions see it: f32 updated in place, or bf16 staged through f32 and rounded back with
// `stochastic` rounding from `stream`.
struct StoredRole {
  void* data = nullptr;
  DType dtype = DType::f32;
  uint64_t stream = 0;
};

// How bf16 roles are rounded back: stochastically under `seed`, or to nearest even.
struct StoreRounding {
  bool stochastic = false;
  uint64_t seed = 0;
};

// The stream of role `role` of variable t of update `node_hash` (fnv1a64 of its name) at
// executor step `step`: a pure function of the four, so a resumed run draws the same bits.
uint64_t update_stream(uint64_t node_hash, int t, int role, int64_t step) {
  return splitmix64(splitmix64(node_hash ^ (uint64_t(t) << 4 | uint64_t(role))) ^ uint64_t(step));
}

// role's elements [begin, begin + len) as f32: in place when f32, else decoded into staging.
float* load_role(const StoredRole& r, int64_t begin, int64_t len, float* staging) {
  if (r.dtype == DType::f32) return static_cast<float*>(r.data) + begin;
  convert(static_cast<const uint16_t*>(r.data) + begin, DType::bf16, staging, DType::f32,
          size_t(len));
  return staging;
}

// Stores staged f32 values back into a bf16 role (an f32 role was updated in place).
void store_role(const StoredRole& r, const float* values, int64_t begin, int64_t len,
                const StoreRounding& rounding) {
  if (r.dtype == DType::f32) return;
  uint16_t* dst = static_cast<uint16_t*>(r.data) + begin;
  if (rounding.stochastic)
    f32_to_bf16_stochastic(values, dst, size_t(len), rounding.seed, r.stream, uint64_t(begin));
  else
    convert(values, DType::f32, dst, DType::bf16, size_t(len));
}

// Runs block(slice, stored, begin, end) over [0, n) cut into `slices` equal slices (the
// schema checked that slices divides n), each slice in blocks of kBlock, all blocks in
// parallel when n is large. `stored` holds the block's f32 values of each role (index 0 is
// element `begin`): the roles' own memory when f32, staging when bf16, rounded back after
// the block. The weight copy, if any (an f32 var only), gets each block of var right after
// its update, while it is in cache. A bf16 copy is streamed (it is read only in the next step,
// by then out of cache anyway, and streaming saves reading its lines first: docs/kernels.md,
// "Optimizer weight copies"); f16 goes through convert.
template <size_t Roles, typename Block>
void update_blocks(int64_t n, int64_t slices, const std::array<StoredRole, Roles>& roles,
                   const StoreRounding& rounding, const Tensor* copy, Block block) {
  const int64_t slice_len = n / slices;
  const int64_t blocks_per_slice = (slice_len + kBlock - 1) / kBlock;
  const int64_t blocks = slices * blocks_per_slice;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t slice = b / blocks_per_slice;
    const int64_t begin = slice * slice_len + (b % blocks_per_slice) * kBlock;
    const int64_t end = std::min((slice + 1) * slice_len, begin + kBlock);
    const int64_t len = end - begin;
    float staging[Roles][kBlock];
    std::array<float*, Roles> stored;
    for (size_t r = 0; r < Roles; ++r) stored[r] = load_role(roles[r], begin, len, staging[r]);
    block(slice, stored, begin, end);
    for (size_t r = 0; r < Roles; ++r) store_role(roles[r], stored[r], begin, len, rounding);
    if (!copy) continue;
    if (copy->dtype() == DType::bf16)
      f32_to_bf16_streaming(stored[0], static_cast<uint16_t*>(copy->device_data()) + begin,
                            size_t(len));
    else
      convert(stored[0], DType::f32,
              static_cast<char*>(copy->device_data()) + begin * int64_t(dtype_size(copy->dtype())),
              copy->dtype(), size_t(len));
  }
}

// Variable t's stored roles (the first Roles inputs of its layout) with their streams.
template <size_t Roles>
std::array<StoredRole, Roles> stored_roles(const std::vector<Tensor>& in, const UpdateLayout& l,
                                           int t, uint64_t node_hash, int64_t step) {
  std::array<StoredRole, Roles> roles;
  for (size_t r = 0; r < Roles; ++r) {
    const Tensor& x = in[size_t(l.input(int(r), t))];
    roles[r] = {x.device_data(), x.dtype(), update_stream(node_hash, t, int(r), step)};
  }
  return roles;
}

// The slice count (ops/op.h): lr's size when it is [S], else the per-slice attribute
// vectors' size (checked equal by the schema), else 1.
int64_t slice_count(const Tensor& lr, size_t attr_slices) {
  if (!lr.shape().empty()) return lr.numel();
  return attr_slices > 0 ? int64_t(attr_slices) : 1;
}

// Slice s's value of a hyperparameter: its per-slice vector's, or the scalar for all.
float slice_value(const std::vector<float>& per_slice, float scalar, int64_t s) {
  return per_slice.empty() ? scalar : per_slice[size_t(s)];
}

// Whether the AllFinite flag says a gradient overflowed (skip the update).
bool overflowed(const std::vector<Tensor>& in, const UpdateLayout& l) {
  return l.has_flag && *in[size_t(l.flag())].device_data<float>() == 0.0f;
}

// Variable t's weight copy, if the node has copies.
const Tensor* weight_copy(const std::vector<Tensor>& in, const UpdateLayout& l, int t) {
  return int(in.size()) > l.required() ? &in[size_t(l.copy(t))] : nullptr;
}

// A multi-tensor node (attrs `tensors` > 1) runs each variable in turn with the code of a
// single update, so its results are the bits of separate updates.
class ApplyMomentumKernel : public Kernel {
 public:
  ApplyMomentumKernel(const KernelSpec& spec, ExecContext&)
      : attrs_(attrs_as<MomentumAttrs>(spec.attrs)),
        layout_(update_layout(spec.kind, spec.attrs)),
        node_hash_(fnv1a64(spec.node_name)) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    const UpdateLayout& l = layout_;
    if (overflowed(in, l)) return;
    const Tensor& lr = in[size_t(l.lr())];
    const float* lrs = lr.device_data<float>();
    const bool lr_per_slice = !lr.shape().empty();
    const int64_t slices =
        slice_count(lr, std::max(attrs_.slice_momentum.size(), attrs_.slice_weight_decay.size()));
    const StoreRounding rounding{attrs_.stochastic_rounding, ctx.seed};
    for (int t = 0; t < l.tensors; ++t) {
      const float* grad = in[size_t(l.input(2, t))].device_data<float>();
      update_blocks(
          in[size_t(l.input(0, t))].numel(), slices,
          stored_roles<2>(in, l, t, node_hash_, ctx.step), rounding, weight_copy(in, l, t),
          [&](int64_t s, const std::array<float*, 2>& stored, int64_t begin, int64_t end) {
            const float lr_s = lrs[lr_per_slice ? s : 0];
            const float mu = slice_value(attrs_.slice_momentum, attrs_.momentum, s);
            const float wd = slice_value(attrs_.slice_weight_decay, attrs_.weight_decay, s);
            const MomentumBlock p{stored[0], stored[1], grad + begin,   lr_s,
                                  mu,        wd,        attrs_.nesterov};
            momentum_block(p, 0, end - begin);
          });
    }
  }

 private:
  MomentumAttrs attrs_;
  UpdateLayout layout_;
  uint64_t node_hash_;
};

class ApplyAdamKernel : public Kernel {
 public:
  ApplyAdamKernel(const KernelSpec& spec, ExecContext&)
      : attrs_(attrs_as<AdamAttrs>(spec.attrs)),
        layout_(update_layout(spec.kind, spec.attrs)),
        node_name_(spec.node_name),
        node_hash_(fnv1a64(spec.node_name)) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    const UpdateLayout& l = layout_;
    if (overflowed(in, l)) return;
    const Tensor& lr = in[size_t(l.lr())];
    const float* lrs = lr.device_data<float>();
    const bool lr_per_slice = !lr.shape().empty();
    const double t = *in[size_t(l.lr() + 1)].device_data<float>();
    CAMPO_CHECK(t >= 1.0, "ApplyAdam '", node_name_, "': step must be >= 1 (1-based), got ", t);
    const float b1 = attrs_.beta1, b2 = attrs_.beta2, eps = attrs_.epsilon;
    const double bc1 = 1.0 - std::pow(double(b1), t);
    const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(b2), t)));
    const int64_t slices = slice_count(lr, attrs_.slice_weight_decay.size());
    const StoreRounding rounding{attrs_.stochastic_rounding, ctx.seed};
    for (int j = 0; j < l.tensors; ++j) {
      const float* grad = in[size_t(l.input(3, j))].device_data<float>();
      update_blocks(
          in[size_t(l.input(0, j))].numel(), slices,
          stored_roles<3>(in, l, j, node_hash_, ctx.step), rounding, weight_copy(in, l, j),
          [&](int64_t s, const std::array<float*, 3>& stored, int64_t begin, int64_t end) {
            const float step_size = float(double(lrs[lr_per_slice ? s : 0]) / bc1);
            const float wd = slice_value(attrs_.slice_weight_decay, attrs_.weight_decay, s);
            const AdamBlock p{stored[0], stored[1], stored[2], grad + begin, step_size,
                              bc2_sqrt,  b1,        b2,        eps,          wd};
            adam_block(p, 0, end - begin);
          });
    }
  }

 private:
  AdamAttrs attrs_;
  UpdateLayout layout_;
  std::string node_name_;
  uint64_t node_hash_;
};

std::unique_ptr<Kernel> make_momentum(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ApplyMomentumKernel>(spec, ctx);
}
std::unique_ptr<Kernel> make_adam(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<ApplyAdamKernel>(spec, ctx);
}

KernelRegistrar momentum_f32(OpKind::ApplyMomentum, Device::cpu, DType::f32, make_momentum);
KernelRegistrar adam_f32(OpKind::ApplyAdam, Device::cpu, DType::f32, make_adam);

}  // namespace
}  // namespace campo
