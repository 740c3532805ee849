// CPU kernels of BiasAdd and BiasAddGrad on [N, C, S...] tensors, S = product of the axes
// after 1 (1 for [N, C]). Plain loops; f32 only for now (a bf16/f16 variant would load and
// store through the dtype conversions and accumulate in f32).
#include <algorithm>

#include "ops/kernel.h"

namespace campo {
namespace {

// Splits a shape [N, C, ...] into outer N, channels C and inner S.
struct ChannelView {
  int64_t outer, channels, inner;
  explicit ChannelView(const Shape& s)
      : outer(s[0]), channels(s[1]), inner(shape_numel(s) / std::max<int64_t>(1, s[0] * s[1])) {}
};

// y[n, c, s] = x[n, c, s] + bias[c]
class BiasAddKernel : public Kernel {
 public:
  explicit BiasAddKernel(const KernelSpec& spec) : v_(spec.inputs[0].shape) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const float* x = in[0].data_as<float>();
    const float* bias = in[1].data_as<float>();
    float* y = out[0].data_as<float>();
    const int64_t C = v_.channels, S = v_.inner, rows = v_.outer * C;
    if (S == 1) {  // [N, C]: rows are examples, parallel over N
#pragma omp parallel for if (rows > 4096)
      for (int64_t n = 0; n < v_.outer; ++n)
        for (int64_t c = 0; c < C; ++c) y[n * C + c] = x[n * C + c] + bias[c];
      return;
    }
#pragma omp parallel for if (rows * S > 4096)
    for (int64_t r = 0; r < rows; ++r) {
      const float b = bias[r % C];
      const float* xr = x + r * S;
      float* yr = y + r * S;
      for (int64_t s = 0; s < S; ++s) yr[s] = xr[s] + b;
    }
  }

 private:
  ChannelView v_;
};

// dbias[c] = sum_{n, s} dy[n, c, s], accumulated in double.
class BiasAddGradKernel : public Kernel {
 public:
  explicit BiasAddGradKernel(const KernelSpec& spec) : v_(spec.inputs[0].shape) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const float* dy = in[0].data_as<float>();
    float* db = out[0].data_as<float>();
    const int64_t N = v_.outer, C = v_.channels, S = v_.inner;
#pragma omp parallel for if (N * C * S > 4096)
    for (int64_t c = 0; c < C; ++c) {
      double total = 0;
      for (int64_t n = 0; n < N; ++n) {
        const float* row = dy + (n * C + c) * S;
        float partial = 0;  // one row (at most H*W values) in f32, vectorizable
        for (int64_t s = 0; s < S; ++s) partial += row[s];
        total += partial;
      }
      db[c] = float(total);
    }
  }

 private:
  ChannelView v_;
};

std::unique_ptr<Kernel> make_bias_add(const KernelSpec& spec, CpuContext&) {
  return std::make_unique<BiasAddKernel>(spec);
}
std::unique_ptr<Kernel> make_bias_add_grad(const KernelSpec& spec, CpuContext&) {
  return std::make_unique<BiasAddGradKernel>(spec);
}

KernelRegistrar bias_add_f32(OpKind::BiasAdd, Device::cpu, DType::f32, make_bias_add);
KernelRegistrar bias_add_grad_f32(OpKind::BiasAddGrad, Device::cpu, DType::f32, make_bias_add_grad);

}  // namespace
}  // namespace campo
