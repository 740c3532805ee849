// CPU kernels of FusedBatchNorm / FusedBatchNormGrad: plain loops, parallel over channels.
// Data is viewed as [N, C, S] (S = H * W, or 1 for [N, C]); per-channel sums run over the
// M = N * S values of a channel, each plane summed in f32 SIMD lanes and the planes in
// double. Statistics use two passes (mean, then centred squares), so large means do not
// cancel. Measured against oneDNN's batch_normalization (2.6, f32, nchw) on ResNet-50
// shapes these loops were as fast or faster forward and backward, and they give the
// running-statistics update (PyTorch's, with the unbiased variance) for free.
//
// Templates on the data type T (float here) with f32 math, so bf16/f16 kernels are an
// instantiation plus a conversion, not a rewrite.
#include <cmath>

#include "ops/kernel.h"

namespace campo {
namespace {

struct BnDims {
  int64_t n = 0, c = 0, s = 0;
  int64_t count() const { return n * s; }  // M: values per channel
};

BnDims bn_dims(const Shape& x) {
  BnDims d;
  d.n = x[0];
  d.c = x[1];
  d.s = x.size() == 4 ? x[2] * x[3] : 1;
  return d;
}

// sum over the channel's values of x.
template <typename T>
double channel_sum(const T* x, const BnDims& d, int64_t c) {
  double total = 0.0;
  for (int64_t n = 0; n < d.n; ++n) {
    const T* p = x + (n * d.c + c) * d.s;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d.s; ++i) s += float(p[i]);
    total += s;
  }
  return total;
}

// sum over the channel's values of (x - mean)^2.
template <typename T>
double channel_centred_squares(const T* x, const BnDims& d, int64_t c, float mean) {
  double total = 0.0;
  for (int64_t n = 0; n < d.n; ++n) {
    const T* p = x + (n * d.c + c) * d.s;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < d.s; ++i) {
      const float v = float(p[i]) - mean;
      s += v * v;
    }
    total += s;
  }
  return total;
}

// y = x * a + b over the channel's values.
template <typename T>
void channel_affine(const T* x, T* y, const BnDims& d, int64_t c, float a, float b) {
  for (int64_t n = 0; n < d.n; ++n) {
    const int64_t base = (n * d.c + c) * d.s;
    const T* p = x + base;
    T* q = y + base;
#pragma omp simd
    for (int64_t i = 0; i < d.s; ++i) q[i] = T(float(p[i]) * a + b);
  }
}

// Training:  mean = sum(x) / M,  var = sum((x - mean)^2) / M,  inv_std = 1 / sqrt(var + eps)
//            y = scale * (x - mean) * inv_std + offset
//            running_mean = (1 - momentum) * running_mean + momentum * mean
//            running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)
// Inference: the same y with mean = running_mean, inv_std = 1 / sqrt(running_var + eps);
//            outputs 1 and 2 report those.
template <typename T>
class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const KernelSpec& spec)
      : attrs_(std::get<BatchNormAttrs>(spec.attrs)), dims_(bn_dims(spec.inputs[0].shape)) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].data());
    const float* scale = in[1].data_as<float>();
    const float* offset = in[2].data_as<float>();
    float* running_mean = in[3].data_as<float>();
    float* running_var = in[4].data_as<float>();
    T* y = static_cast<T*>(out[0].data());
    float* mean_out = out[1].data_as<float>();
    float* inv_std_out = out[2].data_as<float>();
    const BnDims d = dims_;
    const double m = double(d.count());
    const double eps = attrs_.epsilon;
    const double momentum = attrs_.momentum;
    const bool is_training = attrs_.is_training;

