// CUDA kernels of MaxPool / MaxPoolGrad / AvgPool / AvgPoolGrad: own kernels, not cuDNN's
// cudnnPooling*. The ops' contract (ops/pooling.cc, CPU kernels in ops/cpu/pooling.cc) has
// MaxPool write an argmax (the max's index in the H * W plane) that MaxPoolGrad reads instead of
// x and y; cuDNN's max pooling has no argmax output and its backward wants x and y, so
// MaxPoolGrad would need y recomputed. Own kernels keep the CPU's results bit for bit where
// the order of operations allows:
//  - MaxPool: one thread per output; the window's rows and columns inside the input in
//    row-major order, strictly greater wins (the first of equal values stays), a NaN always
//    wins (the last NaN if several), starting from -inf at the window's first element inside
//    the input: the CPU's rule, so y and argmax are identical.
//  - MaxPoolGrad, AvgPoolGrad: gathers instead of the CPU's scatter-adds: one thread per dx
//    element adds, in f32 from 0, the dy of every window that covers it (MaxPoolGrad: whose
//    argmax is it), in increasing output index: the CPU's order of additions into that element,
//    so dx is identical. No atomics, deterministic.
//  - AvgPool: the window's sum in row-major order in f32, divided by the divisor (the window's
//    area inside the input, or kh * kw with count_include_pad), or multiplied by its reciprocal
//    where the CPU does (its inner columns, global pools): identical to the CPU except global
//    pools, whose sums the CPU takes in SIMD lanes (another order: an ulp or so).
// Data f32, f16 or bf16 (f32 math, one rounding on store); argmax i32. NCHW only.
#include <algorithm>
#include <cmath>

#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

using cuda::from_float;
using cuda::kThreads;
using cuda::to_float;

struct PoolGeometry {
  int64_t planes = 0;  // N * C
  int64_t h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  bool count_include_pad = false;
  // [col_inner_begin, col_inner_end): the output columns the CPU's AvgPool treats as inner
  // (window inside [0, W), at least 8 of them) and scales by the reciprocal divisor.
  int64_t col_inner_begin = 0, col_inner_end = 0;
  // Every flat index of x and y fits 31 bits: index arithmetic in 32 bits (64-bit divisions
  // cost several times as much).
  bool narrow = false;

  // Flat index f of a [planes, rows, cols] tensor -> (plane, row, col).
  __device__ void split(int64_t f, int64_t rows, int64_t cols, int64_t* plane, int64_t* row,
                        int64_t* col) const {
    if (narrow) {
      const uint32_t u = uint32_t(f), q = u / uint32_t(cols);
      *col = u - q * uint32_t(cols);
      *plane = q / uint32_t(rows);
      *row = q - uint32_t(*plane) * uint32_t(rows);
      return;
    }
    const int64_t q = f / cols;
    *col = f - q * cols;
    *plane = q / rows;
    *row = q - *plane * rows;
  }

  __host__ __device__ bool is_global() const { return kh == h && kw == w && ph == 0 && pw == 0; }
  __device__ int64_t row_begin(int64_t o) const { return max(o * sh - ph, int64_t(0)); }
  __device__ int64_t row_end(int64_t o) const { return min(o * sh - ph + kh, h); }
  __device__ int64_t col_begin(int64_t o) const { return max(o * sw - pw, int64_t(0)); }
  __device__ int64_t col_end(int64_t o) const { return min(o * sw - pw + kw, w); }
  __device__ float avg_divisor(int64_t rows, int64_t cols) const {
    return count_include_pad ? float(kh * kw) : float(rows * cols);
  }
  // The outputs whose window covers input row r: [first, last] along one axis, where window o
  // covers [o * s - p, o * s - p + k).
  __device__ static void covering(int64_t r, int k, int s, int p, int64_t outputs, int64_t* first,
                                  int64_t* last) {
    const int64_t a = r + p - k + 1;  // o * s >= a
    *first = a <= 0 ? 0 : (a + s - 1) / s;
    *last = min((r + p) / s, outputs - 1);
  }
};

