// The CUDA quantized GEMM (ops/cuda/quantized_gemm.cu) against the CPU's emulation
// (ops/cpu/quantized_gemm.cc, the specification) on the same inputs and state:
//  - the state (scale, step count, amax history) bit for bit after every step: the amax is
//    exact in any order and the scale rule is the same f32 arithmetic (runtime/gemm_quant.h);
//  - the product of the same codes: each output within `bound` of the CPU's, a fraction of
//    M(m, n) = sum_k |a_mk| |b_kn| (the original operands; a decoded operand is within 2^-2 of
//    them), the textbook bound for sums in another order:
//      cuBLASLt FP8: 2^-10 M. The FP8 tensor cores accumulate a block of K products with at
//        least 13 bits kept before cuBLASLt (without CUBLASLT_MATMUL_DESC_FAST_ACCUM) adds the
//        block into an f32 sum, so each block's error is below 2^-13 of its magnitude.
//      emulated (cuBLASLt f32, no TF32): 2^-16 M, far above K 2^-24 for every K here;
//  - integer codes: the exact product on the FP8 tensor cores too (every partial sum below
//    2^11 is exact in any accumulator);
//  - overflow, saturating or not, with NaN and inf where the CPU has them;
//  - MX refused on cuda with its line.
// Skipped, saying why, without a GPU (tests/cuda/cuda_test_util.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ops/op.h"
#include "ops/quantized_gemm_route.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::random_tensor;

constexpr ElementFormat e4m3 = ElementFormat::e4m3;
constexpr ElementFormat e5m2 = ElementFormat::e5m2;

GemmQuant fp8(ElementFormat a, ElementFormat b, Scaling scaling, int history = 4) {
  GemmQuant q;
  q.enabled = true;
  q.format = "fp8";
  q.element = {a, b};
  q.recipe.scaling = scaling;
  q.recipe.history = history;
  return q;
}

Tensor host_copy(const Tensor& t) {
  Tensor c = Tensor::zeros(t.shape(), t.dtype());
  std::memcpy(c.data(), t.data(), size_t(t.numel()) * dtype_size(t.dtype()));
  return c;
}

struct Step {
  Tensor y;                   // host
  std::vector<Tensor> state;  // host, after the step
};

// One step of the quantized GEMM on `backend` from host operands and host state (copied:
// the arguments are left as they are); host copies of the output and the new state.
Step run_step(const std::shared_ptr<Backend>& backend, OpKind kind, const Attrs& attrs,
              const GemmQuant& q, const Tensor& a, const Tensor& b, const Shape& out,
              const std::vector<Tensor>& state) {
  ExecContext ctx(backend);
  KernelSpec spec{kind,
                  attrs,
                  DType::f32,
                  {{a.shape(), DType::f32}, {b.shape(), DType::f32}},
                  {{out, DType::f32}},
                  "test.gemm",
                  0,
                  q,
                  {}};
  for (const Tensor& s : state) spec.quant_state.push_back(backend->to_device(s));
  auto kernel = create_kernel(spec, ctx);
  const Tensor y = backend->zeros(out, DType::f32);
  run_kernel(*kernel, ctx, {backend->to_device(a), backend->to_device(b)}, {y});
  backend->synchronize();
  Step r{backend->to_host(y), {}};
  for (const Tensor& s : spec.quant_state) r.state.push_back(backend->to_host(s));
  return r;
}

std::vector<Tensor> fresh_state(const GemmQuant& q) {
  return {Tensor::zeros({gemm_quant_state_size(q.recipe)}, DType::f32),
          Tensor::zeros({gemm_quant_state_size(q.recipe)}, DType::f32)};
}

Tensor absolute(const Tensor& x) {
  Tensor a = host_copy(x);
  for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = std::fabs(a.data_as<float>()[i]);
  return a;
}

// M(m, n) of the file comment: the op itself (f32, on the CPU) on |a| and |b|.
Tensor magnitude(OpKind kind, const Attrs& attrs, const Tensor& a, const Tensor& b,
                 const Shape& out) {
  ExecContext cpu;
  return run_op_eager(kind, attrs, DType::f32, {absolute(a), absolute(b)}, {{out, DType::f32}},
                      cpu)[0];
}

::testing::AssertionResult states_equal(const std::vector<Tensor>& gpu,
                                        const std::vector<Tensor>& cpu) {
  for (size_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < cpu[i].numel(); ++k) {
      const float g = gpu[i].data_as<float>()[k], c = cpu[i].data_as<float>()[k];
      if (std::memcmp(&g, &c, sizeof g) != 0)
        return ::testing::AssertionFailure()
               << "operand " << i << " state[" << k << "]: gpu " << g << ", cpu " << c;
    }
  return ::testing::AssertionSuccess();
}