#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d.c; ++c) {
      double mean, inv_std;
      if (is_training) {
        mean = channel_sum(x, d, c) / m;
        const double var = channel_centred_squares(x, d, c, float(mean)) / m;
        inv_std = 1.0 / std::sqrt(var + eps);
        running_mean[c] = float((1.0 - momentum) * running_mean[c] + momentum * mean);
        running_var[c] = float((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
      } else {
        mean = running_mean[c];
        inv_std = 1.0 / std::sqrt(double(running_var[c]) + eps);
      }
      mean_out[c] = float(mean);
      inv_std_out[c] = float(inv_std);
      const double a = double(scale[c]) * inv_std;
      channel_affine(x, y, d, c, float(a), float(double(offset[c]) - mean * a));
    }
  }

 private:
  BatchNormAttrs attrs_;
  BnDims dims_;
};

// With xhat = (x - mean) * inv_std, sums over the channel's M values:
//   doffset = sum(dy),  dscale = sum(dy * xhat)
// Training (mean and inv_std depend on x):
//   dx = scale * inv_std * (dy - doffset / M - xhat * dscale / M)
// Inference (statistics are constants):
//   dx = scale * inv_std * dy
template <typename T>
class BatchNormGradKernel final : public Kernel {
 public:
  explicit BatchNormGradKernel(const KernelSpec& spec)
      : attrs_(std::get<BatchNormAttrs>(spec.attrs)), dims_(bn_dims(spec.inputs[1].shape)) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].data());
    const T* x = static_cast<const T*>(in[1].data());
    const float* scale = in[2].data_as<float>();
    const float* mean_in = in[3].data_as<float>();
    const float* inv_std_in = in[4].data_as<float>();
    T* dx = static_cast<T*>(out[0].data());
    float* dscale = out[1].data_as<float>();
    float* doffset = out[2].data_as<float>();
    const BnDims d = dims_;
    const double m = double(d.count());
    const bool is_training = attrs_.is_training;

#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < d.c; ++c) {
      const float mean = mean_in[c];
      const double inv_std = inv_std_in[c];
      double sum_dy = 0.0, sum_dy_xmu = 0.0;
      for (int64_t n = 0; n < d.n; ++n) {
        const int64_t base = (n * d.c + c) * d.s;
        float s0 = 0.0f, s1 = 0.0f;
#pragma omp simd reduction(+ : s0, s1)
        for (int64_t i = 0; i < d.s; ++i) {
          const float g = float(dy[base + i]);
          s0 += g;
          s1 += g * (float(x[base + i]) - mean);
        }
        sum_dy += s0;
        sum_dy_xmu += s1;
      }
      const double a = double(scale[c]) * inv_std;
      dscale[c] = float(sum_dy_xmu * inv_std);
      doffset[c] = float(sum_dy);
      // dx = a * dy + b * (x - mean) + k
      const float fa = float(a);
      const float fb = is_training ? float(-a * inv_std * inv_std * sum_dy_xmu / m) : 0.0f;
      const float fk = is_training ? float(-a * sum_dy / m) : 0.0f;
      for (int64_t n = 0; n < d.n; ++n) {
        const int64_t base = (n * d.c + c) * d.s;
#pragma omp simd
        for (int64_t i = 0; i < d.s; ++i)
          dx[base + i] = T(fa * float(dy[base + i]) + fb * (float(x[base + i]) - mean) + fk);
      }
    }
  }

 private:
  BatchNormAttrs attrs_;
  BnDims dims_;
};

std::unique_ptr<Kernel> make_batch_norm_f32(const KernelSpec& spec, CpuContext&) {
  return std::make_unique<BatchNormKernel<float>>(spec);
}
std::unique_ptr<Kernel> make_batch_norm_grad_f32(const KernelSpec& spec, CpuContext&) {
  return std::make_unique<BatchNormGradKernel<float>>(spec);
}

KernelRegistrar batch_norm_f32(OpKind::FusedBatchNorm, Device::cpu, DType::f32,
                               make_batch_norm_f32);
KernelRegistrar batch_norm_grad_f32(OpKind::FusedBatchNormGrad, Device::cpu, DType::f32,
                                    make_batch_norm_grad_f32);

}  // namespace
}  // namespace campo
