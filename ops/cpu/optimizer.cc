// CPU kernels of the optimizer updates (f32, in place on var and state; PyTorch semantics):
//  ApplyMomentum {var, accum, grad, lr}:
//    g = grad + wd var; accum = mu accum + g; var -= lr (nesterov ? g + mu accum : accum)
//  ApplyAdam {var, m, v, grad, lr, step}:
//    g = grad + wd var; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//    var -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//  Bias corrections are computed in double once per step, as PyTorch does in Python floats.
// With a weight copy (the optional last input, f16/bf16), each block of var is converted
// into it right after its update, while it is still in cache: the same rounding as Cast
// (campo::convert), without a separate pass over the weights.
#include <algorithm>
#include <cmath>

#include "ops/kernel.h"

namespace campo {
namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;
constexpr int64_t kBlock = 4096;  // elements updated, then converted into the copy

// Runs update(begin, end) over [0, n) in blocks (in parallel when n is large), converting
// each updated block of var into `copy` when there is one.
template <typename Update>
void update_blocks(int64_t n, const float* var, const Tensor* copy, Update update) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= kParallelElements)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
    update(begin, end);
    if (copy)
      convert(var + begin, DType::f32,
              static_cast<char*>(copy->data()) + begin * int64_t(dtype_size(copy->dtype())),
              copy->dtype(), size_t(end - begin));
  }
}

// The weight copy input, if the node has one.
const Tensor* weight_copy(const std::vector<Tensor>& in, size_t required) {
  return in.size() > required ? &in[required] : nullptr;
}

class ApplyMomentumKernel : public Kernel {
 public:
  ApplyMomentumKernel(const KernelSpec& spec, CpuContext&)
      : attrs_(attrs_as<MomentumAttrs>(spec.attrs)) {}
  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    float* var = in[0].data_as<float>();
    float* accum = in[1].data_as<float>();
    const float* grad = in[2].data_as<float>();
    const float lr = *in[3].data_as<float>();
    const float mu = attrs_.momentum, wd = attrs_.weight_decay;
    const int64_t n = in[0].numel();
    const bool nesterov = attrs_.nesterov;
    update_blocks(n, var, weight_copy(in, 4), [&](int64_t begin, int64_t end) {
      if (nesterov) {
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
    });
  }

 private:
  MomentumAttrs attrs_;
};

class ApplyAdamKernel : public Kernel {
 public:
  ApplyAdamKernel(const KernelSpec& spec, CpuContext&)
      : attrs_(attrs_as<AdamAttrs>(spec.attrs)), node_name_(spec.node_name) {}
  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>&) override {
    float* var = in[0].data_as<float>();
    float* m = in[1].data_as<float>();
    float* v = in[2].data_as<float>();
    const float* grad = in[3].data_as<float>();
    const double lr = *in[4].data_as<float>();
    const double t = *in[5].data_as<float>();
    CAMPO_CHECK(t >= 1.0, "ApplyAdam '", node_name_, "': step must be >= 1 (1-based), got ", t);
    const float b1 = attrs_.beta1, b2 = attrs_.beta2, eps = attrs_.epsilon;
    const float wd = attrs_.weight_decay;
    const float step_size = float(lr / (1.0 - std::pow(double(b1), t)));
    const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(b2), t)));
    const int64_t n = in[0].numel();
    update_blocks(n, var, weight_copy(in, 6), [&](int64_t begin, int64_t end) {
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float g = grad[i] + wd * var[i];
        const float mi = b1 * m[i] + (1.0f - b1) * g;
        const float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        var[i] -= step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
      }
    });
  }

 private:
  AdamAttrs attrs_;
  std::string node_name_;
};

std::unique_ptr<Kernel> make_momentum(const KernelSpec& spec, CpuContext& ctx) {
  return std::make_unique<ApplyMomentumKernel>(spec, ctx);
}
std::unique_ptr<Kernel> make_adam(const KernelSpec& spec, CpuContext& ctx) {
  return std::make_unique<ApplyAdamKernel>(spec, ctx);
}

KernelRegistrar momentum_f32(OpKind::ApplyMomentum, Device::cpu, DType::f32, make_momentum);
KernelRegistrar adam_f32(OpKind::ApplyAdam, Device::cpu, DType::f32, make_adam);

}  // namespace
}  // namespace campo
