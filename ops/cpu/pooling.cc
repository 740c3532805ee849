// CPU kernels of MaxPool / MaxPoolGrad / AvgPool / AvgPoolGrad: plain loops, parallel over
// the N * C planes (each plane is independent, so the gradients' scatter-adds never race).
// Window bounds along one axis for output index o:
//   start = o * stride - pad,  rows [max(start, 0), min(start + kernel, H))
// which is never empty (the schema keeps pad <= kernel / 2). Within a plane the forward
// kernels vectorise across output columns (window offsets outer, columns inner).
// Global average pooling (window = whole plane, no padding) takes a fast path: one SIMD
// reduction per plane forward, one fill per plane backward.
//
// Against oneDNN 2.6 pooling (jit:avx512_core, nchw), one thread, N = 16, Kernel::run
// timed against the primitive on the same buffers, forward / backward:
//   MaxPool 3x3/2 pad 1, 64x112x112:  15 / 5 ms     vs  6.5 / 7 ms
//   global AvgPool, 2048x7x7:         0.24 / 0.15 ms vs 0.35 / 0.44 ms
// oneDNN's max-pooling workspace is not our argmax (its encoding is implementation-defined),
// so using its forward would add a conversion pass and that dependence; the loops stay until
// the stem's MaxPool shows up in a profile.
//
// Templates on the data type T (float, or bfloat16 from ops/cpu/low_precision.h) with f32
// math; the gradients' scatter-adds accumulate in f32 for every T, so a bf16 kernel rounds
// each output once, as the f32 kernel emulated on bf16 data does. f16 is emulated.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

constexpr int64_t kColChunk = 256;
constexpr int64_t kMinVectorColumns = 8;

struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int64_t h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  // [col_inner_begin, col_inner_end): output columns whose window needs no clipping; the
  // kernels vectorise across them, and treat the few edge columns one by one.
  int64_t col_inner_begin = 0, col_inner_end = 0;

  // x: [N, C, H, W], y: [N, C, OH, OW].
  PoolGeometry(const PoolAttrs& a, const Shape& x, const Shape& y)
      : planes(x[0] * x[1]),
        h(x[2]),
        w(x[3]),
        oh(y[2]),
        ow(y[3]),
        kh(a.kernel_h),
        kw(a.kernel_w),
        sh(a.stride_h),
        sw(a.stride_w),
        ph(a.pad_h),
        pw(a.pad_w) {
    // Output columns whose window lies inside [0, W): j * sw - pw >= 0 and
    // j * sw - pw + kw <= W.
    col_inner_begin = std::min<int64_t>((pw + sw - 1) / sw, ow);
    col_inner_end = w + pw - kw >= 0 ? std::min<int64_t>((w + pw - kw) / sw + 1, ow) : 0;
    col_inner_end = std::max(col_inner_end, col_inner_begin);
    // Narrow rows: the per-column loop is cheaper than setting up vector chunks.
    if (col_inner_end - col_inner_begin < kMinVectorColumns) col_inner_begin = col_inner_end = ow;
  }

  bool is_global() const { return kh == h && kw == w && ph == 0 && pw == 0; }
  int64_t row_begin(int64_t o) const { return std::max<int64_t>(o * sh - ph, 0); }
  int64_t row_end(int64_t o) const { return std::min<int64_t>(o * sh - ph + kh, h); }
  int64_t col_begin(int64_t o) const { return std::max<int64_t>(o * sw - pw, 0); }
  int64_t col_end(int64_t o) const { return std::min<int64_t>(o * sw - pw + kw, w); }
};

// The inner loops of the window kernels: one window offset for nj adjacent output
// columns, whose inputs lie at start + t * stride. STRIDE > 0 fixes the stride at compile
// time (1 and 2 cover the models' windows), which lets the strided loads vectorise.
//   best[t], at[t] = max(best[t], x[start + t * stride]) and where it is
template <int STRIDE, typename T>
void max_columns(const T* x, int32_t start, int stride, int nj, float* best, int32_t* at) {
  const int s = STRIDE > 0 ? STRIDE : stride;
#pragma omp simd
  for (int t = 0; t < nj; ++t) {
    const int32_t pos = start + t * s;
    const float v = float(x[pos]);
    // Strictly greater: the first of equal values stays. A NaN always wins.
    const bool wins = (v > best[t]) | (v != v);
    best[t] = wins ? v : best[t];
    at[t] = wins ? pos : at[t];
  }
}

