// Padding of low-precision GEMMs and convolutions (amp/padding.h, ops/cpu/matmul.cc,
// ops/conv_padding.h): the decision's shapes timed unpadded, padded and (GEMMs) on already
// aligned operands; docs/kernels.md has the figures this printed.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdio>
#include <iterator>
#include <string>

#include "amp/padding.h"
#include "bench/kernels/bench_util.h"
#include "graph/graph.h"
#include "ops/cpu/low_precision.h"
#include "runtime/cpu_backend.h"
#include "tests/ops/padding_util.h"

namespace campo::testing {
namespace {

// The shapes of the measurement that motivated padding (PyTorch, oneDNN bf16, 1 thread:
// 64x4097x1000 1.27x faster with K padded to 4112; the small ones no gain) and the backward
// MatMuls of that layer, timed by time_padding as the decision does (wall clock, copies
// included, minimum of 20 alternating runs). "aligned" is the GEMM on the padded shape
// with operands that already have it (no copies): what padding could gain at best.
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='PaddingBench.*'
// --quick: the first two shapes, two runs each.
TEST(PaddingBench, UnpaddedVsPadded) {
  if (!cpu_has_native_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  const Gemm gemms[] = {{64, 4097, 1000},       {64, 1000, 4097, false, true},
                        {4097, 64, 1000, true}, {64, 500, 10},
                        {256, 100, 100},        {512, 147, 64}};
  const int shapes = quick_mode() ? 2 : int(std::size(gemms));
  const PaddingTimingOptions options =
      quick_mode() ? PaddingTimingOptions{kPadTo, 1, 2, 0.05, default_cpu_backend()}
                   : PaddingTimingOptions{kPadTo, 3, 20, 0.05, default_cpu_backend()};
  auto aligned = [](int64_t n) { return (n + kPadTo - 1) / kPadTo * kPadTo; };
  std::printf("%-24s %11s %11s %11s %9s %10s %5s\n", "bf16 MxKxN (threads)", "unpadded ms",
              "padded ms", "aligned ms", "unp/pad", "unp/align", "pays");
  for (int i = 0; i < shapes; ++i) {
    const Gemm& m = gemms[i];
    Graph g;
    const NodeId mm = add_matmul(g, m, DType::bf16, "mm");
    Gemm m_aligned = m;
    m_aligned.K = aligned(m.K);
    m_aligned.N = aligned(m.N);
    const NodeId mm_aligned = add_matmul(g, m_aligned, DType::bf16, "mm_aligned");
    const PaddingTiming t = time_padding(g, mm, options);
    const double aligned_ms = time_padding(g, mm_aligned, options).unpadded_ms;
    std::printf("%-24s %11.3f %11.3f %11.3f %9.2f %10.2f %5s\n",
                (gemm_name(m) + " (" + std::to_string(omp_get_max_threads()) + ")").c_str(),
                t.unpadded_ms, t.padded_ms, aligned_ms, t.unpadded_ms / t.padded_ms,
                t.unpadded_ms / aligned_ms, t.pays(options.min_gain) ? "yes" : "no");
    std::fflush(stdout);
  }
}

// The convolutions with unaligned channels of LeNet (28x28 Fashion-MNIST, pad 2) and of
// ResNet-18's small stem on 32x32 single-channel images, batch 64, each op of the family
// that their training step runs (the image's gradient is not computed), timed by
// time_padding as the decision does (wall clock, copies included).
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='PaddingBench.Conv*'
// --quick: the first two rows, two runs each.
TEST(PaddingBench, ConvUnpaddedVsPadded) {
  if (!cpu_has_native_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  struct Row {
    OpKind kind;
    ConvCase conv;
  };
  const ConvCase lenet_c1{"lenet.conv1 c1 k6", {64, 1, 28, 28}, {6, 1, 5, 5}, 1, 2};
  const ConvCase lenet_c2{"lenet.conv2 c6 k16", {64, 6, 14, 14}, {16, 6, 5, 5}};
  const ConvCase resnet_stem{"resnet18.conv1 c1 k64", {64, 1, 32, 32}, {64, 1, 3, 3}, 1, 1};
  const Row rows[] = {{OpKind::Conv2D, lenet_c1},
                      {OpKind::Conv2DBackpropFilter, lenet_c1},
                      {OpKind::Conv2D, lenet_c2},
                      {OpKind::Conv2DBackpropInput, lenet_c2},
                      {OpKind::Conv2DBackpropFilter, lenet_c2},
                      {OpKind::Conv2D, resnet_stem},
                      {OpKind::Conv2DBackpropFilter, resnet_stem}};
  const int shapes = quick_mode() ? 2 : int(std::size(rows));
  const PaddingTimingOptions options =
      quick_mode() ? PaddingTimingOptions{kPadTo, 1, 2, 0.05, default_cpu_backend()}
                   : PaddingTimingOptions{kPadTo, 3, 20, 0.05, default_cpu_backend()};
  std::printf("%-46s %11s %11s %9s %5s\n", "bf16 conv (threads)", "unpadded ms", "padded ms",
              "unp/pad", "pays");
  for (int i = 0; i < shapes; ++i) {
    const Row& r = rows[i];
    Graph g;
    const NodeId id = add_conv(g, r.kind, r.conv, DType::bf16, "conv");
    const PaddingTiming t = time_padding(g, id, options);
    const std::string name = std::string(op_name(r.kind)) + " " + r.conv.name + " (" +
                             std::to_string(omp_get_max_threads()) + ")";
    std::printf("%-46s %11.3f %11.3f %9.2f %5s\n", name.c_str(), t.unpadded_ms, t.padded_ms,
                t.unpadded_ms / t.padded_ms, t.pays(options.min_gain) ? "yes" : "no");
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace campo::testing
