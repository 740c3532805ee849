// CPU kernels of MaxPool / MaxPoolGrad / AvgPool / AvgPoolGrad: plain loops, parallel over
// the N * C planes (each plane is independent, so the gradients' scatter-adds never race).
// Window bounds along one axis for output index o:
//   start = o * stride - pad,  rows [max(start, 0), min(start + kernel, H))
// which is never empty (the schema keeps pad <= kernel / 2). MaxPool runs on an f32 copy of
// each plane with -inf columns where windows reach past it, 16 (AVX-512) or 4 (SSE2) output
// columns at a time with explicit SIMD (GCC 12 vectorised neither the loop nor vector
// types: see AvxLanes). AvgPool vectorises across output columns (window offsets outer,
// columns inner). Global average pooling (window = whole plane, no padding) takes a fast
// path: a SIMD reduction per plane (for bf16 with AVX-512, 16 planes at a time in the same
// order) forward, a fill backward. The gradients work on blocks of planes.
//
// oneDNN's pooling is not used: its max-pooling workspace is not our argmax (its encoding is
// implementation-defined), so using its forward would add a conversion pass and that
// dependence.
//
// Templates on the data type T (float, or bfloat16 from ops/cpu/low_precision.h) with f32
// math; the gradients' scatter-adds accumulate in f32 for every T, so a bf16 kernel rounds
// each output once, as the f32 kernel emulated on bf16 data does. f16 is emulated. Every
// result (maxima, argmax, sums, NaN handling) is bit for bit what the plain loops gave.
// Their times, against oneDNN and before / after: docs/kernels.md, "Pooling".
#include <immintrin.h>
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
  bool count_include_pad = false;  // AvgPool's divisor: kh * kw, not the window inside
  // [col_inner_begin, col_inner_end): output columns whose window needs no clipping;
  // AvgPool vectorises across them, and treats the few edge columns one by one.
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
        pw(a.pad_w),
        count_include_pad(a.count_include_pad) {
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
  // AvgPool's divisor for a window of `rows` x `cols` elements inside the input.
  float avg_divisor(int64_t rows, int64_t cols) const {
    return count_include_pad ? float(kh * kw) : float(rows * cols);
  }
};

