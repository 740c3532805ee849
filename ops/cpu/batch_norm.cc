// CPU kernels of FusedBatchNorm / FusedBatchNormGrad: plain loops, parallel over channels.
// Data is viewed as [N, C, S] (S = H * W, or 1 for [N, C]); per-channel sums run over the
// M = N * S values of a channel, each plane summed in f32 SIMD lanes and the planes in
// double. Statistics use two passes (mean, then centred squares), so large means do not
// cancel.
// 4-D data may also be blocked nChw8c or nChw16c (TensorDesc::layout, chosen by
// graph/layout.h; x, y, dy and dx then all are): with block B, channel c = B cb + ci of
// sample n lives at [n][cb][s][ci], so a block is B adjacent channels, each plane [S, B] is
// summed in B f32 lanes (one per channel) and the planes in double, as for plain data. The
// loops are templated on B (0: plain).
//
// oneDNN's batch_normalization is not used: these loops are faster on nchw data
// (docs/kernels.md, "Batch norm"), and the running-statistics update (PyTorch's, with the
// unbiased variance) would be our own code with oneDNN too.
//
// Templates on the data type T of x, y, dy, dx (float, or bfloat16 from
// ops/cpu/low_precision.h) with f32 math; scale, offset and every statistic are f32 for
// every T (the schema's fp32_inputs), and the running statistics are updated in place. f16
// is emulated.
#include <algorithm>
#include <cmath>

#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

struct BnDims {
  int64_t n = 0, c = 0, s = 0;
  int cblock = 0;                          // channel_block of the layout; 0: plain
  int64_t count() const { return n * s; }  // M: values per channel
};

BnDims bn_dims(const TensorDesc& x) {
  BnDims d;
  d.n = x.shape[0];
  d.c = x.shape[1];
  d.s = x.shape.size() == 4 ? x.shape[2] * x.shape[3] : 1;
  d.cblock = checked_channel_block(x, "batch norm");
  return d;
}

// Blocked by B: the offset of block c0 / B's plane [S, B] of sample n.
template <int B>
int64_t blocked_plane(const BnDims& d, int64_t n, int64_t c0) {
  return (n * (d.c / B) + c0 / B) * d.s * B;
}

// Work is split into blocks of channels [c0, c0 + nc). With planes (S > 1) a block is one
// channel and the inner loops run along a plane. Without (S == 1, [N, C] data) a block is
// kRowBlock adjacent channels and the inner loops run along a row, so memory is read
// contiguously instead of with a stride of C.
constexpr int64_t kRowBlock = 64;

int64_t block_size(const BnDims& d) { return d.cblock ? d.cblock : d.s == 1 ? kRowBlock : 1; }

// sums[k] = sum of channel c0 + k's values.
template <int B, typename T>
void block_sums(const T* x, const BnDims& d, int64_t c0, int64_t nc, double* sums) {
  for (int64_t k = 0; k < nc; ++k) sums[k] = 0.0;
  for (int64_t n = 0; n < d.n; ++n) {
    if constexpr (B > 0) {
      const T* p = x + blocked_plane<B>(d, n, c0);
      float s[B] = {};
      for (int64_t i = 0; i < d.s; ++i)
#pragma omp simd
        for (int64_t k = 0; k < B; ++k) s[k] += float(p[i * B + k]);
      for (int64_t k = 0; k < B; ++k) sums[k] += s[k];
      continue;
    }
    if (d.s == 1) {
      const T* row = x + n * d.c + c0;
#pragma omp simd
      for (int64_t k = 0; k < nc; ++k) sums[k] += double(row[k]);
      continue;
    }
    for (int64_t k = 0; k < nc; ++k) {
      const T* p = x + (n * d.c + c0 + k) * d.s;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < d.s; ++i) s += float(p[i]);
      sums[k] += s;
    }
  }
}

