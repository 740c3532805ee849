#include "runtime/minifloat.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <string>

#include "runtime/check.h"
#include "runtime/chunked_for.h"
#include "runtime/philox.h"

namespace campo {

namespace {

//                 name    bits e  m  bias emin emax max      min_subnormal max_mag inf    nan
constexpr std::array<ElementFormatInfo, kElementFormatCount> kFormats{{
    {"e4m3", 8, 4, 3, 7, -6, 8, 448.0f, 0x1p-9f, 0x7e, false, true},
    {"e5m2", 8, 5, 2, 15, -14, 15, 57344.0f, 0x1p-16f, 0x7b, true, true},
    {"e2m3", 6, 2, 3, 1, 0, 2, 7.5f, 0x1p-3f, 0x1f, false, false},
    {"e3m2", 6, 3, 2, 3, -2, 4, 28.0f, 0x1p-4f, 0x1f, false, false},
    {"e2m1", 4, 2, 1, 1, 0, 2, 6.0f, 0x1p-1f, 0x07, false, false},
}};

constexpr uint32_t kF32Infinity = 0x7f800000u;
constexpr uint32_t kF32QuietNan = 0x7fc00000u;

// The code of a result beyond +-max_finite (an infinite input, or a finite one that rounds
// past the largest finite value). `sign` is already at the format's sign bit.
uint8_t overflow_code(ElementFormat f, const ElementFormatInfo& p, uint32_t sign,
                      Saturation saturation) {
  if (saturation == Saturation::saturating || !p.has_nan) return uint8_t(sign | p.max_magnitude);
  if (f == ElementFormat::e5m2) return uint8_t(sign | 0x7c);  // S.11111.00: infinity
  return uint8_t(sign | 0x7f);                                // e4m3: S.1111.111, NaN
}

uint8_t nan_code(ElementFormat f, uint32_t sign) {
  switch (f) {
    case ElementFormat::e4m3:
      return uint8_t(sign | 0x7f);  // the only NaN
    case ElementFormat::e5m2:
      return uint8_t(sign | 0x7e);  // quiet: top mantissa bit set
    default:
      return uint8_t(sign);  // FP6/FP4 have no NaN: a zero of the NaN's sign
  }
}

// decode() without the table: the definition of every code's value.
float decode_exactly(ElementFormat f, uint8_t code) {
  const ElementFormatInfo& p = element_format_info(f);
  code &= uint8_t((1u << p.bits) - 1);
  const bool negative = (code >> (p.bits - 1)) & 1u;
  const uint32_t magnitude = code & ((1u << (p.bits - 1)) - 1);
  const uint32_t sign32 = negative ? 0x80000000u : 0u;
  if (f == ElementFormat::e4m3 && magnitude == 0x7f)
    return std::bit_cast<float>(sign32 | kF32QuietNan);
  if (f == ElementFormat::e5m2 && magnitude >= 0x7c)
    return std::bit_cast<float>(sign32 | (magnitude == 0x7c ? kF32Infinity : kF32QuietNan));
  const int exponent_field = int(magnitude >> p.mantissa_bits);
  const int mantissa = int(magnitude & ((1u << p.mantissa_bits) - 1));
  // Subnormal: mantissa * 2^(emin - m); normal: (2^m + mantissa) * 2^(e - bias - m). Exact.
  const float value = exponent_field == 0 ? std::ldexp(float(mantissa), p.emin - p.mantissa_bits)
                                          : std::ldexp(float((1 << p.mantissa_bits) + mantissa),
                                                       exponent_field - p.bias - p.mantissa_bits);
  return negative ? -value : value;
}

struct DecodeTables {
  std::array<std::array<float, 256>, kElementFormatCount> value;
  DecodeTables() {
    for (int f = 0; f < kElementFormatCount; ++f)
      for (int code = 0; code < 256; ++code)
        value[f][code] = decode_exactly(ElementFormat(f), uint8_t(code));
  }
};

const DecodeTables& decode_tables() {
  static const DecodeTables tables;
  return tables;
}

// Arrays of at least this many elements are split over the OpenMP team in chunks of kChunk
// (runtime/chunked_for.h).
constexpr size_t kParallelThreshold = size_t(1) << 15;
constexpr size_t kChunk = 8192;

template <typename Load>
void encode_array(ElementFormat f, size_t n, uint8_t* dst, const EncodeOptions& o,
                  const Load& load) {
  if (o.rounding == Rounding::nearest_even) {
    for_each_chunk(n, kParallelThreshold, kChunk, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) dst[i] = encode_nearest_even(f, load(i), o.saturation);
    });
    return;
  }
  for_each_chunk(n, kParallelThreshold, kChunk, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      dst[i] = encode_stochastic(f, load(i), o.saturation,
                                 philox_bits64(o.seed, o.stream, o.first_index + i));
  });
}

}  // namespace

const ElementFormatInfo& element_format_info(ElementFormat f) {
  const size_t index = size_t(f);
  CAMPO_CHECK(index < kFormats.size(), "element_format_info: no element format ", index);
  return kFormats[index];
}

double saturation_bound(ElementFormat f) {
  const ElementFormatInfo& i = element_format_info(f);
  return double(i.max_finite) + std::ldexp(1.0, i.emax - i.mantissa_bits - 1);
}