// MaxPool's window loop over kLanes adjacent output columns, with explicit SIMD: GCC 12
// vectorises neither form of it (as an `omp simd` loop over 16 columns it split the columns
// into 8 + 4 vector lanes and 4 scalar ones whose select became a branch, the branch that
// random data mispredicts; as GCC vector types it expands the comparisons element by
// element, since AVX-512 compares into mask registers). Two instruction sets:
//  - AvxLanes: 16 columns in one AVX-512 register, for the bf16 kernel where
//    cpu_has_avx512_loops() (there parallel_for runs the loop body compiled for AVX-512);
//  - SseLanes: 4 columns in one SSE2 register (baseline x86-64), for the f32 kernel and for
//    bf16 without AVX-512.
// block(...) computes, for output columns t < kLanes of one block,
//   best[t], at[t] = max over the window's rows r < rows and offsets k < kw of
//                    x[r * row_length + t * stride + k], and where it is
// where the first row of the window is row `row0` of the input, at flat index
// row0 * w + col0 + t * stride + k (col0 may be negative: padding). Strictly greater wins
// (the first of equal values stays) and a NaN always wins. Each lane starts at (-inf, its
// window's first element inside the input), as a window clipped by padding starts there;
// padding is -inf, so it never wins. STRIDE > 0 fixes the stride at compile time (1 and 2
// cover the models' windows); the strided loads are two loads and a shuffle.
#define CAMPO_AVX512_POOLING __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused source of their
// masked builtins, which -Wmaybe-uninitialized reports at every use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
struct AvxLanes {
  static constexpr int kLanes = 16;
  template <int STRIDE>
  CAMPO_AVX512_POOLING static void block(const float* x, int64_t row_length, int64_t rows, int kw,
                                         int stride, int32_t row0_index, int32_t col0, int32_t w,
                                         float* best_out, int32_t* at_out) {
    const int s = STRIDE > 0 ? STRIDE : stride;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i lane_offset = _mm512_mullo_epi32(lane, _mm512_set1_epi32(s));
    __m512 best = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    // max(col0 + lane_offset, 0) + row0_index.
    const __m512i col = _mm512_add_epi32(_mm512_set1_epi32(col0), lane_offset);
    __m512i at = _mm512_add_epi32(_mm512_max_epi32(col, _mm512_setzero_si512()),
                                  _mm512_set1_epi32(row0_index));
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * row_length;
      const __m512i row_pos =
          _mm512_add_epi32(lane_offset, _mm512_set1_epi32(row0_index + int32_t(r) * w + col0));
      for (int k = 0; k < kw; ++k) {
        __m512 v;
        if constexpr (STRIDE == 1) {
          v = _mm512_loadu_ps(xr + k);
        } else if constexpr (STRIDE == 2) {
          v = _mm512_permutex2var_ps(_mm512_loadu_ps(xr + k), _mm512_add_epi32(lane, lane),
                                     _mm512_loadu_ps(xr + k + kLanes));
        } else {
          v = _mm512_i32gather_ps(lane_offset, xr + k, 4);
        }
        const __mmask16 wins =
            _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        best = _mm512_mask_blend_ps(wins, best, v);
        at = _mm512_mask_blend_epi32(wins, at, _mm512_add_epi32(row_pos, _mm512_set1_epi32(k)));
      }
    }
    _mm512_storeu_ps(best_out, best);
    _mm512_storeu_si512(at_out, at);
  }
};