// sums[k] = sum over channel c0 + k of (x - mean[k])^2.
template <int B, typename T>
void block_centred_squares(const T* x, const BnDims& d, int64_t c0, int64_t nc, const float* mean,
                           double* sums) {
  for (int64_t k = 0; k < nc; ++k) sums[k] = 0.0;
  for (int64_t n = 0; n < d.n; ++n) {
    if constexpr (B > 0) {
      const T* p = x + blocked_plane<B>(d, n, c0);
      float s[B] = {};
      for (int64_t i = 0; i < d.s; ++i)
#pragma omp simd
        for (int64_t k = 0; k < B; ++k) {
          const float v = float(p[i * B + k]) - mean[k];
          s[k] += v * v;
        }
      for (int64_t k = 0; k < B; ++k) sums[k] += s[k];
      continue;
    }
    if (d.s == 1) {
      const T* row = x + n * d.c + c0;
#pragma omp simd
      for (int64_t k = 0; k < nc; ++k) {
        const float v = float(row[k]) - mean[k];
        sums[k] += double(v * v);
      }
      continue;
    }
    for (int64_t k = 0; k < nc; ++k) {
      const T* p = x + (n * d.c + c0 + k) * d.s;
      const float mu = mean[k];
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < d.s; ++i) {
        const float v = float(p[i]) - mu;
        s += v * v;
      }
      sums[k] += s;
    }
  }
}

// y = x * a[k] + b[k] over channel c0 + k.
template <int B, typename T>
void block_affine(const T* x, T* y, const BnDims& d, int64_t c0, int64_t nc, const float* a,
                  const float* b) {
  for (int64_t n = 0; n < d.n; ++n) {
    if constexpr (B > 0) {
      const int64_t base = blocked_plane<B>(d, n, c0);
      for (int64_t i = 0; i < d.s; ++i) {
        const int64_t row = base + i * B;
#pragma omp simd
        for (int64_t k = 0; k < B; ++k) y[row + k] = float(x[row + k]) * a[k] + b[k];
      }
      continue;
    }
    if (d.s == 1) {
      const int64_t base = n * d.c + c0;
#pragma omp simd
      for (int64_t k = 0; k < nc; ++k) y[base + k] = float(x[base + k]) * a[k] + b[k];
      continue;
    }
    for (int64_t k = 0; k < nc; ++k) {
      const int64_t base = (n * d.c + c0 + k) * d.s;
      const float ak = a[k], bk = b[k];
#pragma omp simd
      for (int64_t i = 0; i < d.s; ++i) y[base + i] = float(x[base + i]) * ak + bk;
    }
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
      : attrs_(std::get<BatchNormAttrs>(spec.attrs)), dims_(bn_dims(spec.inputs[0])) {
    CAMPO_CHECK(spec.outputs[0].layout == spec.inputs[0].layout, "internal: FusedBatchNorm '",
                spec.node_name, "' writes y in another layout than x");
  }

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].device_data());
    const float* scale = in[1].device_data<float>();
    const float* offset = in[2].device_data<float>();
    float* running_mean = in[3].device_data<float>();
    float* running_var = in[4].device_data<float>();
    T* y = static_cast<T*>(out[0].device_data());
    float* mean_out = out[1].device_data<float>();
    float* inv_std_out = out[2].device_data<float>();
    const BnDims d = dims_;
    const double m = double(d.count());
    const double eps = attrs_.epsilon;
    const double momentum = attrs_.momentum;
    const bool is_training = attrs_.is_training;
    const int64_t block = block_size(d);
    const int64_t num_blocks = (d.c + block - 1) / block;

    with_channel_block(d.cblock, [&]<int B>() {
      parallel_for<T>(num_blocks, true, [=](int64_t bi) {
        const int64_t c0 = bi * block, nc = std::min(block, d.c - c0);
        double sums[kRowBlock];
        float mean[kRowBlock], a[kRowBlock], b[kRowBlock];
        if (is_training) {
          block_sums<B>(x, d, c0, nc, sums);
          for (int64_t k = 0; k < nc; ++k) mean[k] = float(sums[k] / m);
          block_centred_squares<B>(x, d, c0, nc, mean, sums);
        }
        for (int64_t k = 0; k < nc; ++k) {
          const int64_t c = c0 + k;
          double inv_std;
          if (is_training) {
            const double var = sums[k] / m;
            inv_std = 1.0 / std::sqrt(var + eps);
            running_mean[c] = float((1.0 - momentum) * running_mean[c] + momentum * mean[k]);
            running_var[c] =
                float((1.0 - momentum) * running_var[c] + momentum * var * m / (m - 1.0));
          } else {
            mean[k] = running_mean[c];
            inv_std = 1.0 / std::sqrt(double(running_var[c]) + eps);
          }
          mean_out[c] = mean[k];
          inv_std_out[c] = float(inv_std);
          const double ak = double(scale[c]) * inv_std;
          a[k] = float(ak);
          b[k] = float(double(offset[c]) - double(mean[k]) * ak);
        }
        block_affine<B>(x, y, d, c0, nc, a, b);
      });
    });
  }

 private:
  BatchNormAttrs attrs_;
  BnDims dims_;
};