// |gpu - cpu| <= fraction * M elementwise; NaN where the other is NaN, infinities equal.
::testing::AssertionResult outputs_close(const Tensor& gpu, const Tensor& cpu, const Tensor& mag,
                                         double fraction) {
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double g = gpu.data_as<float>()[i], c = cpu.data_as<float>()[i];
    if (std::isnan(c) || std::isnan(g) || std::isinf(c) || std::isinf(g)) {
      if ((std::isnan(c) && std::isnan(g)) || g == c) continue;
      return ::testing::AssertionFailure() << "element " << i << ": gpu " << g << ", cpu " << c;
    }
    const double bound = fraction * double(mag.data_as<float>()[i]);
    if (std::fabs(g - c) > bound)
      return ::testing::AssertionFailure()
             << "element " << i << ": gpu " << g << ", cpu " << c << ", beyond " << bound;
  }
  return ::testing::AssertionSuccess();
}

constexpr double kFp8Fraction = 0x1p-10;
constexpr double kEmulatedFraction = 0x1p-16;

double fraction_for(OpKind kind, const Attrs& attrs, const Tensor& a, const Tensor& b,
                    const GemmQuant& q) {
  const CudaGemmPlan p = plan_quantized_gemm_on_cuda(kind, attrs, {a.shape(), b.shape()}, q);
  return p.route == CudaGemmRoute::fp8 ? kFp8Fraction : kEmulatedFraction;
}

TEST(QuantizedGemmCudaTest, Fp8MatMulMatchesTheCpuEmulationInEveryTransposeCase) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  auto cpu = make_backend({Device::cpu, 0});
  Rng rng(1);
  const int64_t M = 32, K = 64, N = 48;
  const std::pair<ElementFormat, ElementFormat> formats[] = {
      {e4m3, e4m3}, {e4m3, e5m2}, {e5m2, e4m3}};
  for (const auto& [fa, fb] : formats)
    for (Scaling scaling : {Scaling::current, Scaling::delayed, Scaling::none})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << element_format_name(fa) << " x " << element_format_name(fb) << " "
                       << scaling_name(scaling) << " transpose_a " << ta << " transpose_b " << tb);
          const GemmQuant q = fp8(fa, fb, scaling);
          const MatMulAttrs attrs{ta, tb};
          const Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, rng, -3.0f, 3.0f);
          const Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, rng, -0.01f, 0.01f);
          ASSERT_EQ(
              plan_quantized_gemm_on_cuda(OpKind::MatMul, attrs, {a.shape(), b.shape()}, q).route,
              CudaGemmRoute::fp8);
          const Step c = run_step(cpu, OpKind::MatMul, attrs, q, a, b, {M, N}, fresh_state(q));
          const Step g = run_step(gpu, OpKind::MatMul, attrs, q, a, b, {M, N}, fresh_state(q));
          EXPECT_TRUE(states_equal(g.state, c.state));
          EXPECT_TRUE(outputs_close(g.y, c.y, magnitude(OpKind::MatMul, attrs, a, b, {M, N}),
                                    kFp8Fraction));
        }
}

// Integer operands (|v| <= 8, exact in e4m3) with unit scaling: every partial sum is an
// integer of at most 64 * 64 = 2^12 < 2^13 in magnitude, exact in the tensor cores'
// accumulator, so the FP8 GEMM gives the exact product.
TEST(QuantizedGemmCudaTest, IntegerCodesGiveTheExactProductOnTheFp8Path) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const int64_t M = 16, K = 64, N = 32;
  Tensor a = Tensor::zeros({M, K}, DType::f32), b = Tensor::zeros({K, N}, DType::f32);
  for (int64_t i = 0; i < M * K; ++i) a.data_as<float>()[i] = float(int(i * 7 % 17) - 8);
  for (int64_t i = 0; i < K * N; ++i) b.data_as<float>()[i] = float(int(i * 5 % 13) - 6);
  const GemmQuant q = fp8(e4m3, e4m3, Scaling::none);
  const Step g = run_step(gpu, OpKind::MatMul, MatMulAttrs{}, q, a, b, {M, N}, fresh_state(q));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t ref = 0;
      for (int64_t k = 0; k < K; ++k)
        ref += int64_t(a.data_as<float>()[m * K + k]) * int64_t(b.data_as<float>()[k * N + n]);
      EXPECT_EQ(g.y.data_as<float>()[m * N + n], float(ref)) << m << "," << n;
    }
}

