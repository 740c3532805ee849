// Low-precision (bf16, f16) CPU kernels: how an op runs when a mixed-precision policy sets
// its node's compute dtype to bf16 or f16. Every floating input then has the node's dtype
// except the schema's fp32_inputs (batch-norm scale/offset/statistics), which stay f32, and
// every output has it except those the schema declares f32 (batch statistics, losses).
//
// Two implementations:
//  - Emulated (every op with an f32 kernel, for f16 always, DESIGN.md "FP16 on CPU is
//    emulated"): the op's f32 kernel runs on f32 copies of the low-precision inputs and each
//    low-precision output is rounded once (round to nearest even, runtime/dtype.h). f32
//    inputs are passed through as the same tensor, so in-place updates (batch-norm running
//    statistics) land in the caller's buffer; integer inputs and outputs pass through too.
//    create_kernel (ops/kernel.cc) resolves (op, cpu, f16 / bf16) to it wherever no native
//    kernel is registered.
//  - Native bf16: oneDNN bf16 primitives (Conv2D and its backprops, MatMul, the Tanh /
//    Sigmoid eltwise; bf16 operands, f32 accumulation inside oneDNN, one rounding of the
//    result), used only where the CPU has AVX-512 BF16 and oneDNN may use it; and the plain
//    loops of the element-wise, bias, batch-norm and pooling kernels instantiated on
//    `bfloat16` (load = exact widening, f32 math, store = one rounding), which need no
//    special instructions: they run AVX-512 code where the CPU has AVX-512 (parallel_for
//    below), baseline x86-64 code elsewhere. Both give way to the emulated kernel when the
//    context's native_bf16 is false: CAMPO_CPU_BF16=emulate, read by ExecContext's
//    constructor, forces the emulation path for every bf16 kernel (to compare, or to rule
//    the native path out); CAMPO_CPU_BF16=native (or unset) is the default.
//
// How fast each path is against f32: docs/kernels.md, "Low-precision kernels".
//
// The loop kernels compute what the emulation computes (the same f32 arithmetic, one
// rounding per output): element-wise results agree bit for bit; sums (batch-norm
// statistics, dbias) may vectorise in another order over bf16 than over f32 data, so they
// agree to f32 rounding (and a bf16 output to one ulp). oneDNN's bf16 primitives sum in
// their own order and round the result once: within about one bf16 ulp of the f32 kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

#include "ops/kernel.h"
#include "runtime/cpu_backend.h"  // cpu_has_native_bf16, cpu_has_native_f16

namespace campo {

// A bf16 element for kernels templated on their element type. Conversions are the exact
// ones of runtime/dtype.h, inline so loops vectorise them: widening is a shift, narrowing
// rounds to nearest even and keeps NaN a quiet NaN.
// Kernels store with `y[i] = f32_value` (operator=), not `y[i] = T(f32_value)`: inside an
// `omp simd` loop a temporary bfloat16 is addressable (its constructor takes `this`), and
// GCC privatises it into a per-lane array in memory, which makes the loop ~3x slower than
// the f32 one; the assignment works on y[i] itself.
struct bfloat16 {
  uint16_t bits;
  bfloat16() = default;
  explicit bfloat16(float x) : bits(round_from(x)) {}
  bfloat16& operator=(float x) {
    bits = round_from(x);
    return *this;
  }
  explicit operator float() const { return __builtin_bit_cast(float, uint32_t(bits) << 16); }
  explicit operator double() const { return double(float(*this)); }

