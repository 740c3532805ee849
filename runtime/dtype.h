// Element types and exact conversions between them.
// Invariant: every f32 -> f16/bf16 conversion rounds to nearest, ties to even, keeps
// NaN a (quiet) NaN, overflows to +-inf and produces subnormals; the vectorized and the
// scalar paths give the same bits for every input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace campo {

enum class DType : uint8_t { f32, f16, bf16, i32, i64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);       // "f32", "f16", "bf16", "i32", "i64"
DType parse_dtype(std::string_view s);  // accepts the names above and fp32/fp16/float32/...
inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }
inline bool is_low_precision(DType t) { return t == DType::f16 || t == DType::bf16; }

// Scalar conversions (the specification).
uint16_t f32_to_f16_bits(float x);
float f16_bits_to_f32(uint16_t h);
uint16_t f32_to_bf16_bits(float x);
inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

// Bulk conversion between any two floating types (f32, f16, bf16), n elements.
// Uses F16C / AVX-512 (BF16) when the CPU has them, multithreaded for large n;
// bit-identical to the scalar functions above.
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);
// convert() of f32 to bf16 on the calling thread, with non-temporal stores where the CPU
// has AVX-512 and dst is 32-byte aligned: for data read again only much later (weight
// copies, read in the next step), so as not to fetch its lines or evict others.
void f32_to_bf16_streaming(const float* src, uint16_t* dst, size_t n);
// The scalar reference of convert(), used by tests.
void convert_scalar(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace campo