//   sum[t] += x[start + t * stride]
template <int STRIDE, typename T>
void sum_columns(const T* x, int32_t start, int stride, int nj, float* sum) {
  const int s = STRIDE > 0 ? STRIDE : stride;
#pragma omp simd
  for (int t = 0; t < nj; ++t) sum[t] += float(x[start + t * s]);
}

// Running max of one window, one element at a time (edge columns and narrow rows), with
// max_columns' rule; `at < 0` lets the first element in even when it is -inf.
struct WindowMax {
  float best = -std::numeric_limits<float>::infinity();
  int32_t at = -1;
  void update(float v, int32_t index) {
    const bool wins = (v > best) | (v != v) | (at < 0);
    best = wins ? v : best;
    at = wins ? index : at;
  }
};

// Per-thread f32 planes (allocated here, for the thread count at construction) through which
// the kernels handle an element type T other than float; for T = float every call is a
// no-op on the caller's plane.
//  - widen: the input plane as f32, so the window loops read f32 (strided 16-bit loads do
//    not vectorise well: a bf16 MaxPool reading bf16 directly was 2.4x slower than f32).
//  - plane / store: the gradients accumulate a plane of dx in f32 and round it into dx once.
template <typename T>
class PlaneScratch {
 public:
  static constexpr bool kInPlace = std::is_same_v<T, float>;

  explicit PlaneScratch(int64_t plane) : plane_(plane) {
    if constexpr (!kInPlace) {
      threads_ = std::max(1, omp_get_max_threads());
      scratch_ = Tensor::empty({threads_ * plane}, DType::f32);
    }
  }
  // The thread count for the parallel loop over planes (buffers are indexed by thread).
  int threads() const { return kInPlace ? omp_get_max_threads() : threads_; }
  const float* widen(const T* xp) const {
    if constexpr (kInPlace) {
      return xp;
    } else {
      float* buf = plane(nullptr);
      for (int64_t i = 0; i < plane_; ++i) buf[i] = float(xp[i]);
      return buf;
    }
  }
  float* plane(T* dxp) const {
    if constexpr (kInPlace)
      return dxp;
    else
      return scratch_.data_as<float>() + omp_get_thread_num() * plane_;
  }
  void store(const float* acc, T* dxp) const {
    if constexpr (!kInPlace) {
      for (int64_t i = 0; i < plane_; ++i) dxp[i] = acc[i];
    }
  }

 private:
  int64_t plane_;
  int threads_ = 1;
  Tensor scratch_;
};

