// BERT's attention data movement and products on the CPU (ops/cpu/batch_matmul.cc,
// ops/cpu/transpose.cc), at its shapes (B = 32, heads 4 / 12, T 64 / 128, d = 64):
//  - BatchMatMulV2 (one batched oneDNN primitive) against B * heads 2-D MatMul kernels run
//    one after the other on the same buffers (what the op saves over a loop of MatMuls), for
//    the scores q k^T (adj_y) and the context p v;
//  - Transpose {0, 2, 1, 3} of [B, T, heads, d] (BERT's split into heads) against one
//    memcpy of the same bytes (the floor of any copy), in f32 and bf16.
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='AttentionBench.*'
// Wall clock, best of `reps` after one warm-up. --quick: the first shape, twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "bench/kernels/bench_util.h"
#include "ops/kernel.h"

namespace campo::testing {
namespace {

struct AttentionShape {
  int64_t batch, heads, T, d;
};

constexpr AttentionShape kShapes[] = {{32, 4, 64, 64}, {32, 12, 64, 64}, {32, 12, 128, 64}};

std::string describe(const AttentionShape& s) {
  return "B" + std::to_string(s.batch) + " h" + std::to_string(s.heads) + " T" +
         std::to_string(s.T) + " d" + std::to_string(s.d);
}

TEST(AttentionBench, BatchMatMulVsPerHeadMatMul) {
  const int count = quick_mode() ? 1 : int(std::size(kShapes));
  const int reps = quick_mode() ? 2 : 10;
  ExecContext ctx;
  std::printf("%-22s %-8s %12s %12s %9s\n", "shape", "product", "batched ms", "per-head ms",
              "per-head/batched");
  for (int i = 0; i < count; ++i) {
    const AttentionShape& s = kShapes[i];
    const int64_t heads = s.batch * s.heads;
    // scores [.., T, T] = q [.., T, d] k^T; context [.., T, d] = p [.., T, T] v [.., T, d].
    struct Product {
      const char* name;
      int64_t xr, xc, yr, yc, M, N;
      bool adj_y;
    };
    const Product products[] = {{"q k^T", s.T, s.d, s.T, s.d, s.T, s.T, true},
                                {"p v", s.T, s.T, s.T, s.d, s.T, s.d, false}};
    for (const Product& p : products) {
      const Shape xs{s.batch, s.heads, p.xr, p.xc}, ys{s.batch, s.heads, p.yr, p.yc},
          zs{s.batch, s.heads, p.M, p.N};
      Tensor x = Tensor::zeros(xs, DType::f32), y = Tensor::zeros(ys, DType::f32),
             z = Tensor::zeros(zs, DType::f32);
      const KernelSpec batched{OpKind::BatchMatMulV2,
                               BatchMatMulAttrs{false, p.adj_y},
                               DType::f32,
                               {{xs, DType::f32}, {ys, DType::f32}},
                               {{zs, DType::f32}},
                               "bmm"};
      const KernelSpec one{OpKind::MatMul,
                           MatMulAttrs{false, p.adj_y},
                           DType::f32,
                           {{{p.xr, p.xc}, DType::f32}, {{p.yr, p.yc}, DType::f32}},
                           {{{p.M, p.N}, DType::f32}},
                           "matmul"};
      auto bmm = create_kernel(batched, ctx);
      auto mm = create_kernel(one, ctx);
      // Each head's 2-D slices, borrowed from the batched buffers.
      std::vector<std::vector<Tensor>> ins, outs;
      for (int64_t h = 0; h < heads; ++h) {
        ins.push_back(
            {Tensor::borrow(x.data_as<float>() + h * p.xr * p.xc, {p.xr, p.xc}, DType::f32),
             Tensor::borrow(y.data_as<float>() + h * p.yr * p.yc, {p.yr, p.yc}, DType::f32)});
        outs.push_back(
            {Tensor::borrow(z.data_as<float>() + h * p.M * p.N, {p.M, p.N}, DType::f32)});
      }
      const double batched_ms = best_ms(reps, [&] { bmm->run(ctx, {x, y}, {z}); });
      const double per_head_ms = best_ms(reps, [&] {
        for (int64_t h = 0; h < heads; ++h) mm->run(ctx, ins[size_t(h)], outs[size_t(h)]);
      });
      std::printf("%-22s %-8s %12.3f %12.3f %9.2f\n", describe(s).c_str(), p.name, batched_ms,
                  per_head_ms, per_head_ms / batched_ms);
    }
  }
}

TEST(AttentionBench, TransposeVsMemcpy) {
  const int count = quick_mode() ? 1 : int(std::size(kShapes));
  const int reps = quick_mode() ? 2 : 20;
  ExecContext ctx;
  std::printf("%-22s %5s %8s %12s %10s %14s\n", "[B, T, heads, d]", "dtype", "MB", "transpose ms",
              "memcpy ms", "transpose/memcpy");
  for (int i = 0; i < count; ++i) {
    const AttentionShape& s = kShapes[i];
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Shape in{s.batch, s.T, s.heads, s.d}, out{s.batch, s.heads, s.T, s.d};
      const KernelSpec spec{
          OpKind::Transpose, TransposeAttrs{{0, 2, 1, 3}}, dtype, {{in, dtype}}, {{out, dtype}},
          "transpose"};
      auto kernel = create_kernel(spec, ctx);
      Tensor x = Tensor::zeros(in, dtype), y = Tensor::zeros(out, dtype);
      const double transpose_ms = best_ms(reps, [&] { kernel->run(ctx, {x}, {y}); });
      const double memcpy_ms = best_ms(reps, [&] { std::memcpy(y.data(), x.data(), x.nbytes()); });
      std::printf("%-22s %5s %8.2f %12.3f %10.3f %14.2f\n", describe(s).c_str(), dtype_name(dtype),
                  double(x.nbytes()) / 1e6, transpose_ms, memcpy_ms, transpose_ms / memcpy_ms);
    }
  }
}

}  // namespace
}  // namespace campo::testing