// x: [N, C, H, W], y: [N, C, OH, OW].
PoolGeometry pool_geometry(const KernelSpec& spec, const TensorDesc& x, const TensorDesc& y) {
  for (const TensorDesc* d : {&x, &y})
    CAMPO_CHECK(d->layout == Layout::plain && d->shape.size() == 4, op_name(spec.kind), " '",
                spec.node_name, "': the CUDA kernel takes plain NCHW data, got ",
                layout_name(d->layout), " ", shape_str(d->shape));
  const PoolAttrs& a = attrs_as<PoolAttrs>(spec.attrs);
  PoolGeometry g;
  g.planes = x.shape[0] * x.shape[1];
  g.h = x.shape[2];
  g.w = x.shape[3];
  g.oh = y.shape[2];
  g.ow = y.shape[3];
  g.kh = a.kernel_h;
  g.kw = a.kernel_w;
  g.sh = a.stride_h;
  g.sw = a.stride_w;
  g.ph = a.pad_h;
  g.pw = a.pad_w;
  g.count_include_pad = a.count_include_pad;
  g.narrow = g.planes * std::max(g.h * g.w, g.oh * g.ow) <= INT32_MAX;
  // As ops/cpu/pooling.cc's PoolGeometry (kMinVectorColumns = 8).
  g.col_inner_begin = std::min<int64_t>((g.pw + g.sw - 1) / g.sw, g.ow);
  g.col_inner_end =
      g.w + g.pw - g.kw >= 0 ? std::min<int64_t>((g.w + g.pw - g.kw) / g.sw + 1, g.ow) : 0;
  g.col_inner_end = std::max(g.col_inner_end, g.col_inner_begin);
  if (g.col_inner_end - g.col_inner_begin < 8) g.col_inner_begin = g.col_inner_end = g.ow;
  CAMPO_CHECK(g.h * g.w <= INT32_MAX, op_name(spec.kind), " '", spec.node_name, "': a ", g.h, "x",
              g.w, " plane is too large for an i32 argmax");
  return g;
}

template <typename T>
__global__ void max_pool(const T* x, T* y, int32_t* argmax, PoolGeometry g) {
  CAMPO_CUDA_FOR(o, g.planes * g.oh * g.ow) {
    int64_t p, i, j;
    g.split(o, g.oh, g.ow, &p, &i, &j);
    const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
    const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
    const T* xp = x + p * g.h * g.w;
    float best = -INFINITY;
    int64_t at = r0 * g.w + c0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const float v = to_float(xp[r * g.w + c]);
        if (v > best || isnan(v)) {
          best = v;
          at = r * g.w + c;
        }
      }
    y[o] = from_float<T>(best);
    argmax[o] = int32_t(at);
  }
}

template <typename T>
__global__ void max_pool_grad(const T* dy, const int32_t* argmax, T* dx, PoolGeometry g) {
  CAMPO_CUDA_FOR(e, g.planes * g.h * g.w) {
    int64_t p, r, c;
    g.split(e, g.h, g.w, &p, &r, &c);
    const int64_t k = r * g.w + c;  // the index argmax holds for this element
    int64_t i0, i1, j0, j1;
    PoolGeometry::covering(r, g.kh, g.sh, g.ph, g.oh, &i0, &i1);
    PoolGeometry::covering(c, g.kw, g.sw, g.pw, g.ow, &j0, &j1);
    const T* dyp = dy + p * g.oh * g.ow;
    const int32_t* ap = argmax + p * g.oh * g.ow;
    float sum = 0.0f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j)
        if (ap[i * g.ow + j] == int32_t(k)) sum += to_float(dyp[i * g.ow + j]);
    dx[e] = from_float<T>(sum);
  }
}

template <typename T>
__global__ void avg_pool(const T* x, T* y, PoolGeometry g) {
  CAMPO_CUDA_FOR(o, g.planes * g.oh * g.ow) {
    int64_t p, i, j;
    g.split(o, g.oh, g.ow, &p, &i, &j);
    const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
    const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
    const T* xp = x + p * g.h * g.w;
    float s = 0.0f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) s += to_float(xp[r * g.w + c]);
    const float divisor = g.avg_divisor(r1 - r0, c1 - c0);
    const bool inner = j >= g.col_inner_begin && j < g.col_inner_end;
    y[o] = from_float<T>(g.is_global() || inner ? s * (1.0f / divisor) : s / divisor);
  }
}

