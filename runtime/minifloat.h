// The narrow floating-point element formats of FP8 training and of the OCP Microscaling (MX)
// formats, emulated bit-exactly on any CPU: encoding from f32 and bf16 and decoding to f32.
//
//   format  bits  exp/man  bias  max normal  min normal  min subnormal  inf  NaN codes
//   e4m3     8    4/3      7     448         2^-6        2^-9           no   S.1111.111
//   e5m2     8    5/2      15    57344       2^-14       2^-16          yes  S.11111.{01,10,11}
//   e2m3     6    2/3      1     7.5         1           2^-3           no   none
//   e3m2     6    3/2      3     28          2^-2        2^-4           no   none
//   e2m1     4    2/1      1     6           1           0.5            no   none
//
// e4m3 is OCP OFP8's E4M3 ("float8_e4m3fn" in ml_dtypes and PyTorch), e5m2 OFP8's E5M2; the
// FP6/FP4 formats are those of OCP MX v1.0. A code is one byte holding the format's bits in
// its low bits (sign at bit bits-1); the upper bits of a 6- or 4-bit code are ignored on
// decoding and zero on encoding (codes are not packed two to a byte).
//
// Invariants (tested against ml_dtypes tables, tests/runtime/minifloat_test.cc):
// - Round to nearest, ties to even, as if the exponent range were unbounded above; then a
//   result beyond the largest finite value overflows: saturating, to +-max; non-saturating,
//   to +-inf (e5m2) or NaN (e4m3). FP6/FP4 have neither, so they always saturate.
//   Saturating is "clip to +-max, then round" (infinities included), as OFP8's saturation
//   mode and Transformer Engine's casts do.
// - Below the smallest normal the result is subnormal (gradual underflow), never flushed;
//   a result that rounds to zero keeps the input's sign.
// - NaN encodes as the canonical NaN of the input's sign (e4m3 S.1111.111, e5m2 S.11111.10);
//   FP6/FP4 have no NaN: a NaN encodes as a zero of its sign (only meaningful inside an MX
//   block, whose scale is then NaN: runtime/mx.h).
// - Stochastic rounding goes to one of the two neighbours of x on the format's grid (the
//   same grid as above, unbounded above), upwards with probability (x - lo) / (hi - lo),
//   exactly when that ratio has at most 64 significant bits after the binary point (always
//   for normal results), and within 2^-64 otherwise; then overflows as above. Its random
//   bits come from Philox (runtime/philox.h) keyed by (seed, stream, element index), so the
//   bits of an array conversion never depend on the thread count or chunking.
// - bf16 inputs are exact in f32: converting bf16 x gives the bits of converting f32(x).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace campo {

enum class ElementFormat : uint8_t { e4m3, e5m2, e2m3, e3m2, e2m1 };
inline constexpr int kElementFormatCount = 5;

struct ElementFormatInfo {
  const char* name;  // "e4m3", "e5m2", "e2m3", "e3m2", "e2m1"
  int bits;          // 8, 6 or 4
  int exponent_bits;
  int mantissa_bits;
  int bias;
  int emin;               // exponent of the smallest normal, 1 - bias
  int emax;               // exponent of the largest normal (the MX scale rule's emax_elem)
  float max_finite;       // the largest finite value
  float min_subnormal;    // the smallest positive value
  uint8_t max_magnitude;  // code of +max_finite
  bool has_infinity;      // e5m2 only
  bool has_nan;           // e4m3 and e5m2
};

const ElementFormatInfo& element_format_info(ElementFormat f);
// The midpoint between max_finite and the next value of the format's grid were it unbounded
// (max_finite + 2^(emax - mantissa_bits - 1): e4m3 464, e5m2 61440, e2m1 7): the magnitude from
// which rounding to nearest leaves the format's range, so a saturating cast clamps (numerics
// telemetry's `saturated`).
double saturation_bound(ElementFormat f);
inline const char* element_format_name(ElementFormat f) { return element_format_info(f).name; }
// Accepts the names above and the usual aliases (fp8_e4m3, e4m3fn, float8_e4m3fn, fp4_e2m1,
// ...); throws with the list of names otherwise.
ElementFormat parse_element_format(std::string_view name);

enum class Saturation : uint8_t { saturating, non_saturating };
enum class Rounding : uint8_t { nearest_even, stochastic };

// How an array is encoded. For stochastic rounding, element i of the array draws
// philox_bits64(seed, stream, first_index + i): one stream per tensor (and step), so that two
// tensors, or two steps of one tensor, never share random bits; first_index lets a caller
// encode a tensor in pieces and get the bits of encoding it whole.
struct EncodeOptions {
  Rounding rounding = Rounding::nearest_even;
  Saturation saturation = Saturation::saturating;
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t first_index = 0;
};

// One element (the specification; the array functions give the same bits).
uint8_t encode_nearest_even(ElementFormat f, float x, Saturation saturation);
// `random_bits`: 64 uniformly random bits; rounds up iff random_bits < (x - lo) / (hi - lo)
// * 2^64.
uint8_t encode_stochastic(ElementFormat f, float x, Saturation saturation, uint64_t random_bits);
inline uint8_t encode_bf16_nearest_even(ElementFormat f, uint16_t bf16_bits,
                                        Saturation saturation) {
  const uint32_t u = uint32_t(bf16_bits) << 16;
  return encode_nearest_even(f, std::bit_cast<float>(u), saturation);
}
// NaN decodes as the quiet NaN of the code's sign (0x7fc00000 | sign).
float decode(ElementFormat f, uint8_t code);

// Arrays: src.size() == dst.size(), else throws. Multithreaded (OpenMP) for large arrays;
// the bits are those of the per-element functions above whatever the thread count.
void encode(ElementFormat f, std::span<const float> src, std::span<uint8_t> dst,
            const EncodeOptions& options = {});
void encode_bf16(ElementFormat f, std::span<const uint16_t> src, std::span<uint8_t> dst,
                 const EncodeOptions& options = {});
void decode(ElementFormat f, std::span<const uint8_t> src, std::span<float> dst);

// ---- The core, shared with MX block quantization (runtime/mx.cc) --------------------------

// floor(log2 |x|) of a finite non-zero f32 given its magnitude bits (subnormals included).
inline int floor_log2_magnitude(uint32_t magnitude_bits) {
  const int exponent_field = int(magnitude_bits >> 23);
  if (exponent_field != 0) return exponent_field - 127;
  return (31 - std::countl_zero(magnitude_bits)) - 149;
}

// Encodes x * 2^-scale_exponent exactly (the scaling never rounds, whatever the exponent),
// with `rounding` (random_bits is used only for stochastic rounding).
uint8_t encode_scaled(ElementFormat f, float x, int scale_exponent, Saturation saturation,
                      Rounding rounding, uint64_t random_bits);

// ---- E8M0, the MX shared scale -----------------------------------------------------------
// Unsigned, 8 exponent bits, no mantissa, bias 127: code c is 2^(c-127) for c in 0..254
// (2^-127 .. 2^127, no zero), 255 is NaN.
inline constexpr uint8_t kE8M0Nan = 0xff;
float e8m0_to_f32(uint8_t code);

}  // namespace campo