  static uint16_t round_from(float x) {
    const uint32_t u = __builtin_bit_cast(uint32_t, x);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
};
static_assert(sizeof(bfloat16) == 2);

// Whether parallel_for runs the AVX-512 code of the bf16 loops: the CPU has AVX-512
// F/BW/VL/DQ and the tests have not switched it off (set_avx512_loops_enabled(false) runs
// the baseline x86-64 code of the same loops, to test it on a machine with AVX-512).
bool cpu_has_avx512_loops();
void set_avx512_loops_enabled(bool enabled);

namespace lp_detail {
#define CAMPO_AVX512_LOOPS __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

int thread_num();   // omp_get_thread_num()
int num_threads();  // omp_get_num_threads()
int max_threads();  // omp_get_max_threads()

template <typename F>
void parallel_for_baseline(int64_t n, bool parallel, int threads, const F& body) {
#pragma omp parallel for schedule(static) if (parallel) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// `flatten` inlines body and everything it calls into this function, so all of it is
// compiled for AVX-512 (a body too large to inline would otherwise stay a call to its
// baseline code), and a per-element body vectorises across i.
template <typename F>
CAMPO_AVX512_LOOPS __attribute__((flatten)) void run_range_avx512(const F& body, int64_t begin,
                                                                  int64_t end) {
  for (int64_t i = begin; i < end; ++i) body(i);
}

// Each thread takes one contiguous range, as schedule(static) does.
template <typename F>
CAMPO_AVX512_LOOPS void parallel_for_avx512(int64_t n, bool parallel, int threads, const F& body) {
#pragma omp parallel if (parallel) num_threads(threads)
  {
    const int64_t t = thread_num(), nt = num_threads();
    run_range_avx512(body, n * t / nt, n * (t + 1) / nt);
  }
}
#undef CAMPO_AVX512_LOOPS
}  // namespace lp_detail

// body(i) for i in [0, n), split statically over `threads` OpenMP threads (0: the default
// count) when `parallel`. For element type T = bfloat16 on a CPU with AVX-512 the loop is
// compiled for AVX-512: the baseline x86-64 code of a bf16 loop spends more on the
// conversions (SSE2 has no 32 -> 16-bit pack) than halving the bytes saves, while with
// AVX-512 it runs faster than the f32 loop (docs/kernels.md, "Low-precision kernels").
// f32 kernels keep the baseline code.
template <typename T, typename F>
void parallel_for(int64_t n, bool parallel, const F& body, int threads = 0) {
  if (threads <= 0) threads = lp_detail::max_threads();
  if constexpr (!std::is_same_v<T, float>) {
    if (cpu_has_avx512_loops()) return lp_detail::parallel_for_avx512(n, parallel, threads, body);
  }
  lp_detail::parallel_for_baseline(n, parallel, threads, body);
}

// The emulated kernel of spec.kind for spec.dtype (f16 or bf16), built on the op's f32
// kernel. Usable for any op with an f32 CPU kernel, also where a native kernel exists (the
// tests compare the two).
std::unique_ptr<Kernel> make_emulated_kernel(const KernelSpec& spec, ExecContext& ctx);
bool is_emulated_kernel(const Kernel& kernel);

// Kernel factories for the bf16 registrations of native kernels.
//   native_bf16_loops<F>:  F unless ctx.native_bf16 is false.
//   native_bf16_onednn<F>: F where also cpu_has_native_bf16() (oneDNN without AVX-512 BF16
//                          would convert internally, or run a reference implementation).
// Otherwise both build the emulated kernel.
template <KernelFactory F>
std::unique_ptr<Kernel> native_bf16_loops(const KernelSpec& spec, ExecContext& ctx) {
  if (!ctx.native_bf16) return make_emulated_kernel(spec, ctx);
  return F(spec, ctx);
}
template <KernelFactory F>
std::unique_ptr<Kernel> native_bf16_onednn(const KernelSpec& spec, ExecContext& ctx) {
  if (!ctx.native_bf16 || !cpu_has_native_bf16()) return make_emulated_kernel(spec, ctx);
  return F(spec, ctx);
}
// For the f16 registrations of oneDNN kernels: F where ctx.native_f16 and
// cpu_has_native_f16() (AVX-512 FP16; elsewhere oneDNN has no f16 convolution), otherwise
// the emulated kernel.
template <KernelFactory F>
std::unique_ptr<Kernel> native_f16_onednn(const KernelSpec& spec, ExecContext& ctx) {
  if (!ctx.native_f16 || !cpu_has_native_f16()) return make_emulated_kernel(spec, ctx);
  return F(spec, ctx);
}

}  // namespace campo
