// The optimizer's bf16 weight copy (ops/cpu/optimizer.cc) timed against the Cast it
// replaces; docs/kernels.md has the figures this printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench/kernels/bench_util.h"
#include "ops/kernel.h"
#include "ops/op.h"
#include "runtime/timer.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

Tensor scalar(float v) { return Tensor::from_vector(std::vector<float>{v}, {}); }

// ApplyMomentum over ResNet-50's 23.5M parameters without and with a bf16 weight copy,
// against the separate Cast the copy replaces. Minimum of 6 repetitions of 5 updates each
// (wall clock); --quick: one repetition of one update.
//   build/campo_bench_kernels --gtest_filter='OptimizerBench.*'
TEST(OptimizerBench, WeightCopyAgainstCast) {
  Rng rng(1);
  const Shape shape{23520842};
  Tensor var = random_tensor(shape, rng), accum = random_tensor(shape, rng);
  Tensor grad = random_tensor(shape, rng), copy = Tensor::zeros(shape, DType::bf16);
  ExecContext ctx;
  const char* names[] = {"update", "update writing the copy", "separate cast"};
  double best[3] = {1e30, 1e30, 1e30};
  const int reps = quick_mode() ? 1 : 6, updates = quick_mode() ? 1 : 5;
  for (int rep = 0; rep < reps; ++rep) {
    for (int variant = 0; variant < 3; ++variant) {
      Timer t;
      for (int i = 0; i < updates; ++i) {
        if (variant == 2) {
          convert(var.data(), DType::f32, copy.data(), DType::bf16, size_t(var.numel()));
          continue;
        }
        std::vector<Tensor> in = {var, accum, grad, scalar(0.0f)};
        if (variant == 1) in.push_back(copy);
        run_op_eager(OpKind::ApplyMomentum, MomentumAttrs{}, DType::f32, in, {}, ctx);
      }
      best[variant] = std::min(best[variant], t.milliseconds() / updates);
    }
  }
  for (int v = 0; v < 3; ++v) std::printf("%-26s %8.3f ms\n", names[v], best[v]);
}

}  // namespace
}  // namespace campo::testing
