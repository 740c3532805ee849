// CPU kernels of MaxPool / MaxPoolGrad / AvgPool / AvgPoolGrad: plain loops, parallel over
// the N * C planes (pooling is memory-bound; each plane is independent, so the gradients'
// scatter-adds never race). Window bounds along one axis for output index o:
//   start = o * stride - pad,  rows [max(start, 0), min(start + kernel, H))
// which is never empty (the schema keeps pad <= kernel / 2).
// Global average pooling (window = whole plane, no padding) takes a fast path: one SIMD
// reduction per plane forward, one fill per plane backward.
//
// Templates on the data type T (float here) with f32 math, so bf16/f16 kernels are an
// instantiation plus a conversion, not a rewrite.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/kernel.h"

namespace campo {
namespace {

struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int64_t h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;

  // x: [N, C, H, W], y: [N, C, OH, OW].
  PoolGeometry(const PoolAttrs& a, const Shape& x, const Shape& y)
      : planes(x[0] * x[1]), h(x[2]), w(x[3]), oh(y[2]), ow(y[3]), kh(a.kernel_h),
        kw(a.kernel_w), sh(a.stride_h), sw(a.stride_w), ph(a.pad_h), pw(a.pad_w) {}

  bool is_global() const { return kh == h && kw == w && ph == 0 && pw == 0; }
  int64_t row_begin(int64_t o) const { return std::max<int64_t>(o * sh - ph, 0); }
  int64_t row_end(int64_t o) const { return std::min<int64_t>(o * sh - ph + kh, h); }
  int64_t col_begin(int64_t o) const { return std::max<int64_t>(o * sw - pw, 0); }
  int64_t col_end(int64_t o) const { return std::min<int64_t>(o * sw - pw + kw, w); }
};

// y = max over the window inside the input; argmax = its index in the H * W plane (first
// one on ties, row-major). A NaN in the window wins, so it propagates as in PyTorch.
template <typename T>
class MaxPoolKernel final : public Kernel {
 public:
  explicit MaxPoolKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.inputs[0].shape, spec.outputs[0].shape) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].data());
    T* y = static_cast<T*>(out[0].data());
    int32_t* argmax = out[1].data_as<int32_t>();
    const PoolGeometry g = geo_;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      const T* xp = x + p * g.h * g.w;
      T* yp = y + p * g.oh * g.ow;
      int32_t* ap = argmax + p * g.oh * g.ow;
      for (int64_t i = 0; i < g.oh; ++i) {
        const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
        for (int64_t j = 0; j < g.ow; ++j) {
          const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
          float best = -std::numeric_limits<float>::infinity();
          int64_t best_at = r0 * g.w + c0;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) {
              const float v = float(xp[r * g.w + c]);
              if (v > best || (std::isnan(v) && !std::isnan(best))) {
                best = v;
                best_at = r * g.w + c;
              }
            }
          yp[i * g.ow + j] = T(best);
          ap[i * g.ow + j] = int32_t(best_at);
        }
      }
    }
  }

 private:
  PoolGeometry geo_;
};

// dx[argmax] += dy, plane by plane (windows overlap when stride < kernel).
template <typename T>
class MaxPoolGradKernel final : public Kernel {
 public:
  explicit MaxPoolGradKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.outputs[0].shape, spec.inputs[0].shape) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].data());
    const int32_t* argmax = in[1].data_as<int32_t>();
    T* dx = static_cast<T*>(out[0].data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      T* dxp = dx + p * in_plane;
      const T* dyp = dy + p * out_plane;
      const int32_t* ap = argmax + p * out_plane;
      std::fill(dxp, dxp + in_plane, T(0));
      for (int64_t k = 0; k < out_plane; ++k) dxp[ap[k]] = T(float(dxp[ap[k]]) + float(dyp[k]));
    }
  }

 private:
  PoolGeometry geo_;
};

// y = sum over the window inside the input / (number of those elements).
template <typename T>
class AvgPoolKernel final : public Kernel {
 public:
  explicit AvgPoolKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.inputs[0].shape, spec.outputs[0].shape) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].data());
    T* y = static_cast<T*>(out[0].data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w;
    if (g.is_global()) {
      const float inv_area = 1.0f / float(in_plane);
#pragma omp parallel for schedule(static)
      for (int64_t p = 0; p < g.planes; ++p) {
        const T* xp = x + p * in_plane;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < in_plane; ++i) s += float(xp[i]);
        y[p] = T(s * inv_area);
      }
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      const T* xp = x + p * in_plane;
      T* yp = y + p * g.oh * g.ow;
      for (int64_t i = 0; i < g.oh; ++i) {
        const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
        for (int64_t j = 0; j < g.ow; ++j) {
          const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
          float s = 0.0f;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) s += float(xp[r * g.w + c]);
          yp[i * g.ow + j] = T(s / float((r1 - r0) * (c1 - c0)));
        }
      }
    }
  }

 private:
  PoolGeometry geo_;
};

// dx[window] += dy / (window area inside the input), for every output position.
template <typename T>
class AvgPoolGradKernel final : public Kernel {
 public:
  explicit AvgPoolGradKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.outputs[0].shape, spec.inputs[0].shape) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].data());
    T* dx = static_cast<T*>(out[0].data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    if (g.is_global()) {
      const float inv_area = 1.0f / float(in_plane);
#pragma omp parallel for schedule(static)
      for (int64_t p = 0; p < g.planes; ++p) {
        const T v = T(float(dy[p]) * inv_area);
        std::fill(dx + p * in_plane, dx + (p + 1) * in_plane, v);
      }
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < g.planes; ++p) {
      T* dxp = dx + p * in_plane;
      const T* dyp = dy + p * out_plane;
      std::fill(dxp, dxp + in_plane, T(0));
      for (int64_t i = 0; i < g.oh; ++i) {
        const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
        for (int64_t j = 0; j < g.ow; ++j) {
          const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
          const float v = float(dyp[i * g.ow + j]) / float((r1 - r0) * (c1 - c0));
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c)
              dxp[r * g.w + c] = T(float(dxp[r * g.w + c]) + v);
        }
      }
    }
  }

 private:
  PoolGeometry geo_;
};

template <template <typename> class K>
std::unique_ptr<Kernel> make_f32(const KernelSpec& spec, CpuContext&) {
  return std::make_unique<K<float>>(spec);
}

KernelRegistrar max_pool_f32(OpKind::MaxPool, Device::cpu, DType::f32, make_f32<MaxPoolKernel>);
KernelRegistrar max_pool_grad_f32(OpKind::MaxPoolGrad, Device::cpu, DType::f32,
                                  make_f32<MaxPoolGradKernel>);
KernelRegistrar avg_pool_f32(OpKind::AvgPool, Device::cpu, DType::f32, make_f32<AvgPoolKernel>);
KernelRegistrar avg_pool_grad_f32(OpKind::AvgPoolGrad, Device::cpu, DType::f32,
                                  make_f32<AvgPoolGradKernel>);

}  // namespace
}  // namespace campo
