// CPU kernels of the optimizer updates (f32, in place on var and state; PyTorch semantics):
//  ApplyMomentum {var, accum, grad, lr}:
//    g = grad + wd var; accum = mu accum + g; var -= lr (nesterov ? g + mu accum : accum)
//  ApplyAdam {var, m, v, grad, lr, step}:
//    g = grad + wd var; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//    var -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//  Bias corrections are computed in double once per step, as PyTorch does in Python floats.
#include <cmath>

#include "ops/kernel.h"

namespace campo {
namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;

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
    if (attrs_.nesterov) {
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
      for (int64_t i = 0; i < n; ++i) {
        const float g = grad[i] + wd * var[i];
        const float a = mu * accum[i] + g;
        accum[i] = a;
        var[i] -= lr * (g + mu * a);
      }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
      for (int64_t i = 0; i < n; ++i) {
        const float g = grad[i] + wd * var[i];
        const float a = mu * accum[i] + g;
        accum[i] = a;
        var[i] -= lr * a;
      }
    }
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
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      const float g = grad[i] + wd * var[i];
      const float mi = b1 * m[i] + (1.0f - b1) * g;
      const float vi = b2 * v[i] + (1.0f - b2) * g * g;
      m[i] = mi;
      v[i] = vi;
      var[i] -= step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    }
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
