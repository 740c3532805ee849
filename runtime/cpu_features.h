// CPU features that some compilers' __builtin_cpu_supports cannot name (clang 14 knows
// none of "f16c", "amx-bf16" and "avx512fp16"), read from CPUID so that gcc and clang build
// alike.
// They report the instructions only; F16C's ymm forms also need the OS to save AVX state,
// which callers check with __builtin_cpu_supports("avx2").
#pragma once

#include <cpuid.h>

namespace campo {

// CPUID.1:ECX bit 29 (F16C: vcvtph2ps / vcvtps2ph).
inline bool cpu_has_f16c_instructions() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

// CPUID.(EAX=7, ECX=0):EDX bit 22 (AMX-BF16).
inline bool cpu_has_amx_bf16_instructions() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 22));
}

// CPUID.(EAX=7, ECX=0):EDX bit 23 (AVX512-FP16). Its zmm forms also need the OS to save
// AVX-512 state, which callers check with __builtin_cpu_supports("avx512f").
inline bool cpu_has_avx512_fp16_instructions() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 23));
}

}  // namespace campo