struct SseLanes {
  static constexpr int kLanes = 4;
  template <int STRIDE>
  static void block(const float* x, int64_t row_length, int64_t rows, int kw, int stride,
                    int32_t row0_index, int32_t col0, int32_t w, float* best_out, int32_t* at_out) {
    const int s = STRIDE > 0 ? STRIDE : stride;
    const __m128i lane_offset = _mm_set_epi32(3 * s, 2 * s, s, 0);
    __m128 best = _mm_set1_ps(-std::numeric_limits<float>::infinity());
    // max(col0 + lane_offset, 0) without SSE4.1's pmaxsd.
    const __m128i col = _mm_add_epi32(_mm_set1_epi32(col0), lane_offset);
    __m128i at =
        _mm_add_epi32(_mm_andnot_si128(_mm_srai_epi32(col, 31), col), _mm_set1_epi32(row0_index));
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * row_length;
      const __m128i row_pos =
          _mm_add_epi32(lane_offset, _mm_set1_epi32(row0_index + int32_t(r) * w + col0));
      for (int k = 0; k < kw; ++k) {
        __m128 v;
        if constexpr (STRIDE == 1) {
          v = _mm_loadu_ps(xr + k);
        } else if constexpr (STRIDE == 2) {
          v = _mm_shuffle_ps(_mm_loadu_ps(xr + k), _mm_loadu_ps(xr + k + kLanes),
                             _MM_SHUFFLE(2, 0, 2, 0));
        } else {
          v = _mm_set_ps(xr[k + 3 * s], xr[k + 2 * s], xr[k + s], xr[k]);
        }
        const __m128 wins = _mm_or_ps(_mm_cmpgt_ps(v, best), _mm_cmpunord_ps(v, v));
        best = _mm_or_ps(_mm_and_ps(wins, v), _mm_andnot_ps(wins, best));
        const __m128i wins_i = _mm_castps_si128(wins);
        at = _mm_or_si128(_mm_and_si128(wins_i, _mm_add_epi32(row_pos, _mm_set1_epi32(k))),
                          _mm_andnot_si128(wins_i, at));
      }
    }
    _mm_storeu_ps(best_out, best);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(at_out), at);
  }
};
// Global average pooling's sums for the 16 planes x[q * n, (q + 1) * n), q < 16, in exactly
// the order of the per-plane `omp simd` reduction that GCC 12 compiles for AVX-512
// (AvgPoolKernel's global path): 16 partial sums, element i into partial i % 16 for
// i < n - n % 16 (none when n < 16), the remaining elements into partial 0, then
//   sum = ((0 + partial[0]) + partial[1]) + ... + partial[15]
// (all starting at +0, so no partial is ever -0). One plane at a time that last sum is a
// chain of 16 dependent additions per plane; here the 16 planes' partials are transposed
// (16x16 f32, lane = plane) and summed with 16 vector additions.
CAMPO_AVX512_POOLING void global_sums_16_planes(const bfloat16* x, int64_t n, float* sums) {
  __m512 r[16];
  const int64_t vector_end = n >= 16 ? n - n % 16 : 0;
  for (int q = 0; q < 16; ++q) {
    const bfloat16* xq = x + q * n;
    __m512 partial = _mm512_setzero_ps();
    for (int64_t i0 = 0; i0 < vector_end; i0 += 16) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + i0));
      partial = _mm512_add_ps(
          partial, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16)));
    }
    for (int64_t i = vector_end; i < n; ++i)  // lane 0 only
      partial = _mm512_mask_add_ps(partial, 1, partial, _mm512_set1_ps(float(xq[i])));
    r[q] = partial;
  }
  // Transpose: afterwards r[l] holds partial l of plane q in lane q.
  __m512 t[16];
  for (int k = 0; k < 16; k += 2) {
    t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 16; k += 4) {
    r[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
    r[k + 1] =
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[k]), _mm512_castps_pd(t[k + 2])));
    r[k + 2] = _mm512_castpd_ps(
        _mm512_unpacklo_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
    r[k + 3] = _mm512_castpd_ps(
        _mm512_unpackhi_pd(_mm512_castps_pd(t[k + 1]), _mm512_castps_pd(t[k + 3])));
  }
  for (int k = 0; k < 16; k += 8) {
    for (int j = 0; j < 4; ++j) {
      t[k + j] = _mm512_shuffle_f32x4(r[k + j], r[k + j + 4], 0x88);
      t[k + j + 4] = _mm512_shuffle_f32x4(r[k + j], r[k + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
  __m512 sum = _mm512_setzero_ps();
  for (int l = 0; l < 16; ++l) sum = _mm512_add_ps(sum, r[l]);
  _mm512_storeu_ps(sums, sum);
}
#pragma GCC diagnostic pop
#undef CAMPO_AVX512_POOLING

// One plane's sum in global_sums_16_planes' order, written out in plain C++ so that its bits
// do not depend on how a compiler vectorises a reduction: the planes after the last block of
// 16 take it, so a plane's mean is the same wherever it falls. (An `omp simd` reduction has
// that order only where GCC compiles it at -O2 or more for AVX-512; the sanitizer build's
// -O1 summed in another order, one bf16 ulp away.)
float sum_plane_in_16_lanes(const bfloat16* x, int64_t n) {
  float partial[16] = {};
  const int64_t vector_end = n >= 16 ? n - n % 16 : 0;
  for (int64_t i0 = 0; i0 < vector_end; i0 += 16)
    for (int l = 0; l < 16; ++l) partial[l] += float(x[i0 + l]);
  for (int64_t i = vector_end; i < n; ++i) partial[0] += float(x[i]);
  float sum = 0.0f;
  for (int l = 0; l < 16; ++l) sum += partial[l];
  return sum;
}
constexpr int kMaxLanes = AvxLanes::kLanes;
// Rows of at most this many output columns take SseLanes in the AVX-512 code too: 16 lanes
// would mostly compute columns that are dropped (docs/kernels.md, "Pooling").
constexpr int64_t kNarrowRow = 4;

//   sum[t] += x[start + t * stride]
template <int STRIDE, typename T>
void sum_columns(const T* x, int32_t start, int stride, int nj, float* sum) {
  const int s = STRIDE > 0 ? STRIDE : stride;
#pragma omp simd
  for (int t = 0; t < nj; ++t) sum[t] += float(x[start + t * s]);
}

// Per-thread f32 buffers of `size` elements (allocated here, for the thread count at
// construction) through which the kernels handle an element type T other than float; for
// T = float every call is a no-op on the caller's data.
//  - widen: an input plane as f32, so AvgPool's window loops read f32.
//  - buffer / store: the gradients accumulate dx (a plane or a block of planes) in f32 and
//    round it into dx once.
template <typename T>
class PlaneScratch {
 public:
  static constexpr bool kInPlace = std::is_same_v<T, float>;

  explicit PlaneScratch(int64_t size) : size_(size) {
    if constexpr (!kInPlace) {
      threads_ = std::max(1, omp_get_max_threads());
      scratch_ = Tensor::empty({threads_ * size}, DType::f32);
    }
  }
  // The thread count for the parallel loop (buffers are indexed by thread).
  int threads() const { return kInPlace ? omp_get_max_threads() : threads_; }
  const float* widen(const T* xp) const {
    if constexpr (kInPlace) {
      return xp;
    } else {
      float* buf = buffer(nullptr);
      for (int64_t i = 0; i < size_; ++i) buf[i] = float(xp[i]);
      return buf;
    }
  }
  float* buffer(T* dxp) const {
    if constexpr (kInPlace)
      return dxp;
    else
      return scratch_.device_data<float>() + omp_get_thread_num() * size_;
  }
  void store(const float* acc, T* dxp, int64_t n) const {
    if constexpr (!kInPlace) {
      for (int64_t i = 0; i < n; ++i) dxp[i] = acc[i];
    }
  }

 private:
  int64_t size_;
  int threads_ = 1;
  Tensor scratch_;
};

// Per-thread copies of one input plane in f32, for every T: f32 rows let the strided loads
// vectorise (strided 16-bit loads do not: a bf16 MaxPool reading bf16 directly was 2.4x
// slower than f32), and -inf columns on both sides (where a window can reach past the
// input) let MaxPool treat edge and inner columns alike, kLanes at a time (an edge column
// went one element at a time before, through a branch that random data mispredicts: VGG's
// 2x2/2 pool on 8x8 and 4x4 planes ran at 5-20 ns per output). Row r, column c of the plane
// is at r * row_length + pad_left + c; the -inf columns are written once, here. Where no
// window reaches past the input (no padding: VGG's 2x2/2), the rows are packed
// (row_length = w) and the plane converts in one loop; the lanes of a block past the last
// output column then read the next row, or the slack after the last one, and are dropped.
class PaddedPlane {
 public:
  explicit PaddedPlane(const PoolGeometry& g)
      : h_(g.h), w_(g.w), pad_left_(g.pw), threads_(std::max(1, omp_get_max_threads())) {
    // Blocks of up to kMaxLanes columns; a stride-2 block loads 2 * kMaxLanes floats from
    // its first column on.
    const int64_t lanes_ow = (g.ow + kMaxLanes - 1) / kMaxLanes * kMaxLanes;
    const int64_t block_reach = (lanes_ow - 1) * g.sw + g.kw;
    packed_ = g.pw == 0 && (g.ow - 1) * g.sw + g.kw <= g.w;
    row_length_ = packed_ ? g.w : std::max<int64_t>(g.pw + g.w, block_reach);
    plane_size_ = h_ * row_length_ + block_reach + 2 * kMaxLanes;
    scratch_ = Tensor::empty({threads_ * plane_size_}, DType::f32);
    std::fill(scratch_.device_data<float>(), scratch_.device_data<float>() + threads_ * plane_size_,
              -std::numeric_limits<float>::infinity());
  }
  int threads() const { return threads_; }
  int64_t row_length() const { return row_length_; }
  // This thread's buffer, holding plane xp.
  template <typename T>
  const float* load(const T* xp) const {
    float* buf = scratch_.device_data<float>() + omp_get_thread_num() * plane_size_;
    if (packed_) {
      for (int64_t i = 0; i < h_ * w_; ++i) buf[i] = float(xp[i]);
      return buf;
    }
    for (int64_t r = 0; r < h_; ++r) {
      float* dst = buf + r * row_length_ + pad_left_;
      const T* src = xp + r * w_;
      for (int64_t c = 0; c < w_; ++c) dst[c] = float(src[c]);
    }
    return buf;
  }

 private:
  int64_t h_, w_, pad_left_, row_length_ = 0, plane_size_ = 0;
  bool packed_ = false;
  int threads_;
  Tensor scratch_;
};

// One plane of MaxPool from its padded copy `xp` (PaddedPlane), Lanes::kLanes output
// columns at a time (Lanes::block); lanes past the last output column read padding or the
// next row and are never stored.
template <typename Lanes, int STRIDE, typename T>
void max_pool_plane(const PoolGeometry& g, const float* xp, int64_t row_length, T* yp,
                    int32_t* ap) {
  constexpr int kLanes = Lanes::kLanes;
  for (int64_t i = 0; i < g.oh; ++i) {
    const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
    for (int64_t j0 = 0; j0 < g.ow; j0 += kLanes) {
      // Output column j0 + t reads padded column (j0 + t) * sw + k, input column
      // (j0 + t) * sw - pw + k.
      float best[kLanes];
      int32_t at[kLanes];
      Lanes::template block<STRIDE>(xp + r0 * row_length + j0 * g.sw, row_length, r1 - r0, g.kw,
                                    g.sw, int32_t(r0 * g.w), int32_t(j0 * g.sw - g.pw),
                                    int32_t(g.w), best, at);
      T* yr = yp + i * g.ow + j0;
      int32_t* ar = ap + i * g.ow + j0;
      const int n = int(std::min<int64_t>(kLanes, g.ow - j0));
      for (int t = 0; t < n; ++t) {
        yr[t] = best[t];
        ar[t] = at[t];
      }
    }
  }
}

template <typename Lanes, typename T>
void max_pool_plane_for_stride(const PoolGeometry& g, const float* xp, int64_t row_length, T* yp,
                               int32_t* ap) {
  if (g.sw == 1)
    max_pool_plane<Lanes, 1>(g, xp, row_length, yp, ap);
  else if (g.sw == 2)
    max_pool_plane<Lanes, 2>(g, xp, row_length, yp, ap);
  else
    max_pool_plane<Lanes, 0>(g, xp, row_length, yp, ap);
}

// y = max over the window inside the input; argmax = its index in the H * W plane (first
// one on ties, row-major; a NaN wins, the last one if several).
template <typename T>
class MaxPoolKernel final : public Kernel {
 public:
  explicit MaxPoolKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.inputs[0].shape, spec.outputs[0].shape),
        padded_(geo_) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].device_data());
    T* y = static_cast<T*>(out[0].device_data());
    int32_t* argmax = out[1].device_data<int32_t>();
    const PoolGeometry g = geo_;
    const PaddedPlane& padded = padded_;
    const int64_t row_length = padded.row_length();
    // The condition under which parallel_for<T> runs the loop compiled for AVX-512.
    const bool use_avx512 = !std::is_same_v<T, float> && cpu_has_avx512_loops();
    parallel_for<T>(
        g.planes, true,
        [&](int64_t p) {
          const float* xp = padded.load(x + p * g.h * g.w);
          T* yp = y + p * g.oh * g.ow;
          int32_t* ap = argmax + p * g.oh * g.ow;
          // Direct calls (not a function pointer), so they inline into the loop's code.
          if (use_avx512 && g.ow > kNarrowRow)
            max_pool_plane_for_stride<AvxLanes>(g, xp, row_length, yp, ap);
          else
            max_pool_plane_for_stride<SseLanes>(g, xp, row_length, yp, ap);
        },
        padded.threads());
  }

 private:
  PoolGeometry geo_;
  PaddedPlane padded_;
};

