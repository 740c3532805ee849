// Low-precision CPU kernels (ops/cpu/low_precision.h) timed against f32: oneDNN's conv /
// matmul, the bf16 loops of the memory-bound ops, emulated bf16 / f16, and whole training
// steps under the `amp` policy. Best of a few runs, thread CPU time; docs/kernels.md has
// the figures these printed.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "bench/kernels/bench_util.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"
#include "tests/ops/low_precision_util.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

// Best of `reps` runs after one warm-up.
double time_kernel(const KernelSpec& spec, ExecContext& ctx, int reps) {
  auto kernel = create_kernel(spec, ctx);
  std::vector<Tensor> in, out;
  Rng rng(1);
  for (const TensorDesc& d : spec.inputs)
    in.push_back(is_floating(d.dtype) ? as_dtype(random_tensor(d.shape, rng), d.dtype)
                                      : Tensor::zeros(d.shape, d.dtype));  // argmax 0: valid
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

KernelSpec with_dtype(KernelSpec s, DType dtype) {
  s.dtype = dtype;
  for (auto& d : s.inputs) d.dtype = dtype;
  for (auto& d : s.outputs) d.dtype = dtype;
  return s;
}

// Conv2D (fwd, backprop input, backprop filter) and MatMul on ResNet-50 / VGG-16 / LeNet
// layer shapes: f32, native bf16 and emulated f16 kernels, side by side.
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='LowPrecisionBench.Conv*'
// --quick: the LeNet layers and the small GEMMs, once.
TEST(LowPrecisionBench, ConvMatMulBf16VsF32) {
  if (!cpu_has_native_bf16()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  struct Layer {
    const char* name;
    int n, c, h, o, k, s, p;
  };
  const Layer layers[] = {
      {"resnet50 conv1 7x7/2 3->64 @224", 16, 3, 224, 64, 7, 2, 3},
      {"resnet50 l1 1x1 64->64 @56", 16, 64, 56, 64, 1, 1, 0},
      {"resnet50 l1 3x3 64->64 @56", 16, 64, 56, 64, 3, 1, 1},
      {"resnet50 l1 1x1 64->256 @56", 16, 64, 56, 256, 1, 1, 0},
      {"resnet50 l3 3x3 256->256 @14", 16, 256, 14, 256, 3, 1, 1},
      {"resnet50 l3 1x1 1024->256 @14", 16, 1024, 14, 256, 1, 1, 0},
      {"resnet50 l4 3x3 512->512 @7", 16, 512, 7, 512, 3, 1, 1},
      {"resnet50 l4 1x1 512->2048 @7", 16, 512, 7, 2048, 1, 1, 0},
      {"vgg16 conv1_1 3x3 3->64 @224", 16, 3, 224, 64, 3, 1, 1},
      {"vgg16 conv5 3x3 512->512 @14", 16, 512, 14, 512, 3, 1, 1},
      {"lenet c1 5x5 1->6 @28", 32, 1, 28, 6, 5, 1, 2},
      {"lenet c2 5x5 6->16 @14", 32, 6, 14, 16, 5, 1, 0},
  };
  // --quick: the LeNet layers and the MLP's GEMMs only, once.
  auto in_quick_set = [](std::string_view name) {
    return name.starts_with("lenet") || name.starts_with("mlp");
  };
  const int reps = quick_mode() ? 1 : 3;
  ExecContext ctx;
  std::printf("%-34s %-6s %9s %9s %9s %7s %7s\n", "layer (threads)", "pass", "f32 ms", "bf16 ms",
              "f16 ms", "f32/bf", "f32/f16");
  auto report = [&](const std::string& name, const char* pass, const KernelSpec& f32, int reps) {
    const double t32 = time_kernel(f32, ctx, reps);
    const double tb = time_kernel(with_dtype(f32, DType::bf16), ctx, reps);
    const double th = time_kernel(with_dtype(f32, DType::f16), ctx, reps);
    std::printf("%-34s %-6s %9.2f %9.2f %9.2f %7.2f %7.2f\n", name.c_str(), pass, t32, tb, th,
                t32 / tb, t32 / th);
    std::fflush(stdout);
  };
  const std::string threads = " (" + std::to_string(omp_get_max_threads()) + ")";
  for (const Layer& l : layers) {
    if (quick_mode() && !in_quick_set(l.name)) continue;
    const int64_t oh = (l.h + 2 * l.p - l.k) / l.s + 1;
    const Shape x{l.n, l.c, l.h, l.h}, w{l.o, l.c, l.k, l.k}, y{l.n, l.o, oh, oh};
    report(l.name + threads, "fwd",
           {OpKind::Conv2D, conv(l.s, l.p), DType::f32, {{x}, {w}}, {{y}}, "c"}, reps);
    report(l.name + threads, "bwd_x",
           {OpKind::Conv2DBackpropInput, conv(l.s, l.p, x), DType::f32, {{y}, {w}}, {{x}}, "c"},
           reps);
    report(l.name + threads, "bwd_w",
           {OpKind::Conv2DBackpropFilter, conv(l.s, l.p, w), DType::f32, {{x}, {y}}, {{w}}, "c"},
           reps);
  }
  struct Gemm {
    const char* name;
    int64_t m, k, n;
  };
  const Gemm gemms[] = {{"resnet50 fc 32x2048 * 2048x1000", 32, 2048, 1000},
                        {"vgg16 fc6 16x25088 * 25088x4096", 16, 25088, 4096},
                        {"vgg16 fc7 16x4096 * 4096x4096", 16, 4096, 4096},
                        {"mlp 32x784 * 784x128", 32, 784, 128},
                        {"mlp 32x128 * 128x10", 32, 128, 10}};
  for (const Gemm& g : gemms) {
    if (quick_mode() && !in_quick_set(g.name)) continue;
    report(g.name + threads, "fwd",
           {OpKind::MatMul,
            MatMulAttrs{},
            DType::f32,
            {{{g.m, g.k}}, {{g.k, g.n}}},
            {{{g.m, g.n}}},
            "m"},
           reps);
  }
}

// The memory-bound ops of a ResNet / VGG training step on a [16, 64, 56, 56] activation (a
// ResNet-50 layer1 tensor): f32, native bf16 loops and emulated bf16 / f16, side by side.
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='LowPrecisionBench.Elementwise*'
// --quick: every op, once.
TEST(LowPrecisionBench, ElementwiseBf16VsF32) {
  const Shape x{16, 64, 56, 56}, c{64}, pooled{16, 64, 28, 28};
  const BatchNormAttrs bn{1e-5f, 0.1f, true};
  const PoolAttrs stem = pool(3, 2, 1, x);
  const Shape global{16, 2048, 4, 4}, gap{16, 2048, 1, 1};
  struct Op {
    std::string name;
    KernelSpec spec;
  };
  // MaxPool 2x2/2 (or its gradient) on input shape s.
  auto max_pool_2x2 = [](const Shape& s, bool grad) -> Op {
    const Shape p{s[0], s[1], s[2] / 2, s[3] / 2};
    const std::string name = (grad ? "MaxPoolGrad 2/2 " : "MaxPool 2x2/2 ") + std::to_string(s[1]) +
                             "x" + std::to_string(s[2]);
    if (grad)
      return {
          name,
          {OpKind::MaxPoolGrad, pool(2, 2, 0, s), DType::f32, {{p}, {p, DType::i32}}, {{s}}, "p"}};
    return {name,
            {OpKind::MaxPool, pool(2, 2, 0, s), DType::f32, {{s}}, {{p}, {p, DType::i32}}, "p"}};
  };
  const Op ops[] = {
      {"Relu", {OpKind::Relu, NoAttrs{}, DType::f32, {{x}}, {{x}}, "r"}},
      {"ReluGrad", {OpKind::ReluGrad, NoAttrs{}, DType::f32, {{x}, {x}}, {{x}}, "r"}},
      {"LeakyRelu", {OpKind::LeakyRelu, LeakyReluAttrs{0.2f}, DType::f32, {{x}}, {{x}}, "l"}},
      {"LeakyReluGrad",
       {OpKind::LeakyReluGrad, LeakyReluAttrs{0.2f}, DType::f32, {{x}, {x}}, {{x}}, "l"}},
      {"Add", {OpKind::Add, NoAttrs{}, DType::f32, {{x}, {x}}, {{x}}, "a"}},
      {"AddN(3)", {OpKind::AddN, NoAttrs{}, DType::f32, {{x}, {x}, {x}}, {{x}}, "a"}},
      {"BiasAdd", {OpKind::BiasAdd, NoAttrs{}, DType::f32, {{x}, {c}}, {{x}}, "b"}},
      {"BiasAddGrad", {OpKind::BiasAddGrad, NoAttrs{}, DType::f32, {{x}}, {{c}}, "b"}},
      {"FusedBatchNorm",
       {OpKind::FusedBatchNorm, bn, DType::f32, {{x}, {c}, {c}, {c}, {c}}, {{x}, {c}, {c}}, "bn"}},
      {"FusedBatchNormGrad",
       {OpKind::FusedBatchNormGrad,
        bn,
        DType::f32,
        {{x}, {x}, {c}, {c}, {c}},
        {{x}, {c}, {c}},
        "bn"}},
      {"MaxPool 3x3/2",
       {OpKind::MaxPool, stem, DType::f32, {{x}}, {{pooled}, {pooled, DType::i32}}, "p"}},
      {"MaxPoolGrad 3x3/2",
       {OpKind::MaxPoolGrad, stem, DType::f32, {{pooled}, {pooled, DType::i32}}, {{x}}, "p"}},
      // VGG-16's pools at batch 32 on 32x32 images, and ResNet's global average pool.
      max_pool_2x2({32, 64, 32, 32}, false),
      max_pool_2x2({32, 64, 32, 32}, true),
      max_pool_2x2({32, 128, 16, 16}, false),
      max_pool_2x2({32, 128, 16, 16}, true),
      max_pool_2x2({32, 256, 8, 8}, false),
      max_pool_2x2({32, 256, 8, 8}, true),
      max_pool_2x2({32, 512, 4, 4}, false),
      max_pool_2x2({32, 512, 4, 4}, true),
      {"AvgPool global 2048x4",
       {OpKind::AvgPool, pool(4, 1, 0, global), DType::f32, {{global}}, {{gap}}, "p"}},
      {"AvgPoolGrad gl 2048x4",
       {OpKind::AvgPoolGrad, pool(4, 1, 0, global), DType::f32, {{gap}}, {{global}}, "p"}},
  };
  std::printf("%-22s %9s %9s %9s %9s %7s %7s\n", "op (threads)", "f32 ms", "bf16 ms", "bf16em ms",
              "f16em ms", "f32/bf", "f32/em");
  ExecContext native_ctx, emulated_ctx;
  emulated_ctx.native_bf16 = false;
  for (const Op& op : ops) {
    // Low-precision specs: floating data in the dtype, batch-norm's per-channel tensors f32.
    auto low = [&](DType dtype) {
      KernelSpec s = op.spec;
      s.dtype = dtype;
      const std::vector<int>& keep = op_schema(s.kind).fp32_inputs;
      for (int i = 0; i < int(s.inputs.size()); ++i)
        if (s.inputs[size_t(i)].dtype == DType::f32 &&
            std::find(keep.begin(), keep.end(), i) == keep.end())
          s.inputs[size_t(i)].dtype = dtype;
      for (auto& d : s.outputs)
        if (d.dtype == DType::f32 && d.shape.size() > 1) d.dtype = dtype;
      if (s.kind == OpKind::BiasAddGrad) s.outputs[0].dtype = dtype;
      return s;
    };
    const int reps = quick_mode() ? 1 : 3;
    const double t32 = time_kernel(op.spec, native_ctx, reps);
    const double tb = time_kernel(low(DType::bf16), native_ctx, reps);
    const double tbe = time_kernel(low(DType::bf16), emulated_ctx, reps);
    const double th = time_kernel(low(DType::f16), native_ctx, reps);
    std::printf("%-22s %9.2f %9.2f %9.2f %9.2f %7.2f %7.2f\n",
                (op.name + " (" + std::to_string(omp_get_max_threads()) + ")").c_str(), t32, tb,
                tbe, th, t32 / tb, t32 / tbe);
    std::fflush(stdout);
  }
}

// Whole training steps (forward, backward, SGD) of ResNet / VGG, f32 against the `amp`
// policy in bf16 (native kernels) and in bf16 emulated, side by side; thread CPU time of
// the second of two steps.
//   OMP_NUM_THREADS=1 build/campo_bench_kernels --gtest_filter='LowPrecisionBench.Training*'
// --quick: ResNet-18 on 4 images of 32x32 only.
TEST(LowPrecisionBench, TrainingStepBf16VsF32) {
  struct Model {
    const char* name;
    Shape images;
  };
  std::vector<Model> models = {
      {"resnet18", {32, 3, 32, 32}}, {"resnet50", {16, 3, 224, 224}}, {"vgg16", {32, 3, 32, 32}}};
  if (quick_mode()) models = {{"resnet18", {4, 3, 32, 32}}};
  std::printf("%-10s %-18s %10s %10s %12s %7s %7s\n", "model", "images", "f32 ms", "bf16 ms",
              "bf16em ms", "f32/bf", "f32/em");
  for (const Model& m : models) {
    auto step_ms = [&](DType dtype) {
      TrainingStep step(m.name, m.images, dtype);
      step.run();
      const double t0 = thread_ms();
      step.run();
      return thread_ms() - t0;
    };
    const double t32 = step_ms(DType::f32);
    const double tb = step_ms(DType::bf16);
    double tbe;
    {
      ScopedEnv env("CAMPO_CPU_BF16", "emulate");  // read by the executor's ExecContext
      tbe = step_ms(DType::bf16);
    }
    std::printf("%-10s %-18s %10.0f %10.0f %12.0f %7.2f %7.2f\n", m.name,
                shape_str(m.images).c_str(), t32, tb, tbe, t32 / tb, t32 / tbe);
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace campo::testing
