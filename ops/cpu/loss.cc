// CPU kernels of the losses (f32). Numerically stable forms:
//  softmax cross entropy per row n: m = max_c x[c], s = sum_c exp(x[c] - m),
//    loss = log(s) + m - x[label], backprop[c] = exp(x[c] - m) / s - (c == label);
//    s accumulates in double; labels are validated before anything is computed. With an
//    ignore_label, a row whose label equals it has loss 0 and backprop 0.
//  sigmoid cross entropy: loss = max(x, 0) - x z + log1p(exp(-|x|)),
//    dX = dloss * (sigmoid(x) - z) with sigmoid(x) = 1 / (1 + e) for x >= 0 and
//    e / (1 + e) otherwise, e = exp(-|x|) (never overflows).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "ops/kernel.h"

namespace campo {
namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<K>(spec, ctx);
}

// inputs {logits [N, C], labels [N] i32}; outputs {loss [N], backprop [N, C]}.
class SparseSoftmaxCrossEntropyKernel : public Kernel {
 public:
  SparseSoftmaxCrossEntropyKernel(const KernelSpec& spec, ExecContext&)
      : node_name_(spec.node_name), ignore_label_(ignore_label_of(spec.attrs)) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const float* logits = in[0].device_data<float>();
    const int32_t* labels = in[1].device_data<int32_t>();
    float* loss = out[0].device_data<float>();
    float* backprop = out[1].device_data<float>();
    const int64_t N = in[0].dim(0), C = in[0].dim(1);
    for (int64_t n = 0; n < N; ++n)
      CAMPO_CHECK(is_ignored(labels[n]) || (labels[n] >= 0 && labels[n] < C),
                  "SparseSoftmaxCrossEntropyWithLogits '", node_name_, "': label ", labels[n],
                  " in row ", n, " is outside [0, ", C, ")",
                  ignore_label_ ? " and is not the ignore_label " : "",
                  ignore_label_ ? std::to_string(*ignore_label_) : "");
#pragma omp parallel for schedule(static) if (N * C >= kParallelElements)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = logits + n * C;
      float* bp = backprop + n * C;
      if (is_ignored(labels[n])) {
        loss[n] = 0.0f;
        std::fill(bp, bp + C, 0.0f);
        continue;
      }
      float m = x[0];
      for (int64_t c = 1; c < C; ++c) m = std::max(m, x[c]);
      double s = 0;
      for (int64_t c = 0; c < C; ++c) {
        bp[c] = std::exp(x[c] - m);
        s += double(bp[c]);
      }
      const int32_t label = labels[n];
      loss[n] = float(std::log(s) + double(m) - double(x[label]));
      const float inv = float(1.0 / s);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) bp[c] *= inv;
      bp[label] -= 1.0f;
    }
  }

 private:
  bool is_ignored(int32_t label) const { return ignore_label_ && label == *ignore_label_; }

  std::string node_name_;
  std::optional<int32_t> ignore_label_;
};

// inputs {x, z}: loss = max(x, 0) - x z + log1p(exp(-|x|)).
class SigmoidCrossEntropyKernel : public Kernel {
 public:
  SigmoidCrossEntropyKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const float* x = in[0].device_data<float>();
    const float* z = in[1].device_data<float>();
    float* loss = out[0].device_data<float>();
    const int64_t n = in[0].numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i)
      loss[i] = std::max(x[i], 0.0f) - x[i] * z[i] + std::log1p(std::exp(-std::fabs(x[i])));
  }
};

// inputs {dloss, x, z}: dX = dloss * (sigmoid(x) - z).
class SigmoidCrossEntropyGradKernel : public Kernel {
 public:
  SigmoidCrossEntropyGradKernel(const KernelSpec&, ExecContext&) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const float* dloss = in[0].device_data<float>();
    const float* x = in[1].device_data<float>();
    const float* z = in[2].device_data<float>();
    float* dx = out[0].device_data<float>();
    const int64_t n = in[0].numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
    for (int64_t i = 0; i < n; ++i) {
      const float e = std::exp(-std::fabs(x[i]));
      const float sigmoid = (x[i] >= 0.0f ? 1.0f : e) / (1.0f + e);
      dx[i] = dloss[i] * (sigmoid - z[i]);
    }
  }
};

KernelRegistrar sparse_softmax_ce_f32(OpKind::SparseSoftmaxCrossEntropyWithLogits, Device::cpu,
                                      DType::f32, make<SparseSoftmaxCrossEntropyKernel>);
KernelRegistrar sigmoid_ce_f32(OpKind::SigmoidCrossEntropyWithLogits, Device::cpu, DType::f32,
                               make<SigmoidCrossEntropyKernel>);
KernelRegistrar sigmoid_ce_grad_f32(OpKind::SigmoidCrossEntropyWithLogitsGrad, Device::cpu,
                                    DType::f32, make<SigmoidCrossEntropyGradKernel>);

}  // namespace
}  // namespace campo