// Planes per task of the gradients: enough that a task's fill, scatter and rounding loops
// run over ~kBlockElements elements (a 4x4 plane alone is shorter than the set-up of a
// vector loop), and at least kTasksPerThread tasks per thread.
constexpr int64_t kBlockElements = 4096;
constexpr int64_t kTasksPerThread = 8;
int64_t planes_per_block(int64_t planes, int64_t plane) {
  const int64_t by_size = std::max<int64_t>(1, kBlockElements / std::max<int64_t>(plane, 1));
  const int64_t by_tasks =
      std::max<int64_t>(1, planes / (kTasksPerThread * std::max(1, omp_get_max_threads())));
  return std::min(by_size, by_tasks);
}

// sp[ap[k]] += dy[k] for k < n, in order. While the index repeats, the running sum stays in
// a register: through memory each repeat would wait for the previous store to forward
// (~10 cycles; the benchmarks' all-zero argmax is one such chain per plane). The same f32
// additions in the same order, so the same bits.
template <typename T>
void scatter_add(const T* dy, const int32_t* ap, int64_t n, float* sp) {
  if (n == 0) return;
  int32_t at = ap[0];
  float acc = sp[at];
  for (int64_t k = 0; k < n; ++k) {
    if (ap[k] != at) {
      sp[at] = acc;
      at = ap[k];
      acc = sp[at];
    }
    acc += float(dy[k]);
  }
  sp[at] = acc;
}