// y = max over the window inside the input; argmax = its index in the H * W plane (first
// one on ties, row-major).
template <typename T>
class MaxPoolKernel final : public Kernel {
 public:
  explicit MaxPoolKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.inputs[0].shape, spec.outputs[0].shape),
        scratch_(geo_.h * geo_.w) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].data());
    T* y = static_cast<T*>(out[0].data());
    int32_t* argmax = out[1].data_as<int32_t>();
    const PoolGeometry g = geo_;
    // Direct calls (not a function pointer), so they inline into the loop's code.
    const auto update = [sw = g.sw](const float* xp, int32_t start, int nj, float* best,
                                    int32_t* at) {
      if (sw == 1)
        max_columns<1>(xp, start, sw, nj, best, at);
      else if (sw == 2)
        max_columns<2>(xp, start, sw, nj, best, at);
      else
        max_columns<0>(xp, start, sw, nj, best, at);
    };
    const PlaneScratch<T>& scratch = scratch_;
    parallel_for<T>(
        g.planes, true,
        [&](int64_t p) {
          const float* xp = scratch.widen(x + p * g.h * g.w);
          T* yp = y + p * g.oh * g.ow;
          int32_t* ap = argmax + p * g.oh * g.ow;
          for (int64_t i = 0; i < g.oh; ++i) {
            const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
            T* yr = yp + i * g.ow;
            int32_t* ar = ap + i * g.ow;
            auto edge = [&](int64_t j) {
              WindowMax m;
              for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = g.col_begin(j); c < g.col_end(j); ++c)
                  m.update(float(xp[r * g.w + c]), int32_t(r * g.w + c));
              yr[j] = m.best;
              ar[j] = m.at;
            };
            for (int64_t j = 0; j < g.col_inner_begin; ++j) edge(j);
            // Inner columns, kColChunk at a time: window offsets outside, columns inside, so
            // the running max is a branch-free select per column (random data would make the
            // branch of a scalar max mispredict half the time).
            for (int64_t j0 = g.col_inner_begin; j0 < g.col_inner_end; j0 += kColChunk) {
              const int nj = int(std::min(kColChunk, g.col_inner_end - j0));
              float best[kColChunk];
              int32_t at[kColChunk];
              const int32_t first = int32_t(r0 * g.w + j0 * g.sw - g.pw);
              for (int t = 0; t < nj; ++t) {
                best[t] = -std::numeric_limits<float>::infinity();
                at[t] = first + t * g.sw;
              }
              for (int64_t r = r0; r < r1; ++r)
                for (int k = 0; k < g.kw; ++k)
                  update(xp, int32_t(r * g.w + j0 * g.sw - g.pw + k), nj, best, at);
              for (int t = 0; t < nj; ++t) {
                yr[j0 + t] = best[t];
                ar[j0 + t] = at[t];
              }
            }
            for (int64_t j = g.col_inner_end; j < g.ow; ++j) edge(j);
          }
        },
        scratch.threads());
  }

 private:
  PoolGeometry geo_;
  PlaneScratch<T> scratch_;
};

// dx[argmax] += dy, plane by plane (windows overlap when stride < kernel).
template <typename T>
class MaxPoolGradKernel final : public Kernel {
 public:
  explicit MaxPoolGradKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.outputs[0].shape, spec.inputs[0].shape),
        acc_(geo_.h * geo_.w) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].data());
    const int32_t* argmax = in[1].data_as<int32_t>();
    T* dx = static_cast<T*>(out[0].data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    const PlaneScratch<T>& acc = acc_;
    parallel_for<T>(
        g.planes, true,
        [&](int64_t p) {
          T* dxp = dx + p * in_plane;
          float* sum = acc.plane(dxp);
          const T* dyp = dy + p * out_plane;
          const int32_t* ap = argmax + p * out_plane;
          std::fill(sum, sum + in_plane, 0.0f);
          for (int64_t k = 0; k < out_plane; ++k) sum[ap[k]] += float(dyp[k]);
          acc.store(sum, dxp);
        },
        acc.threads());
  }

 private:
  PoolGeometry geo_;
  PlaneScratch<T> acc_;
};