// sum_dy[k] = sum dy,  sum_dy_xmu[k] = sum dy * (x - mean[k]) over channel c0 + k.
template <int B, typename T>
void block_grad_sums(const T* dy, const T* x, const BnDims& d, int64_t c0, int64_t nc,
                     const float* mean, double* sum_dy, double* sum_dy_xmu) {
  for (int64_t k = 0; k < nc; ++k) sum_dy[k] = sum_dy_xmu[k] = 0.0;
  for (int64_t n = 0; n < d.n; ++n) {
    if constexpr (B > 0) {
      const int64_t base = blocked_plane<B>(d, n, c0);
      float s0[B] = {}, s1[B] = {};
      for (int64_t i = 0; i < d.s; ++i) {
        const int64_t row = base + i * B;
#pragma omp simd
        for (int64_t k = 0; k < B; ++k) {
          const float g = float(dy[row + k]);
          s0[k] += g;
          s1[k] += g * (float(x[row + k]) - mean[k]);
        }
      }
      for (int64_t k = 0; k < B; ++k) {
        sum_dy[k] += s0[k];
        sum_dy_xmu[k] += s1[k];
      }
      continue;
    }
    if (d.s == 1) {
      const int64_t base = n * d.c + c0;
#pragma omp simd
      for (int64_t k = 0; k < nc; ++k) {
        const float g = float(dy[base + k]);
        sum_dy[k] += double(g);
        sum_dy_xmu[k] += double(g * (float(x[base + k]) - mean[k]));
      }
      continue;
    }
    for (int64_t k = 0; k < nc; ++k) {
      const int64_t base = (n * d.c + c0 + k) * d.s;
      const float mu = mean[k];
      float s0 = 0.0f, s1 = 0.0f;
#pragma omp simd reduction(+ : s0, s1)
      for (int64_t i = 0; i < d.s; ++i) {
        const float g = float(dy[base + i]);
        s0 += g;
        s1 += g * (float(x[base + i]) - mu);
      }
      sum_dy[k] += s0;
      sum_dy_xmu[k] += s1;
    }
  }
}