// Delayed scaling over six steps of changing ranges, one of them with an inf (its history and
// scale stay): the GPU's state equals the CPU's after every step, each device advancing its
// own; on the FP8 path (M = 32) and the emulated one (M = 17), with the max and most_recent
// reductions and a margin.
TEST(QuantizedGemmCudaTest, DelayedScalingStateAdvancesAsOnTheCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  auto cpu = make_backend({Device::cpu, 0});
  Rng rng(2);
  const int64_t K = 32, N = 16;
  for (int64_t M : {32, 17})
    for (AmaxReduction reduction : {AmaxReduction::max, AmaxReduction::most_recent}) {
      SCOPED_TRACE(::testing::Message() << "M " << M << " " << amax_reduction_name(reduction));
      GemmQuant q = fp8(e4m3, e5m2, Scaling::delayed, 4);
      q.recipe.amax = reduction;
      q.recipe.margin = reduction == AmaxReduction::max ? 0 : 2;
      std::vector<Tensor> cpu_state = fresh_state(q), gpu_state = fresh_state(q);
      const float ranges[] = {1.0f, 4.0f, 0.25f, 2.0f, 8.0f, 0.5f};
      for (int step = 0; step < 6; ++step) {
        SCOPED_TRACE(::testing::Message() << "step " << step);
        Tensor a = random_tensor({M, K}, rng, -ranges[step], ranges[step]);
        const Tensor b = random_tensor({K, N}, rng, -1e-3f * ranges[step], 1e-3f * ranges[step]);
        if (step == 3) a.data_as<float>()[5] = INFINITY;
        const Step c = run_step(cpu, OpKind::MatMul, MatMulAttrs{}, q, a, b, {M, N}, cpu_state);
        const Step g = run_step(gpu, OpKind::MatMul, MatMulAttrs{}, q, a, b, {M, N}, gpu_state);
        ASSERT_TRUE(states_equal(g.state, c.state));
        EXPECT_EQ(c.state[0].data_as<float>()[1], float(step + 1));
        if (step != 3)
          EXPECT_TRUE(outputs_close(g.y, c.y,
                                    magnitude(OpKind::MatMul, MatMulAttrs{}, a, b, {M, N}),
                                    fraction_for(OpKind::MatMul, MatMulAttrs{}, a, b, q)));
        cpu_state = c.state;
        gpu_state = g.state;
      }
    }
}

// A checkpoint moves between devices: two steps on the CPU, then two on the GPU from the
// CPU's state, end in the state of four CPU steps.
TEST(QuantizedGemmCudaTest, StateMovesBetweenDevices) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  auto cpu = make_backend({Device::cpu, 0});
  Rng rng(3);
  const GemmQuant q = fp8(e4m3, e4m3, Scaling::delayed, 8);
  std::vector<Tensor> a, b;
  for (int step = 0; step < 4; ++step) {
    a.push_back(random_tensor({32, 48}, rng, -1.0f - float(step), 1.0f + float(step)));
    b.push_back(random_tensor({48, 16}, rng, -0.1f, 0.1f));
  }
  std::vector<Tensor> all_cpu = fresh_state(q), moved = fresh_state(q);
  for (int step = 0; step < 4; ++step) {
    all_cpu = run_step(cpu, OpKind::MatMul, MatMulAttrs{}, q, a[size_t(step)], b[size_t(step)],
                       {32, 16}, all_cpu)
                  .state;
    moved = run_step(step < 2 ? cpu : gpu, OpKind::MatMul, MatMulAttrs{}, q, a[size_t(step)],
                     b[size_t(step)], {32, 16}, moved)
                .state;
  }
  EXPECT_TRUE(states_equal(moved, all_cpu));
}