ElementFormat parse_element_format(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* prefix :
       {"float8_", "float6_", "float4_", "fp8_", "fp6_", "fp4_", "fp8", "fp6", "fp4"}) {
    const std::string_view p(prefix);
    if (s.size() > p.size() && s.compare(0, p.size(), p) == 0) {
      s.erase(0, p.size());
      break;
    }
  }
  if (s.size() > 2 && s.compare(s.size() - 2, 2, "fn") == 0) s.erase(s.size() - 2);
  for (int f = 0; f < kElementFormatCount; ++f)
    if (s == kFormats[f].name) return ElementFormat(f);
  CAMPO_FAIL("unknown element format '", std::string(name),
             "' (expected e4m3, e5m2, e2m3, e3m2 or e2m1, optionally as fp8_e4m3, e4m3fn, "
             "float8_e4m3fn, ...)");
}

// value = sig * 2^ulp_exponent exactly, with `lead` = floor(log2 |value|). The result's grid
// in the binade of x is quantum = 2^(max(lead, emin) - m); kept = the number of quanta below
// |x|, rem = what is left, in units of 2^ulp_exponent (rem / 2^shift quanta).
uint8_t encode_scaled(ElementFormat f, float x, int scale_exponent, Saturation saturation,
                      Rounding rounding, uint64_t random_bits) {
  const ElementFormatInfo& p = kFormats[size_t(f)];
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 31) << (p.bits - 1);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > kF32Infinity) return nan_code(f, sign);
  if (magnitude == kF32Infinity) return overflow_code(f, p, sign, saturation);
  if (magnitude == 0) return uint8_t(sign);

  const int exponent_field = int(magnitude >> 23);
  const bool is_subnormal = exponent_field == 0;
  const uint32_t sig = is_subnormal ? magnitude : (magnitude & 0x7fffffu) | 0x800000u;
  const int ulp_exponent = (is_subnormal ? -149 : exponent_field - 150) - scale_exponent;
  const int lead = floor_log2_magnitude(magnitude) - scale_exponent;

  const int binade = std::max(lead, p.emin);
  const int shift = binade - p.mantissa_bits - ulp_exponent;
  uint64_t kept;
  bool up = false;
  if (shift <= 0) {  // x is on the grid (a subnormal f32 scaled up): nothing to round
    kept = uint64_t(sig) << -shift;
  } else {
    kept = shift < 32 ? sig >> shift : 0;
    const uint64_t rem = shift < 32 ? sig & ((1u << shift) - 1) : sig;  // < 2^shift
    if (rounding == Rounding::nearest_even) {
      // Halfway is 2^(shift-1); rem < 2^24 is below it once shift > 25.
      if (shift <= 25) {
        const uint64_t half = uint64_t(1) << (shift - 1);
        up = rem > half || (rem == half && (kept & 1u));
      }
    } else {
      // rem / 2^shift as a 64-bit fraction: exact for shift <= 64, truncated beyond.
      const uint64_t fraction = shift <= 64   ? rem << (64 - shift)
                                : shift < 128 ? rem >> (shift - 64)
                                              : 0;
      up = random_bits < fraction;
    }
  }
  kept += up;
  // Normal binade e: code = (e + bias) << m | (kept - 2^m), with kept in [2^m, 2^(m+1)]
  // (2^(m+1) carries into the next exponent); subnormal (binade == emin = 1 - bias): kept.
  // Both are ((binade + bias - 1) << m) + kept.
  const int64_t code = (int64_t(binade + p.bias - 1) << p.mantissa_bits) + int64_t(kept);
  if (code > p.max_magnitude) return overflow_code(f, p, sign, saturation);
  return uint8_t(sign | uint32_t(code));
}

uint8_t encode_nearest_even(ElementFormat f, float x, Saturation saturation) {
  return encode_scaled(f, x, 0, saturation, Rounding::nearest_even, 0);
}

uint8_t encode_stochastic(ElementFormat f, float x, Saturation saturation, uint64_t random_bits) {
  return encode_scaled(f, x, 0, saturation, Rounding::stochastic, random_bits);
}

float decode(ElementFormat f, uint8_t code) {
  return decode_tables().value[size_t(f)][code & ((1u << kFormats[size_t(f)].bits) - 1)];
}

void encode(ElementFormat f, std::span<const float> src, std::span<uint8_t> dst,
            const EncodeOptions& options) {
  CAMPO_CHECK(src.size() == dst.size(), "encode to ", element_format_name(f), ": ", src.size(),
              " inputs but room for ", dst.size(), " codes");
  const float* s = src.data();
  encode_array(f, src.size(), dst.data(), options, [s](size_t i) { return s[i]; });
}

void encode_bf16(ElementFormat f, std::span<const uint16_t> src, std::span<uint8_t> dst,
                 const EncodeOptions& options) {
  CAMPO_CHECK(src.size() == dst.size(), "encode bf16 to ", element_format_name(f), ": ", src.size(),
              " inputs but room for ", dst.size(), " codes");
  const uint16_t* s = src.data();
  encode_array(f, src.size(), dst.data(), options,
               [s](size_t i) { return std::bit_cast<float>(uint32_t(s[i]) << 16); });
}

void decode(ElementFormat f, std::span<const uint8_t> src, std::span<float> dst) {
  CAMPO_CHECK(src.size() == dst.size(), "decode from ", element_format_name(f), ": ", src.size(),
              " codes but room for ", dst.size(), " values");
  const float* table = decode_tables().value[size_t(f)].data();
  const uint8_t mask = uint8_t((1u << kFormats[size_t(f)].bits) - 1);
  const uint8_t* s = src.data();
  float* d = dst.data();
  for_each_chunk(src.size(), kParallelThreshold, kChunk, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) d[i] = table[s[i] & mask];
  });
}

float e8m0_to_f32(uint8_t code) {
  if (code == kE8M0Nan) return std::bit_cast<float>(kF32QuietNan);
  if (code == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127, an f32 subnormal
  return std::bit_cast<float>(uint32_t(code) << 23);
}

}  // namespace campo