template <typename T>
__global__ void avg_pool_grad(const T* dy, T* dx, PoolGeometry g) {
  CAMPO_CUDA_FOR(e, g.planes * g.h * g.w) {
    int64_t p, r, c;
    g.split(e, g.h, g.w, &p, &r, &c);
    const T* dyp = dy + p * g.oh * g.ow;
    if (g.is_global()) {  // the CPU's global path: dy times the reciprocal area
      dx[e] = from_float<T>(to_float(dyp[0]) * (1.0f / float(g.h * g.w)));
      continue;
    }
    int64_t i0, i1, j0, j1;
    PoolGeometry::covering(r, g.kh, g.sh, g.ph, g.oh, &i0, &i1);
    PoolGeometry::covering(c, g.kw, g.sw, g.pw, g.ow, &j0, &j1);
    float sum = 0.0f;
    for (int64_t i = i0; i <= i1; ++i) {
      const int64_t rows = g.row_end(i) - g.row_begin(i);
      for (int64_t j = j0; j <= j1; ++j)
        sum += to_float(dyp[i * g.ow + j]) / g.avg_divisor(rows, g.col_end(j) - g.col_begin(j));
    }
    dx[e] = from_float<T>(sum);
  }
}

// The kernel of pooling op kKind (MaxPool, MaxPoolGrad, AvgPool or AvgPoolGrad) at storage
// type T; the four differ only in the CUDA kernel launched.
// A forward kernel (MaxPool: inputs {x}, outputs {y, argmax}; AvgPool: inputs {x}, output y)
// runs one thread per y element; a backward one (MaxPoolGrad: inputs {dy, argmax}, output dx;
// AvgPoolGrad: inputs {dy}, output dx) one thread per dx element.
template <typename T, OpKind kKind>
class PoolingKernel final : public Kernel {
 public:
  PoolingKernel(const KernelSpec& spec, ExecContext&)
      : geo_(kIsBackward ? pool_geometry(spec, spec.outputs[0], spec.inputs[0])
                         : pool_geometry(spec, spec.inputs[0], spec.outputs[0])),
        items_(geo_.planes * (kIsBackward ? geo_.h * geo_.w : geo_.oh * geo_.ow)) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (items_ == 0) return;
    const unsigned grid = cuda::grid_for(items_, cuda_backend(ctx).multiprocessors());
    const cudaStream_t stream = cuda_stream(ctx);
    const T* in0 = static_cast<const T*>(in[0].device_data());  // x or dy
    T* out0 = static_cast<T*>(out[0].device_data());            // y or dx
    if constexpr (kKind == OpKind::MaxPool) {
      max_pool<T><<<grid, kThreads, 0, stream>>>(in0, out0, out[1].device_data<int32_t>(), geo_);
      cuda::check_launch("max_pool");
    } else if constexpr (kKind == OpKind::MaxPoolGrad) {
      max_pool_grad<T>
          <<<grid, kThreads, 0, stream>>>(in0, in[1].device_data<int32_t>(), out0, geo_);
      cuda::check_launch("max_pool_grad");
    } else if constexpr (kKind == OpKind::AvgPool) {
      avg_pool<T><<<grid, kThreads, 0, stream>>>(in0, out0, geo_);
      cuda::check_launch("avg_pool");
    } else {
      static_assert(kKind == OpKind::AvgPoolGrad);
      avg_pool_grad<T><<<grid, kThreads, 0, stream>>>(in0, out0, geo_);
      cuda::check_launch("avg_pool_grad");
    }
  }

 private:
  static constexpr bool kIsBackward = kKind == OpKind::MaxPoolGrad || kKind == OpKind::AvgPoolGrad;

  PoolGeometry geo_;
  int64_t items_;  // threads' work items: y elements (forward) or dx elements (backward)
};

template <typename T>
using MaxPoolKernel = PoolingKernel<T, OpKind::MaxPool>;
template <typename T>
using MaxPoolGradKernel = PoolingKernel<T, OpKind::MaxPoolGrad>;
template <typename T>
using AvgPoolKernel = PoolingKernel<T, OpKind::AvgPool>;
template <typename T>
using AvgPoolGradKernel = PoolingKernel<T, OpKind::AvgPoolGrad>;

cuda::FloatKernelRegistrar<MaxPoolKernel> max_pool_kernels(OpKind::MaxPool);
cuda::FloatKernelRegistrar<MaxPoolGradKernel> max_pool_grad_kernels(OpKind::MaxPoolGrad);
cuda::FloatKernelRegistrar<AvgPoolKernel> avg_pool_kernels(OpKind::AvgPool);
cuda::FloatKernelRegistrar<AvgPoolGradKernel> avg_pool_grad_kernels(OpKind::AvgPoolGrad);

}  // namespace
}  // namespace campo