// The GEMMs cuBLASLt FP8 cannot take run emulated (and BatchMatMulV2 of multiples of 16 as
// FP8): the same state and, to the order of the sums, the same product as the CPU.
TEST(QuantizedGemmCudaTest, FallbacksMatchTheCpuEmulation) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  auto cpu = make_backend({Device::cpu, 0});
  Rng rng(4);
  ConvAttrs conv{.stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  const Shape x_shape{2, 3, 6, 6}, w_shape{4, 3, 3, 3}, y_shape{2, 4, 6, 6};
  ConvAttrs input = conv, filter = conv;
  input.output_shape = x_shape;
  filter.output_shape = w_shape;
  struct Case {
    std::string name;
    OpKind kind;
    Attrs attrs;
    Shape a, b, out;
    GemmQuant q;
  };
  const Case cases[] = {
      {"MatMul M=17",
       OpKind::MatMul,
       MatMulAttrs{false, true},
       {17, 64},
       {48, 64},
       {17, 48},
       fp8(e4m3, e4m3, Scaling::current)},
      {"MatMul e5m2 x e5m2",
       OpKind::MatMul,
       MatMulAttrs{},
       {32, 64},
       {64, 48},
       {32, 48},
       fp8(e5m2, e5m2, Scaling::delayed)},
      {"BatchMatMulV2 fp8",
       OpKind::BatchMatMulV2,
       BatchMatMulAttrs{true, false},
       {3, 64, 16},
       {3, 64, 32},
       {3, 16, 32},
       fp8(e4m3, e5m2, Scaling::current)},
      {"BatchMatMulV2 K=20",
       OpKind::BatchMatMulV2,
       BatchMatMulAttrs{false, true},
       {3, 16, 20},
       {3, 32, 20},
       {3, 16, 32},
       fp8(e4m3, e4m3, Scaling::current)},
      {"Conv2D", OpKind::Conv2D, conv, x_shape, w_shape, y_shape,
       fp8(e4m3, e4m3, Scaling::current)},
      {"Conv2DBackpropInput", OpKind::Conv2DBackpropInput, input, y_shape, w_shape, x_shape,
       fp8(e5m2, e4m3, Scaling::current)},
      {"Conv2DBackpropFilter", OpKind::Conv2DBackpropFilter, filter, x_shape, y_shape, w_shape,
       fp8(e4m3, e5m2, Scaling::delayed)},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    const Tensor a = random_tensor(k.a, rng, -2.0f, 2.0f);
    const Tensor b = random_tensor(k.b, rng, -0.5f, 0.5f);
    std::vector<Tensor> cpu_state = fresh_state(k.q), gpu_state = fresh_state(k.q);
    for (int step = 0; step < 2; ++step) {  // delayed: the second step at the first's scale
      const Step c = run_step(cpu, k.kind, k.attrs, k.q, a, b, k.out, cpu_state);
      const Step g = run_step(gpu, k.kind, k.attrs, k.q, a, b, k.out, gpu_state);
      EXPECT_TRUE(states_equal(g.state, c.state));
      EXPECT_TRUE(outputs_close(g.y, c.y, magnitude(k.kind, k.attrs, a, b, k.out),
                                fraction_for(k.kind, k.attrs, a, b, k.q)));
      cpu_state = c.state;
      gpu_state = g.state;
    }
  }
}

// Unit scaling, B the identity: y is A's decoded codes, so overflow shows as is. Saturating:
// +-max (inf included); non-saturating: NaN (e4m3) or inf (e5m2) beyond the rounding
// midpoint above max; on the FP8 path (16 x 16) and the emulated one (e5m2 x e5m2).
TEST(QuantizedGemmCudaTest, OverflowFollowsTheRecipe) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  auto cpu = make_backend({Device::cpu, 0});
  const float values[] = {460.0f, 464.0f, 470.0f, -500.0f, 1000.0f,  60000.0f,  61440.0f, 70000.0f,
                          -1e-3f, 2.5f,   1e-9f,  -0.0f,   INFINITY, -INFINITY, NAN,      3.0f};
  const int64_t n = 16;
  Tensor a = Tensor::zeros({n, n}, DType::f32), eye = Tensor::zeros({n, n}, DType::f32);
  for (int64_t i = 0; i < n; ++i) {
    a.data_as<float>()[i * n + (i * 5) % n] = values[i];
    eye.data_as<float>()[i * n + i] = 1.0f;
  }
  const std::pair<ElementFormat, ElementFormat> formats[] = {
      {e4m3, e4m3}, {e5m2, e4m3}, {e5m2, e5m2}};
  for (const auto& [fa, fb] : formats)
    for (Saturation saturation : {Saturation::saturating, Saturation::non_saturating}) {
      SCOPED_TRACE(::testing::Message()
                   << element_format_name(fa) << " x " << element_format_name(fb) << " saturating "
                   << (saturation == Saturation::saturating));
      GemmQuant q = fp8(fa, fb, Scaling::none);
      q.recipe.saturation = saturation;
      const Step c =
          run_step(cpu, OpKind::MatMul, MatMulAttrs{}, q, a, eye, {n, n}, fresh_state(q));
      const Step g =
          run_step(gpu, OpKind::MatMul, MatMulAttrs{}, q, a, eye, {n, n}, fresh_state(q));
      // Products with 1 and sums with zeros are exact: the same bits (NaN as NaN).
      EXPECT_TRUE(outputs_close(g.y, c.y, Tensor::zeros({n, n}, DType::f32), 0.0));
    }
}

TEST(QuantizedGemmCudaTest, MxIsRefusedWithOneLine) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  GemmQuant q = fp8(e4m3, e4m3, Scaling::mx);
  q.blocks = true;
  q.format = "mxfp8";
  const Tensor a = Tensor::zeros({32, 32}, DType::f32);
  try {
    run_step(gpu, OpKind::MatMul, MatMulAttrs{}, q, a, a, {32, 32}, fresh_state(q));
    FAIL() << "an MX GEMM ran on cuda";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MX formats run on the CPU only"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace campo
