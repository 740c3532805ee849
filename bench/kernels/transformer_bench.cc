// The transformer ops' CPU kernels (Softmax, Gelu, LayerNorm and their gradients) on
// BERT-base shapes at batch 8, sequence 128, and the exact Gelu as a plain std::erf loop
// (what oneDNN's gelu_erf replaces), side by side. Best of a few runs, thread CPU time.
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='TransformerBench.*'
// --quick: one small row of each, once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/kernels/bench_util.h"
#include "ops/kernel.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

// Best of `reps` runs of the kernel for `spec` after one warm-up, on random inputs (the
// statistics inputs of LayerNormGrad in [0.5, 1.5]: a valid inv_std).
double time_kernel(const KernelSpec& spec, int reps) {
  ExecContext ctx;
  auto kernel = create_kernel(spec, ctx);
  std::vector<Tensor> in, out;
  Rng rng(1);
  for (const TensorDesc& d : spec.inputs) in.push_back(random_tensor(d.shape, rng, 0.5f, 1.5f));
  for (const TensorDesc& d : spec.outputs) out.push_back(Tensor::zeros(d.shape, d.dtype));
  kernel->run(ctx, in, out);
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_ms();
    kernel->run(ctx, in, out);
    best = std::min(best, thread_ms() - t0);
  }
  return best;
}

// y = 0.5 x (1 + erf(x / sqrt(2))) as a plain loop.
double time_erf_loop(const Shape& s, int reps) {
  Rng rng(1);
  Tensor x = random_tensor(s, rng, -3.0f, 3.0f), y = Tensor::zeros(s, DType::f32);
  const float* xp = x.data_as<float>();
  float* yp = y.data_as<float>();
  const int64_t n = x.numel();
  double best = 1e300;
  for (int r = 0; r <= reps; ++r) {
    const double t0 = thread_ms();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) yp[i] = 0.5f * xp[i] * (1.0f + std::erf(xp[i] * 0.70710678f));
    if (r > 0) best = std::min(best, thread_ms() - t0);
  }
  return best;
}

TEST(TransformerBench, BertBaseShapesF32) {
  const bool quick = quick_mode();
  const int reps = quick ? 1 : 5;
  const int64_t tokens = quick ? 64 : 8 * 128;
  const Shape scores = quick ? Shape{2, 2, 32, 32} : Shape{8, 12, 128, 128};
  const Shape ffn{tokens, 3072}, hidden{tokens, 768}, rows{tokens}, c{768};
  const GeluAttrs exact{false};
  const LayerNormAttrs ln{1e-12f};
  struct Row {
    std::string name;
    KernelSpec spec;
  };
  const Row table[] = {
      {"Softmax [8,12,128,128]",
       {OpKind::Softmax, NoAttrs{}, DType::f32, {{scores}}, {{scores}}, "s"}},
      {"SoftmaxGrad",
       {OpKind::SoftmaxGrad, NoAttrs{}, DType::f32, {{scores}, {scores}}, {{scores}}, "s"}},
      {"Gelu erf [1024,3072]", {OpKind::Gelu, exact, DType::f32, {{ffn}}, {{ffn}}, "g"}},
      {"GeluGrad erf", {OpKind::GeluGrad, exact, DType::f32, {{ffn}, {ffn}}, {{ffn}}, "g"}},
      {"LayerNorm [1024,768]",
       {OpKind::LayerNorm, ln, DType::f32, {{hidden}, {c}, {c}}, {{hidden}, {rows}, {rows}}, "l"}},
      {"LayerNormGrad",
       {OpKind::LayerNormGrad,
        ln,
        DType::f32,
        {{hidden}, {hidden}, {c}, {rows}, {rows}},
        {{hidden}, {c}, {c}},
        "l"}},
  };
  std::printf("%-24s %9s\n", "op (f32)", "ms");
  for (const Row& row : table)
    std::printf("%-24s %9.3f\n", row.name.c_str(), time_kernel(row.spec, reps));
  std::printf("%-24s %9.3f\n", "std::erf loop gelu", time_erf_loop(ffn, reps));
}

}  // namespace
}  // namespace campo::testing
