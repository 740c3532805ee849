#include "runtime/dtype.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "runtime/check.h"
#include "runtime/cpu_features.h"

namespace campo {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  CAMPO_FAIL("unknown element type '", std::string(s), "' (expected f32, f16, bf16, i32 or i64)");
}

static inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// f32 -> f16, round to nearest even. Same results as the F16C instruction VCVTPS2PH with
// rounding mode "nearest": NaN keeps its sign and top payload bits and becomes quiet.
uint16_t f32_to_f16_bits(float x) {
  uint32_t u = f32_bits(x);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t exp = (u >> 23) & 0xffu;
  uint32_t mant = u & 0x7fffffu;
  if (exp == 0xff) {  // inf or NaN
    if (mant == 0) return sign | 0x7c00u;
    return uint16_t(sign | 0x7e00u | (mant >> 13));
  }
  int32_t e = int32_t(exp) - 127 + 15;
  if (e >= 31) return sign | 0x7c00u;  // overflow to inf
  if (e <= 0) {
    // Subnormal f16 (or zero): value = mant_full * 2^(exp-150); f16 subnormal unit 2^-24.
    if (e < -10) return sign;  // below half of the smallest subnormal: rounds to zero
    uint32_t full = mant | 0x800000u;
    int shift = 14 - e;  // bits to drop: (exp-150) - (-24) = exp - 126 = e - 1 -> shift = 1 - e + 13
    uint32_t half = full >> shift;
    uint32_t rem = full & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return uint16_t(sign | half);
  }
  uint32_t h = (uint32_t(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent/inf
  return uint16_t(sign | h);
}

float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      u = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f32 -> bf16, round to nearest even; NaN becomes a quiet NaN; subnormals are kept.
uint16_t f32_to_bf16_bits(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

namespace {

constexpr size_t kParallelThreshold = size_t(1) << 16;

// Plain loops the compiler vectorizes (bf16 is integer arithmetic only).
void f32_to_bf16_block(const float* src, uint16_t* dst, size_t n) {
  const uint32_t* u = reinterpret_cast<const uint32_t*>(src);
  for (size_t i = 0; i < n; ++i) {
    uint32_t v = u[i];
    uint32_t rounded = (v + 0x7fffu + ((v >> 16) & 1u)) >> 16;
    uint32_t nan = (v >> 16) | 0x40u;
    dst[i] = uint16_t(((v & 0x7fffffffu) > 0x7f800000u) ? nan : rounded);
  }
}

void bf16_to_f32_block(const uint16_t* src, float* dst, size_t n) {
  uint32_t* u = reinterpret_cast<uint32_t*>(dst);
  for (size_t i = 0; i < n; ++i) u[i] = uint32_t(src[i]) << 16;
}

__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(src + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = f32_to_f16_bits(src[i]);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst,
                                                           size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_bits_to_f32(src[i]);
}

// The same bits as f32_to_bf16_block, 16 at a time with AVX-512F (GCC does not vectorise
// the plain loop beyond SSE2 without -march: 4x slower than the way back, measured).
// vcvtneps2bf16 (AVX512-BF16) is not used: it flushes subnormal inputs to zero.
// `stream`: non-temporal stores where dst is 32-byte aligned.
__attribute__((target("avx512f"))) void f32_to_bf16_avx512(const float* src, uint16_t* dst,
                                                            size_t n, bool stream = false) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i inf = _mm512_set1_epi32(0x7f800000);
  const __m512i bias = _mm512_set1_epi32(0x7fff);
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  stream = stream && (reinterpret_cast<uintptr_t>(dst) & 31) == 0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i v = _mm512_loadu_si512(src + i);
    const __m512i high = _mm512_srli_epi32(v, 16);
    const __m512i rounded =
        _mm512_srli_epi32(_mm512_add_epi32(v, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(v, abs_mask), inf);
    const __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, quiet));
    __m256i* out = reinterpret_cast<__m256i*>(dst + i);
    if (stream)
      _mm256_stream_si256(out, _mm512_cvtepi32_epi16(r));
    else
      _mm256_storeu_si256(out, _mm512_cvtepi32_epi16(r));
  }
  if (stream) _mm_sfence();  // the streamed stores are visible before this returns
  f32_to_bf16_block(src + i, dst + i, n - i);
}

__attribute__((target("avx512f"))) void bf16_to_f32_avx512(const uint16_t* src, float* dst,
                                                            size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  bf16_to_f32_block(src + i, dst + i, n - i);
}

bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

bool cpu_has_f16c() {
  static const bool has = cpu_has_f16c_instructions() && __builtin_cpu_supports("avx2");
  return has;
}

void convert_block(const void* src, DType st, void* dst, DType dt, size_t n, bool vectorized) {
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  // Go through f32 when neither side is f32 (f16 <-> bf16), in chunks.
  if (st != DType::f32 && dt != DType::f32) {
    float tmp[1024];
    const char* s = static_cast<const char*>(src);
    char* d = static_cast<char*>(dst);
    for (size_t i = 0; i < n; i += 1024) {
      size_t m = std::min<size_t>(1024, n - i);
      convert_block(s + i * 2, st, tmp, DType::f32, m, vectorized);
      convert_block(tmp, DType::f32, d + i * 2, dt, m, vectorized);
    }
    return;
  }
  if (st == DType::f32 && dt == DType::f16) {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    if (vectorized && cpu_has_f16c()) return f32_to_f16_f16c(s, d, n);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16_bits(s[i]);
  } else if (st == DType::f16 && dt == DType::f32) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    if (vectorized && cpu_has_f16c()) return f16_to_f32_f16c(s, d, n);
    for (size_t i = 0; i < n; ++i) d[i] = f16_bits_to_f32(s[i]);
  } else if (st == DType::f32 && dt == DType::bf16) {
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    if (vectorized && cpu_has_avx512f()) return f32_to_bf16_avx512(s, d, n);
    if (vectorized) return f32_to_bf16_block(s, d, n);
    for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16_bits(s[i]);
  } else if (st == DType::bf16 && dt == DType::f32) {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    float* d = static_cast<float*>(dst);
    if (vectorized && cpu_has_avx512f()) return bf16_to_f32_avx512(s, d, n);
    if (vectorized) return bf16_to_f32_block(s, d, n);
    for (size_t i = 0; i < n; ++i) d[i] = bf16_bits_to_f32(s[i]);
  } else {
    CAMPO_FAIL("convert: unsupported conversion ", dtype_name(st), " -> ", dtype_name(dt));
  }
}

}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  CAMPO_CHECK(is_floating(st) && is_floating(dt), "convert: ", dtype_name(st), " -> ",
              dtype_name(dt), " is not a floating-point conversion");
  if (n < kParallelThreshold) return convert_block(src, st, dst, dt, n, true);
  const size_t chunk = 16384;
  const int64_t chunks = int64_t((n + chunk - 1) / chunk);
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  const size_t ss = dtype_size(st), ds = dtype_size(dt);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    size_t begin = size_t(c) * chunk;
    size_t m = std::min(chunk, n - begin);
    convert_block(s + begin * ss, st, d + begin * ds, dt, m, true);
  }
}

void f32_to_bf16_streaming(const float* src, uint16_t* dst, size_t n) {
  if (cpu_has_avx512f()) return f32_to_bf16_avx512(src, dst, n, true);
  f32_to_bf16_block(src, dst, n);
}

void convert_scalar(const void* src, DType st, void* dst, DType dt, size_t n) {
  CAMPO_CHECK(is_floating(st) && is_floating(dt), "convert_scalar: ", dtype_name(st), " -> ",
              dtype_name(dt), " is not a floating-point conversion");
  convert_block(src, st, dst, dt, n, false);
}

}  // namespace campo
