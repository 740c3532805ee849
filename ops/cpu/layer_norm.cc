// CPU kernels of LayerNorm / LayerNormGrad: plain loops over rows. Data is viewed as
// [R, C] (C = the last axis, R = the product of the others); a row's sums run in f32 lanes
// widened to double (two passes: mean, then centred squares, so a large mean does not
// cancel). Templated on the data type T of x, y, dy, dx (float, or bfloat16 from
// ops/cpu/low_precision.h) with f32 math; scale, offset, dscale, doffset and the
// statistics are f32 for every T (the schema's fp32_inputs). f16 is emulated.
//
// oneDNN's layer_normalization is not used: it reports the variance, not inv_std, and its
// backward would need a second pass for that; these loops read x once per pass and fuse
// dscale / doffset into the dx pass.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

struct LnDims {
  int64_t rows = 0, c = 0;
};

LnDims ln_dims(const Shape& x) {
  LnDims d;
  d.c = x.back();
  d.rows = d.c == 0 ? 0 : shape_numel(x) / d.c;
  return d;
}

// Work below this many elements runs on one thread.
constexpr int64_t kParallelElements = int64_t(1) << 15;

// Per row r:  mean = sum(x) / C,  var = sum((x - mean)^2) / C,  inv_std = 1 / sqrt(var + eps)
//             y = (x - mean) * inv_std * scale + offset
template <typename T>
class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(const KernelSpec& spec)
      : eps_(attrs_as<LayerNormAttrs>(spec.attrs).epsilon), dims_(ln_dims(spec.inputs[0].shape)) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].device_data());
    const float* scale = in[1].device_data<float>();
    const float* offset = in[2].device_data<float>();
    T* y = static_cast<T*>(out[0].device_data());
    float* mean_out = out[1].device_data<float>();
    float* inv_std_out = out[2].device_data<float>();
    const int64_t c = dims_.c;
    const double eps = eps_;
    parallel_for<T>(dims_.rows, dims_.rows * c >= kParallelElements, [=](int64_t r) {
      const T* xr = x + r * c;
      T* yr = y + r * c;
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < c; ++i) s += double(float(xr[i]));
      const float mean = float(s / double(c));
      double sq = 0.0;
#pragma omp simd reduction(+ : sq)
      for (int64_t i = 0; i < c; ++i) {
        const float v = float(xr[i]) - mean;
        sq += double(v * v);
      }
      const float inv_std = float(1.0 / std::sqrt(sq / double(c) + eps));
      mean_out[r] = mean;
      inv_std_out[r] = inv_std;
#pragma omp simd
      for (int64_t i = 0; i < c; ++i)
        yr[i] = (float(xr[i]) - mean) * inv_std * scale[i] + offset[i];
    });
  }

 private:
  float eps_;
  LnDims dims_;
};

// With xhat = (x - mean) * inv_std and g = dy * scale, per row (sums over its C values):
//   dx = inv_std * (g - sum(g) / C - xhat * sum(g * xhat) / C)
// and over all rows:  dscale = sum(dy * xhat),  doffset = sum(dy).
// Rows are split into at most kChunks fixed chunks (not one per thread, so the sums do not
// depend on the thread count); each chunk sums dscale / doffset into its own double row of
// a buffer sized at construction, and the chunks' rows are added in chunk order.
template <typename T>
class LayerNormGradKernel final : public Kernel {
 public:
  explicit LayerNormGradKernel(const KernelSpec& spec)
      : dims_(ln_dims(spec.inputs[1].shape)),
        chunks_(std::min<int64_t>(kChunks, dims_.rows)),
        partial_(size_t(2 * chunks_ * dims_.c)) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].device_data());
    const T* x = static_cast<const T*>(in[1].device_data());
    const float* scale = in[2].device_data<float>();
    const float* mean_in = in[3].device_data<float>();
    const float* inv_std_in = in[4].device_data<float>();
    T* dx = static_cast<T*>(out[0].device_data());
    float* dscale = out[1].device_data<float>();
    float* doffset = out[2].device_data<float>();
    const int64_t c = dims_.c, rows = dims_.rows, chunks = chunks_;
    double* partial = partial_.data();
    parallel_for<T>(chunks, rows * c >= kParallelElements, [=](int64_t k) {
      double* ds = partial + 2 * k * c;
      double* db = ds + c;
      for (int64_t i = 0; i < c; ++i) ds[i] = db[i] = 0.0;
      for (int64_t r = rows * k / chunks; r < rows * (k + 1) / chunks; ++r) {
        const T* dyr = dy + r * c;
        const T* xr = x + r * c;
        T* dxr = dx + r * c;
        const float mean = mean_in[r], inv_std = inv_std_in[r];
        double sum_g = 0.0, sum_gx = 0.0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int64_t i = 0; i < c; ++i) {
          const float g = float(dyr[i]) * scale[i];
          const float xhat = (float(xr[i]) - mean) * inv_std;
          sum_g += double(g);
          sum_gx += double(g * xhat);
        }
        const float mean_g = float(sum_g / double(c)), mean_gx = float(sum_gx / double(c));
#pragma omp simd
        for (int64_t i = 0; i < c; ++i) {
          const float d = float(dyr[i]);
          const float xhat = (float(xr[i]) - mean) * inv_std;
          dxr[i] = inv_std * (d * scale[i] - mean_g - xhat * mean_gx);
          ds[i] += double(d * xhat);
          db[i] += double(d);
        }
      }
    });
    for (int64_t i = 0; i < c; ++i) {
      double s = 0.0, b = 0.0;
      for (int64_t k = 0; k < chunks; ++k) {
        s += partial[2 * k * c + i];
        b += partial[(2 * k + 1) * c + i];
      }
      dscale[i] = float(s);
      doffset[i] = float(b);
    }
  }

 private:
  static constexpr int64_t kChunks = 64;
  LnDims dims_;
  int64_t chunks_;
  std::vector<double> partial_;  // [chunks][2][C]: dscale and doffset sums per chunk
};

template <template <typename> class K, typename T>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext&) {
  return std::make_unique<K<T>>(spec);
}

KernelRegistrar layer_norm_f32(OpKind::LayerNorm, Device::cpu, DType::f32,
                               make<LayerNormKernel, float>);
KernelRegistrar layer_norm_grad_f32(OpKind::LayerNormGrad, Device::cpu, DType::f32,
                                    make<LayerNormGradKernel, float>);
KernelRegistrar layer_norm_bf16(OpKind::LayerNorm, Device::cpu, DType::bf16,
                                native_bf16_loops<make<LayerNormKernel, bfloat16>>);
KernelRegistrar layer_norm_grad_bf16(OpKind::LayerNormGrad, Device::cpu, DType::bf16,
                                     native_bf16_loops<make<LayerNormGradKernel, bfloat16>>);

}  // namespace
}  // namespace campo