// dx = a[k] * dy + b[k] * (x - mean[k]) + e[k] over channel c0 + k.
template <int B, typename T>
void block_grad_apply(const T* dy, const T* x, T* dx, const BnDims& d, int64_t c0, int64_t nc,
                      const float* mean, const float* a, const float* b, const float* e) {
  for (int64_t n = 0; n < d.n; ++n) {
    if constexpr (B > 0) {
      const int64_t base = blocked_plane<B>(d, n, c0);
      for (int64_t i = 0; i < d.s; ++i) {
        const int64_t row = base + i * B;
#pragma omp simd
        for (int64_t k = 0; k < B; ++k)
          dx[row + k] = a[k] * float(dy[row + k]) + b[k] * (float(x[row + k]) - mean[k]) + e[k];
      }
      continue;
    }
    if (d.s == 1) {
      const int64_t base = n * d.c + c0;
#pragma omp simd
      for (int64_t k = 0; k < nc; ++k)
        dx[base + k] = a[k] * float(dy[base + k]) + b[k] * (float(x[base + k]) - mean[k]) + e[k];
      continue;
    }
    for (int64_t k = 0; k < nc; ++k) {
      const int64_t base = (n * d.c + c0 + k) * d.s;
      const float ak = a[k], bk = b[k], ek = e[k], mu = mean[k];
#pragma omp simd
      for (int64_t i = 0; i < d.s; ++i)
        dx[base + i] = ak * float(dy[base + i]) + bk * (float(x[base + i]) - mu) + ek;
    }
  }
}

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
      : attrs_(std::get<BatchNormAttrs>(spec.attrs)), dims_(bn_dims(spec.inputs[1])) {
    CAMPO_CHECK(spec.inputs[0].layout == spec.inputs[1].layout &&
                    spec.outputs[0].layout == spec.inputs[1].layout,
                "internal: FusedBatchNormGrad '", spec.node_name,
                "' has dy, x and dx in different layouts");
  }

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].device_data());
    const T* x = static_cast<const T*>(in[1].device_data());
    const float* scale = in[2].device_data<float>();
    const float* mean_in = in[3].device_data<float>();
    const float* inv_std_in = in[4].device_data<float>();
    T* dx = static_cast<T*>(out[0].device_data());
    float* dscale = out[1].device_data<float>();
    float* doffset = out[2].device_data<float>();
    const BnDims d = dims_;
    const double m = double(d.count());
    const bool is_training = attrs_.is_training;
    const int64_t block = block_size(d);
    const int64_t num_blocks = (d.c + block - 1) / block;

    with_channel_block(d.cblock, [&]<int B>() {
      parallel_for<T>(num_blocks, true, [=](int64_t bi) {
        const int64_t c0 = bi * block, nc = std::min(block, d.c - c0);
        double sum_dy[kRowBlock], sum_dy_xmu[kRowBlock];
        block_grad_sums<B>(dy, x, d, c0, nc, mean_in + c0, sum_dy, sum_dy_xmu);
        // dx = a * dy + b * (x - mean) + e
        float a[kRowBlock], b[kRowBlock], e[kRowBlock];
        for (int64_t k = 0; k < nc; ++k) {
          const int64_t c = c0 + k;
          const double inv_std = inv_std_in[c];
          const double ak = double(scale[c]) * inv_std;
          dscale[c] = float(sum_dy_xmu[k] * inv_std);
          doffset[c] = float(sum_dy[k]);
          a[k] = float(ak);
          b[k] = is_training ? float(-ak * inv_std * inv_std * sum_dy_xmu[k] / m) : 0.0f;
          e[k] = is_training ? float(-ak * sum_dy[k] / m) : 0.0f;
        }
        block_grad_apply<B>(dy, x, dx, d, c0, nc, mean_in + c0, a, b, e);
      });
    });
  }

 private:
  BatchNormAttrs attrs_;
  BnDims dims_;
};

template <template <typename> class K, typename T>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext&) {
  return std::make_unique<K<T>>(spec);
}

KernelRegistrar batch_norm_f32(OpKind::FusedBatchNorm, Device::cpu, DType::f32,
                               make<BatchNormKernel, float>);
KernelRegistrar batch_norm_grad_f32(OpKind::FusedBatchNormGrad, Device::cpu, DType::f32,
                                    make<BatchNormGradKernel, float>);
KernelRegistrar batch_norm_bf16(OpKind::FusedBatchNorm, Device::cpu, DType::bf16,
                                native_bf16_loops<make<BatchNormKernel, bfloat16>>);
KernelRegistrar batch_norm_grad_bf16(OpKind::FusedBatchNormGrad, Device::cpu, DType::bf16,
                                     native_bf16_loops<make<BatchNormGradKernel, bfloat16>>);

}  // namespace
}  // namespace campo
