// The roofline of `campo bench`: this machine's GEMM peak, measured once per run with the
// kernel every campo MatMul node runs (create_kernel on the benchmarked backend, so its
// oneDNN primitive, and on a CPU without native bf16 its emulation: the peak the policies
// can actually reach), and the share of it a training step achieves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "graph/flops.h"
#include "runtime/backend.h"
#include "runtime/dtype.h"

namespace campo {

struct GemmPeak {
  DType dtype = DType::f32;
  int64_t m = 0, n = 0, k = 0;  // the GEMM measured: C [m, n] = A [m, k] B [k, n]
  double gflops = 0;            // 2 m n k / the best of `reps` timed runs, after a warm-up
  int reps = 0;
};

// C = A B of size m x n x k in `dtype` (inputs and output; oneDNN accumulates in f32),
// `reps` timed runs after one warm-up run, on `backend`. Throws for a dtype the device has no
// MatMul for.
GemmPeak measure_gemm_peak(std::shared_ptr<Backend> backend, DType dtype, int64_t m, int64_t n,
                           int64_t k, int reps);

// The peak a step's GEMM mix can reach: the rate at which its GEMM FLOPs would run if each
// ran at the peak of its precision, F_gemm / (F_low / P_low + F_f32 / P_f32). For an f32
// step, P_f32; for a step with every GEMM in low precision, P_low.
// The rate, in GB/s (every input and output byte once), at which campo's Add kernel streams
// `n` elements of `dtype` on `backend`: the memory bandwidth where the kernel is native, the
// conversion rate where it is emulated (bf16 on a CPU without AVX-512 BF16). Best of `reps`
// runs after a warm-up.
double measure_stream_gbs(std::shared_ptr<Backend> backend, DType dtype, int64_t n, int reps);

double mixed_gemm_peak_gflops(const FlopCount& flops, double peak_f32, double peak_low);

}  // namespace campo