// dx[argmax] += dy, plane by plane (windows overlap when stride < kernel), a block of
// planes per task.
template <typename T>
class MaxPoolGradKernel final : public Kernel {
 public:
  explicit MaxPoolGradKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.outputs[0].shape, spec.inputs[0].shape),
        block_(planes_per_block(geo_.planes, geo_.h * geo_.w)),
        acc_(block_ * geo_.h * geo_.w) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].device_data());
    const int32_t* argmax = in[1].device_data<int32_t>();
    T* dx = static_cast<T*>(out[0].device_data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow, block = block_;
    const PlaneScratch<T>& acc = acc_;
    parallel_for<T>((g.planes + block - 1) / block, true,
                    [&](int64_t b) {
                      const int64_t p0 = b * block, n = std::min(block, g.planes - p0) * in_plane;
                      T* dxb = dx + p0 * in_plane;
                      float* sum = acc.buffer(dxb);
                      std::fill(sum, sum + n, 0.0f);
                      for (int64_t q = 0; q * in_plane < n; ++q) {
                        float* sp = sum + q * in_plane;
                        const T* dyp = dy + (p0 + q) * out_plane;
                        const int32_t* ap = argmax + (p0 + q) * out_plane;
                        scatter_add(dyp, ap, out_plane, sp);
                      }
                      acc.store(sum, dxb, n);
                    },
                    acc.threads());
  }

 private:
  PoolGeometry geo_;
  int64_t block_;
  PlaneScratch<T> acc_;
};
// y = sum over the window inside the input / (number of those elements, or kh * kw with
// count_include_pad: padding adds zeros to the sum but counts in the divisor).
template <typename T>
class AvgPoolKernel final : public Kernel {
 public:
  explicit AvgPoolKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.inputs[0].shape, spec.outputs[0].shape),
        scratch_(geo_.h * geo_.w) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* x = static_cast<const T*>(in[0].device_data());
    T* y = static_cast<T*>(out[0].device_data());
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
      // y[p] = sum of plane p * inv_area. Per plane, an `omp simd` reduction; where the loop
      // runs compiled for AVX-512 (bf16), 16 planes at a time (global_sums_16_planes), the
      // last planes < 16 one by one in the same order (sum_plane_in_16_lanes).
      const auto mean_of_plane = [&](int64_t p) {
        const T* xp = x + p * in_plane;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < in_plane; ++i) s += float(xp[i]);
        y[p] = s * inv_area;
      };
      if constexpr (std::is_same_v<T, bfloat16>) {
        if (cpu_has_avx512_loops()) {
          parallel_for<T>((g.planes + 15) / 16, true, [&](int64_t b) {
            const int64_t p0 = b * 16;
            if (p0 + 16 <= g.planes) {
              float sums[16];
              global_sums_16_planes(x + p0 * in_plane, in_plane, sums);
              for (int q = 0; q < 16; ++q) y[p0 + q] = sums[q] * inv_area;
            } else {
              for (int64_t p = p0; p < g.planes; ++p)
                y[p] = sum_plane_in_16_lanes(x + p * in_plane, in_plane) * inv_area;
            }
          });
          return;
        }
      }
      parallel_for<T>(g.planes, true, mean_of_plane);
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
              yr[j] = s / g.avg_divisor(r1 - r0, c1 - c0);
            };
            for (int64_t j = 0; j < g.col_inner_begin; ++j) edge(j);
            // Inner columns, kColChunk at a time, window offsets outside (see MaxPool).
            const float inv_area = 1.0f / g.avg_divisor(r1 - r0, g.kw);
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

