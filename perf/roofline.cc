#include "perf/roofline.h"

#include <algorithm>

#include "ops/kernel.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/timer.h"

namespace campo {

namespace {

// The fastest of `reps` runs of the kernel of `spec` on these tensors, after a warm-up run
// (first-touch pages, caches, lazy JIT), each timed once the device has finished it.
double best_run_seconds(ExecContext& ctx, const KernelSpec& spec, const std::vector<Tensor>& inputs,
                        const std::vector<Tensor>& outputs, int reps) {
  std::unique_ptr<Kernel> kernel = create_kernel(spec, ctx);
  run_kernel(*kernel, ctx, inputs, outputs);
  ctx.backend().synchronize();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    run_kernel(*kernel, ctx, inputs, outputs);
    ctx.backend().synchronize();
    best = std::min(best, t.seconds());
  }
  return best;
}

}  // namespace

GemmPeak measure_gemm_peak(std::shared_ptr<Backend> backend_ptr, DType dtype, int64_t m, int64_t n,
                           int64_t k, int reps) {
  CAMPO_CHECK(m > 0 && n > 0 && k > 0 && reps > 0, "internal: GEMM peak of ", m, "x", n, "x", k,
              ", ", reps, " repetitions");
  ExecContext ctx(required_backend(std::move(backend_ptr)));
  Backend& backend = ctx.backend();
  KernelSpec spec{OpKind::MatMul,    MatMulAttrs{}, dtype, {{{m, k}, dtype}, {{k, n}, dtype}},
                  {{{m, n}, dtype}}, "gemm_peak"};
  const double best =
      best_run_seconds(ctx, spec, {backend.zeros({m, k}, dtype), backend.zeros({k, n}, dtype)},
                       {backend.zeros({m, n}, dtype)}, reps);
  GemmPeak p;
  p.dtype = dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  p.reps = reps;
  p.gflops = 2.0 * double(m) * double(n) * double(k) / best * 1e-9;
  return p;
}

double measure_stream_gbs(std::shared_ptr<Backend> backend_ptr, DType dtype, int64_t n, int reps) {
  CAMPO_CHECK(n > 0 && reps > 0, "internal: stream rate of ", n, " elements, ", reps,
              " repetitions");
  ExecContext ctx(required_backend(std::move(backend_ptr)));
  Backend& backend = ctx.backend();
  KernelSpec spec{OpKind::Add,    NoAttrs{},    dtype, {{{n}, dtype}, {{n}, dtype}},
                  {{{n}, dtype}}, "stream_rate"};
  const double best =
      best_run_seconds(ctx, spec, {backend.zeros({n}, dtype), backend.zeros({n}, dtype)},
                       {backend.zeros({n}, dtype)}, reps);
  return 3.0 * double(n) * double(dtype_size(dtype)) / best * 1e-9;
}

double mixed_gemm_peak_gflops(const FlopCount& flops, double peak_f32, double peak_low) {
  const double low = double(flops.gemm_low), f32 = double(flops.gemm - flops.gemm_low);
  if (low + f32 <= 0) return 0;
  double seconds = 0;  // per FLOP-unit, at the peaks (GFLOP / (GFLOP/s))
  if (f32 > 0) {
    if (peak_f32 <= 0) return 0;
    seconds += f32 / peak_f32;
  }
  if (low > 0) {
    if (peak_low <= 0) return 0;
    seconds += low / peak_low;
  }
  return (low + f32) / seconds;
}

}  // namespace campo
