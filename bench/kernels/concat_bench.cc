// ConcatV2 / SplitV (ops/cpu/concat.cc) on Inception-v3's channel concatenations (NCHW,
// axis 1, batch 32), timed against oneDNN's concat primitive on the same buffers;
// docs/kernels.md ("Concat") has the figures this printed.
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='ConcatBench.*'
//   OMP_NUM_THREADS=2 build/campo_bench_kernels --gtest_filter='ConcatBench.*'
// Wall clock, best of `reps` after one warm-up (a copy's threads are the point here, so
// thread CPU time would not do). --quick: the first block, twice.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#include "bench/kernels/bench_util.h"
#include "ops/cpu/context.h"
#include "ops/kernel.h"

namespace campo::testing {
namespace {

dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::bf16:
      return dnnl::memory::data_type::bf16;
    case DType::f16:
      return dnnl::memory::data_type::f16;
    default:
      return dnnl::memory::data_type::f32;
  }
}

struct Block {
  const char* name;
  int64_t hw;
  std::vector<int64_t> channels;
};

TEST(ConcatBench, KernelVsOneDnnConcat) {
  const Block blocks[] = {
      {"Mixed_5b 35x35", 35, {64, 64, 96, 32}},
      {"Mixed_5c 35x35", 35, {64, 64, 96, 64}},
      {"Mixed_6a 17x17", 17, {384, 96, 288}},
      {"Mixed_6b 17x17", 17, {192, 192, 192, 192}},
      {"Mixed_7b 8x8", 8, {320, 384, 384, 384, 384, 192}},
  };
  const int64_t n = 32;
  const int count = quick_mode() ? 1 : int(std::size(blocks));
  const int reps = quick_mode() ? 2 : 20;
  ExecContext ctx;
  dnnl::engine& engine = cpu_engine(ctx);
  dnnl::stream& stream = cpu_stream(ctx);
  std::printf("%-30s %5s %8s %10s %10s %10s %9s\n", "block (threads)", "dtype", "MB", "concat ms",
              "split ms", "oneDNN ms", "oneDNN/us");
  for (int b = 0; b < count; ++b) {
    const Block& blk = blocks[b];
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      KernelSpec concat{OpKind::ConcatV2, ConcatAttrs{1}, dtype, {}, {}, "concat"};
      SplitAttrs split_attrs{1, {}};
      int64_t total_c = 0;
      for (int64_t c : blk.channels) {
        concat.inputs.push_back({{n, c, blk.hw, blk.hw}, dtype});
        split_attrs.size_splits.push_back(c);
        total_c += c;
      }
      const Shape out_shape{n, total_c, blk.hw, blk.hw};
      concat.outputs = {{out_shape, dtype}};
      KernelSpec split{OpKind::SplitV, split_attrs, dtype, concat.outputs, concat.inputs, "split"};
      std::vector<Tensor> parts;
      for (const TensorDesc& d : concat.inputs) parts.push_back(Tensor::zeros(d.shape, dtype));
      std::vector<Tensor> whole = {Tensor::zeros(out_shape, dtype)};
      auto concat_kernel = create_kernel(concat, ctx);
      auto split_kernel = create_kernel(split, ctx);
      const double concat_ms = best_ms(reps, [&] { concat_kernel->run(ctx, parts, whole); });
      const double split_ms = best_ms(reps, [&] { split_kernel->run(ctx, whole, parts); });

      // oneDNN's concat on the same buffers (plain nchw).
      std::vector<dnnl::memory::desc> src_descs;
      std::vector<dnnl::memory> srcs;
      for (const Tensor& t : parts) {
        dnnl::memory::desc d({t.shape().begin(), t.shape().end()}, dnnl_type(dtype),
                             dnnl::memory::format_tag::nchw);
        src_descs.push_back(d);
        srcs.emplace_back(d, engine, t.device_data());
      }
      double onednn_ms = -1;
      try {
        dnnl::memory::desc dst_desc({out_shape.begin(), out_shape.end()}, dnnl_type(dtype),
                                    dnnl::memory::format_tag::nchw);
        dnnl::concat::primitive_desc pd(engine, dst_desc, 1, src_descs);
        dnnl::concat prim(pd);
        dnnl::memory dst(dst_desc, engine, whole[0].device_data());
        std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DST, dst}};
        for (size_t i = 0; i < srcs.size(); ++i) args[DNNL_ARG_MULTIPLE_SRC + int(i)] = srcs[i];
        onednn_ms = best_ms(reps, [&] {
          prim.execute(stream, args);
          stream.wait();
        });
      } catch (const dnnl::error& e) {
        std::printf("  (oneDNN concat unavailable for %s: %s)\n", dtype_name(dtype), e.what());
      }
      const std::string row =
          std::string(blk.name) + " (" + std::to_string(omp_get_max_threads()) + ")";
      std::printf("%-30s %5s %8.1f %10.3f %10.3f %10.3f %9.2f\n", row.c_str(), dtype_name(dtype),
                  double(whole[0].nbytes()) / 1e6, concat_ms, split_ms, onednn_ms,
                  onednn_ms > 0 ? onednn_ms / concat_ms : 0.0);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace campo::testing