// dx[window inside the input] += dy / divisor (that window's area, or kh * kw with
// count_include_pad), for every output position.
template <typename T>
class AvgPoolGradKernel final : public Kernel {
 public:
  explicit AvgPoolGradKernel(const KernelSpec& spec)
      : geo_(std::get<PoolAttrs>(spec.attrs), spec.outputs[0].shape, spec.inputs[0].shape),
        acc_(geo_.h * geo_.w) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* dy = static_cast<const T*>(in[0].device_data());
    T* dx = static_cast<T*>(out[0].device_data());
    const PoolGeometry g = geo_;
    const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
    if (g.is_global()) {
      // dx[p, :] = dy[p] / area, a block of planes per task.
      const float inv_area = 1.0f / float(in_plane);
      const int64_t block = planes_per_block(g.planes, in_plane);
      parallel_for<T>((g.planes + block - 1) / block, true, [&](int64_t b) {
        const int64_t p1 = std::min(g.planes, (b + 1) * block);
        for (int64_t p = b * block; p < p1; ++p) {
          T* dxp = dx + p * in_plane;
          const float v = float(dy[p]) * inv_area;
          for (int64_t i = 0; i < in_plane; ++i) dxp[i] = v;
        }
      });
      return;
    }
    const PlaneScratch<T>& acc = acc_;
    parallel_for<T>(
        g.planes, true,
        [&](int64_t p) {
          T* dxp = dx + p * in_plane;
          float* sum = acc.buffer(dxp);
          const T* dyp = dy + p * out_plane;
          std::fill(sum, sum + in_plane, 0.0f);
          for (int64_t i = 0; i < g.oh; ++i) {
            const int64_t r0 = g.row_begin(i), r1 = g.row_end(i);
            for (int64_t j = 0; j < g.ow; ++j) {
              const int64_t c0 = g.col_begin(j), c1 = g.col_end(j);
              const float v = float(dyp[i * g.ow + j]) / g.avg_divisor(r1 - r0, c1 - c0);
              for (int64_t r = r0; r < r1; ++r)
                for (int64_t c = c0; c < c1; ++c) sum[r * g.w + c] += v;
            }
          }
          acc.store(sum, dxp, in_plane);
        },
        acc.threads());
  }

 private:
  PoolGeometry geo_;
  PlaneScratch<T> acc_;
};

template <template <typename> class K, typename T>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext&) {
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