// y = sum over the window inside the input / (number of those elements).
template <typename T>
class AvgPoolKernel final : public Kernel {
 public:
  explicit AvgPoolKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.inputs[0].shape, spec.outputs[0].shape),
        scratch_(geo_.h * geo_.w) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].data());
    T* y = static_cast<T*>(out[0].data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w;
    const auto add = [sw = g.sw](const float* xp, int32_t start, int nj, float* sum) {
      if (sw == 1)
        sum_columns<1>(xp, start, sw, nj, sum);
      else if (sw == 2)
        sum_columns<2>(xp, start, sw, nj, sum);
      else
        sum_columns<0>(xp, start, sw, nj, sum);
    };
    if (g.is_global()) {
      const float inv_area = 1.0f / float(in_plane);
      parallel_for<T>(g.planes, true, [&](int64_t p) {
        const T* xp = x + p * in_plane;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < in_plane; ++i) s += float(xp[i]);
        y[p] = s * inv_area;
      });
      return;
    }
    const PlaneScratch<T>& scratch = scratch_;
    parallel_for<T>(
        g.planes, true,
        [&](int64_t p) {
          const float* xp = scratch.widen(x + p * in_plane);
          T* yp = y + p * g.oh * g.ow;
          for (int64_t i = 0; i < g.oh; ++i) {
            const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
            T* yr = yp + i * g.ow;
            auto edge = [&](int64_t j) {
              const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
              float s = 0.0f;
              for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c) s += float(xp[r * g.w + c]);
              yr[j] = s / float((r1 - r0) * (c1 - c0));
            };
            for (int64_t j = 0; j < g.col_inner_begin; ++j) edge(j);
            // Inner columns, kColChunk at a time, window offsets outside (see MaxPool).
            const float inv_area = 1.0f / float((r1 - r0) * g.kw);
            for (int64_t j0 = g.col_inner_begin; j0 < g.col_inner_end; j0 += kColChunk) {
              const int nj = int(std::min(kColChunk, g.col_inner_end - j0));
              float sum[kColChunk] = {};
              for (int64_t r = r0; r < r1; ++r)
                for (int k = 0; k < g.kw; ++k)
                  add(xp, int32_t(r * g.w + j0 * g.sw - g.pw + k), nj, sum);
              for (int t = 0; t < nj; ++t) yr[j0 + t] = sum[t] * inv_area;
            }
            for (int64_t j = g.col_inner_end; j < g.ow; ++j) edge(j);
          }
        },
        scratch.threads());
  }

 private:
  PoolGeometry geo_;
  PlaneScratch<T> scratch_;
};

// dx[window] += dy / (window area inside the input), for every output position.
template <typename T>
class AvgPoolGradKernel final : public Kernel {
 public:
  explicit AvgPoolGradKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.outputs[0].shape, spec.inputs[0].shape),
        acc_(geo_.h * geo_.w) {}

  void run(CpuContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].data());
    T* dx = static_cast<T*>(out[0].data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    if (g.is_global()) {
      const float inv_area = 1.0f / float(in_plane);
      parallel_for<T>(g.planes, true, [&](int64_t p) {
        const T v = T(float(dy[p]) * inv_area);
        std::fill(dx + p * in_plane, dx + (p + 1) * in_plane, v);
      });
      return;
    }
    const PlaneScratch<T>& acc = acc_;
    parallel_for<T>(
        g.planes, true,
        [&](int64_t p) {
          T* dxp = dx + p * in_plane;
          float* sum = acc.plane(dxp);
          const T* dyp = dy + p * out_plane;
          std::fill(sum, sum + in_plane, 0.0f);
          for (int64_t i = 0; i < g.oh; ++i) {
            const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
            for (int64_t j = 0; j < g.ow; ++j) {
              const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
              const float v = float(dyp[i * g.ow + j]) / float((r1 - r0) * (c1 - c0));
              for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c) sum[r * g.w + c] += v;
            }
          }
          acc.store(sum, dxp);
        },
        acc.threads());
  }

 private:
  PoolGeometry geo_;
  PlaneScratch<T> acc_;
};

template <template <typename> class K, typename T>
std::unique_ptr<Kernel> make(const KernelSpec& spec, CpuContext&) {
  return std::make_unique<K<T>>(spec);
}

// Registers kernel K for f32 and bf16 (the bf16 one falls back to emulation as
// ops/cpu/low_precision.h says).
#define CAMPO_REGISTER_POOLING(name, kind, K)                                        \
  KernelRegistrar name##_f32(OpKind::kind, Device::cpu, DType::f32, make<K, float>); \
  KernelRegistrar name##_bf16(OpKind::kind, Device::cpu, DType::bf16,                \
                              native_bf16_loops<make<K, bfloat16>>);

CAMPO_REGISTER_POOLING(max_pool, MaxPool, MaxPoolKernel)
CAMPO_REGISTER_POOLING(max_pool_grad, MaxPoolGrad, MaxPoolGradKernel)
CAMPO_REGISTER_POOLING(avg_pool, AvgPool, AvgPoolKernel)
CAMPO_REGISTER_POOLING(avg_pool_grad, AvgPoolGrad, AvgPoolGradKernel)
#undef CAMPO_REGISTER_POOLING

}  // namespace
}  // namespace campo
