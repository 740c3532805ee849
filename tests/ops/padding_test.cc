// Padding of low-precision GEMMs (ops/cpu/matmul.cc, amp/padding.h): a bf16 MatMul run
// on zero-padded operands gives what the unpadded one gives, for every transpose
// combination, odd shapes and the backward pass's MatMuls; pad_to on an aligned shape or an
// f32 node changes nothing; the executor hands Node::pad_to to the kernel; candidates and
// apply_padding on small hand-built graphs. No test asserts on a time; the benchmark of
// the decision's shapes, unpadded against padded, is in bench/kernels/.
#include "amp/padding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "graph/executor.h"
#include "graph/variables.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"
#include "runtime/cpu_backend.h"
#include "tests/ops/padding_util.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

KernelSpec matmul_spec(const Gemm& g, DType dtype, int pad_to) {
  KernelSpec s{OpKind::MatMul,
               MatMulAttrs{g.transpose_a, g.transpose_b},
               dtype,
               {{a_shape(g), dtype}, {b_shape(g), dtype}},
               {{{g.M, g.N}, dtype}},
               "mm"};
  s.pad_to = pad_to;
  return s;
}

// Uniform in [-1, 1) rounded to `dtype`.
Tensor random_in(const Shape& shape, DType dtype, Rng& rng) {
  Tensor f = random_tensor(shape, rng);
  Tensor t = Tensor::empty(shape, dtype);
  convert(f.data(), DType::f32, t.data(), dtype, size_t(f.numel()));
  return t;
}

// The kernel of `spec` run on {a, b}; the output is filled with NaN first, so an element
// the kernel does not write cannot pass for a correct one.
Tensor run_kernel(const KernelSpec& spec, const Tensor& a, const Tensor& b, ExecContext& ctx) {
  auto kernel = create_kernel(spec, ctx);
  const TensorDesc& d = spec.outputs[0];
  Tensor nan = Tensor::empty(d.shape, DType::f32);
  for (int64_t i = 0; i < nan.numel(); ++i) nan.data_as<float>()[i] = NAN;
  Tensor c = Tensor::empty(d.shape, d.dtype);
  convert(nan.data(), DType::f32, c.data(), d.dtype, size_t(c.numel()));
  kernel->run(ctx, {a, b}, {c});
  return c;
}

// How far apart two bf16 tensors are: elements whose bits differ, and the largest distance
// in ulps (bf16 values in sign-magnitude order). NaN anywhere counts as a huge distance.
struct Bf16Diff {
  int64_t differing = 0;
  int64_t max_ulps = 0;
};

Bf16Diff bf16_diff(const Tensor& x, const Tensor& y) {
  auto ordered = [](uint16_t b) { return (b & 0x8000) ? -int64_t(b & 0x7fff) : int64_t(b); };
  const auto* p = x.data_as<uint16_t>();
  const auto* q = y.data_as<uint16_t>();
  Bf16Diff d;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (p[i] == q[i]) continue;
    ++d.differing;
    const bool nan = (p[i] & 0x7fff) > 0x7f80 || (q[i] & 0x7fff) > 0x7f80;
    const int64_t ulps = ordered(p[i]) - ordered(q[i]);
    d.max_ulps = std::max(d.max_ulps, nan ? int64_t(1) << 20 : ulps < 0 ? -ulps : ulps);
  }
  return d;
}

// ---- the padded kernel against the unpadded one ----

std::vector<Gemm> odd_gemms() {
  std::vector<Gemm> out;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Gemm g : {Gemm{64, 4097, 1000}, Gemm{1, 4097, 10}, Gemm{1, 9, 1}, Gemm{7, 5, 3},
                     Gemm{33, 257, 17}, Gemm{5, 33, 64}, Gemm{5, 64, 33}, Gemm{64, 500, 10}}) {
        g.transpose_a = ta;
        g.transpose_b = tb;
        out.push_back(g);
      }
  return out;
}

// The MatMuls of a dense layer Y [B, out] = X [B, in] W [in, out] and of its backward pass
// (grad_matmul, ops/matmul.cc: dX = dY W^T, dW = X^T dY): an MLP layer 784 -> 100 at batch
// 32, the 4097 -> 1000 layer of the measurement at batch 64, a 147 -> 64 layer at batch 10.
std::vector<Gemm> layer_gemms() {
  std::vector<Gemm> out;
  for (auto [batch, in, units] :
       {std::tuple<int64_t, int64_t, int64_t>{32, 784, 100}, {64, 4097, 1000}, {10, 147, 64}}) {
    out.push_back({batch, in, units, false, false});  // Y = X W
    out.push_back({batch, units, in, false, true});   // dX = dY W^T
    out.push_back({in, batch, units, true, false});   // dW = X^T dY
  }
  return out;
}

class PaddedMatMulTest : public ::testing::TestWithParam<Gemm> {};

// Zero padding appends products 0 * 0 = 0 to each sum of K terms and whole columns that
// are then dropped. Adding an exact zero leaves an f32 partial sum unchanged, so the padded
// result is the unpadded one bit for bit as long as oneDNN adds the valid products in the
// same order for K and for Kp. With its avx512_core_bf16 kernels (oneDNN 2.6, brgemm) it
// does: every case below is bit-identical at 1, 2, 4, 8, 16, 32 and 56 threads, and that is
// what the test demands there. Other ISAs run other kernels: with AMX (Sapphire Rapids) the
// tile kernels block K by its padded size, so the same products are added in another
// order, and 12 of the 64,000 elements of 64x4097x1000 differ, by up to 5 bf16 ulps where
// the sum cancels. There the test demands what holds in any summation order: each result
// is an f32 sum of the same K exact products, within (K - 1) 2^-24 sum|a b| of the exact
// one, then rounded to bf16 (half an ulp of the larger each).
bool is_bit_identity_verified() {
  return dnnl::get_effective_cpu_isa() == dnnl::cpu_isa::avx512_core_bf16;
}

// Elements of x and y (bf16 results of the GEMM g of a and b) further apart than two f32
// summation orders of the same products and a bf16 rounding each can put them.
int64_t beyond_summation_order(const Gemm& g, const Tensor& a, const Tensor& b, const Tensor& x,
                               const Tensor& y) {
  const std::vector<float> av = a.to_float_vector(), bv = b.to_float_vector();
  const std::vector<float> xv = x.to_float_vector(), yv = y.to_float_vector();
  auto at = [&](int64_t m, int64_t k) {
    return av[size_t(g.transpose_a ? k * g.M + m : m * g.K + k)];
  };
  auto bt = [&](int64_t k, int64_t n) {
    return bv[size_t(g.transpose_b ? n * g.K + k : k * g.N + n)];
  };
  int64_t beyond = 0;
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t n = 0; n < g.N; ++n) {
      double abs_sum = 0;
      for (int64_t k = 0; k < g.K; ++k) abs_sum += std::abs(double(at(m, k)) * bt(k, n));
      const size_t i = size_t(m * g.N + n);
      const double larger = std::max(std::abs(xv[i]), std::abs(yv[i]));
      const double bf16_ulp = larger > 0 ? std::ldexp(1.0, std::ilogb(larger) - 7) : 0;
      const double bound = 2 * double(g.K - 1) * std::ldexp(abs_sum, -24) + bf16_ulp;
      if (!(std::abs(double(xv[i]) - yv[i]) <= bound)) ++beyond;
    }
  return beyond;
}

TEST_P(PaddedMatMulTest, Bf16MatchesUnpadded) {
  if (!cpu_has_native_bf16())
    GTEST_SKIP() << "no AVX-512 BF16: bf16 MatMul is emulated in f32 and ignores pad_to";
  const Gemm& g = GetParam();
  ExecContext ctx;
  Rng rng(7);
  const Tensor a = random_in(a_shape(g), DType::bf16, rng);
  const Tensor b = random_in(b_shape(g), DType::bf16, rng);
  const Tensor plain = run_kernel(matmul_spec(g, DType::bf16, 0), a, b, ctx);
  const Tensor padded = run_kernel(matmul_spec(g, DType::bf16, kPadTo), a, b, ctx);
  const Bf16Diff d = bf16_diff(padded, plain);
  if (is_bit_identity_verified())
    EXPECT_EQ(d.differing, 0) << d.differing << " of " << plain.numel()
                              << " elements differ, by up to " << d.max_ulps << " ulp";
  else
    EXPECT_EQ(beyond_summation_order(g, a, b, padded, plain), 0)
        << d.differing << " of " << plain.numel() << " elements differ, by up to " << d.max_ulps
        << " ulp";
}

INSTANTIATE_TEST_SUITE_P(OddShapes, PaddedMatMulTest, ::testing::ValuesIn(odd_gemms()),
                         [](const auto& info) { return gemm_name(info.param); });
INSTANTIATE_TEST_SUITE_P(LayerAndGradients, PaddedMatMulTest, ::testing::ValuesIn(layer_gemms()),
                         [](const auto& info) { return gemm_name(info.param); });

// On aligned dimensions there is nothing to pad: the kernel is the unpadded one.
TEST(PaddedMatMul, AlignedShapeUnchanged) {
  if (!cpu_has_native_bf16())
    GTEST_SKIP() << "no AVX-512 BF16: bf16 MatMul is emulated in f32 and ignores pad_to";
  ExecContext ctx;
  Rng rng(3);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Gemm g{7, 64, 32, ta, tb};  // M need not be aligned: it is never padded
      const Tensor a = random_in(a_shape(g), DType::bf16, rng);
      const Tensor b = random_in(b_shape(g), DType::bf16, rng);
      const Bf16Diff d = bf16_diff(run_kernel(matmul_spec(g, DType::bf16, kPadTo), a, b, ctx),
                                   run_kernel(matmul_spec(g, DType::bf16, 0), a, b, ctx));
      EXPECT_EQ(d.differing, 0) << gemm_name(g);
    }
}

// f32 kernels ignore pad_to (their output is bit-identical: the same primitive runs), and
// so do the emulated f16 and bf16 kernels.
TEST(PaddedMatMul, F32AndEmulatedIgnorePadTo) {
  Rng rng(5);
  const Gemm g{9, 33, 17, false, true};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    ExecContext ctx;
    ctx.native_bf16 = false;
    const Tensor a = random_in(a_shape(g), dtype, rng);
    const Tensor b = random_in(b_shape(g), dtype, rng);
    const Tensor plain = run_kernel(matmul_spec(g, dtype, 0), a, b, ctx);
    const Tensor padded = run_kernel(matmul_spec(g, dtype, kPadTo), a, b, ctx);
    EXPECT_EQ(padded.to_float_vector(), plain.to_float_vector()) << dtype_name(dtype);
  }
}

TEST(PaddedMatMul, NegativePadToIsAnError) {
  ExecContext ctx;
  EXPECT_THROW(create_kernel(matmul_spec({4, 5, 6}, DType::f32, -1), ctx), Error);
}

// ---- graphs ----

// The executor gives the kernel the node's pad_to, and the compiled padded graph computes
// what the unpadded one does. (A negative pad_to is rejected by the kernel, so a compile
// error shows the field arrived.)
TEST(PaddedMatMul, ExecutorPassesPadTo) {
  Graph g;
  const Gemm m{6, 37, 11, true, false};
  const NodeId mm = add_matmul(g, m, DType::bf16, "mm");
  const ValueId out = g.node(mm).outputs[0];
  VariableStore vars(0, default_cpu_backend());
  auto run = [&](int pad_to) {
    g.node(mm).pad_to = pad_to;
    Executable exe(g, vars, {{out}, 0});
    Rng rng(11);
    const Tensor a = random_in(a_shape(m), DType::bf16, rng);
    const Tensor b = random_in(b_shape(m), DType::bf16, rng);
    std::memcpy(exe.input("mm.a").data(), a.data(), size_t(a.numel()) * sizeof(uint16_t));
    std::memcpy(exe.input("mm.b").data(), b.data(), size_t(b.numel()) * sizeof(uint16_t));
    exe.run();
    exe.run();  // a second step reuses the padded buffers
    return exe.output(out).clone();
  };
  const Tensor plain = run(0);
  const Tensor padded = run(kPadTo);
  const Bf16Diff d = bf16_diff(padded, plain);
  if (is_bit_identity_verified())
    EXPECT_EQ(d.differing, 0);
  else
    EXPECT_LE(d.max_ulps, 1);
  g.node(mm).pad_to = -1;
  EXPECT_THROW({ Executable exe(g, vars, {{out}, 0}); }, Error);
}

TEST(Padding, CandidatesAreUnalignedLowPrecisionMatMuls) {
  Graph g;
  const NodeId aligned = add_matmul(g, {8, 64, 32}, DType::bf16, "aligned");
  const NodeId odd_k = add_matmul(g, {8, 65, 32}, DType::bf16, "odd_k");
  const NodeId odd_n_tb = add_matmul(g, {8, 64, 10, false, true}, DType::bf16, "odd_n_tb");
  const NodeId odd_k_ta = add_matmul(g, {8, 100, 32, true, false}, DType::bf16, "odd_k_ta");
  const NodeId odd_m = add_matmul(g, {7, 64, 32}, DType::bf16, "odd_m");
  const NodeId f32 = add_matmul(g, {8, 65, 10}, DType::f32, "f32");
  const NodeId f16 = add_matmul(g, {8, 65, 10}, DType::f16, "f16");
  const NodeId relu =
      g.add_node(OpKind::Relu, {g.node(odd_k).outputs[0]}, NoAttrs{}, "relu", DType::bf16);
  EXPECT_EQ(padding_candidates(g), (std::vector<NodeId>{odd_k, odd_n_tb, odd_k_ta, f16}));
  EXPECT_FALSE(is_padding_candidate(g, aligned));
  EXPECT_FALSE(is_padding_candidate(g, odd_m));
  EXPECT_FALSE(is_padding_candidate(g, f32));
  EXPECT_FALSE(is_padding_candidate(g, relu));
  // K = 100 is a multiple of 4 but not of 16.
  EXPECT_FALSE(is_padding_candidate(g, odd_k_ta, 4));
}

TEST(Padding, ApplyPaddingMarksCandidatesThatPay) {
  Graph g;
  const NodeId a = add_matmul(g, {8, 65, 32}, DType::bf16, "a");
  const NodeId b = add_matmul(g, {8, 64, 10}, DType::bf16, "b");
  const NodeId c = add_matmul(g, {8, 64, 32}, DType::bf16, "c");  // aligned
  const NodeId d = add_matmul(g, {8, 9, 9}, DType::f32, "d");     // f32
  // Says yes to everything except b: only the candidates among the rest are padded.
  std::vector<NodeId> asked;
  const int n = apply_padding(g, [&](NodeId id) {
    asked.push_back(id);
    return id != b;
  });
  EXPECT_EQ(n, 1);
  EXPECT_EQ(asked, (std::vector<NodeId>{a, b}));
  EXPECT_EQ(g.node(a).pad_to, kPadTo);
  EXPECT_EQ(g.node(b).pad_to, 0);
  EXPECT_EQ(g.node(c).pad_to, 0);
  EXPECT_EQ(g.node(d).pad_to, 0);
  // The request survives a copy of the graph and shows in its dump.
  const Graph copy = g;
  EXPECT_EQ(copy.node(a).pad_to, kPadTo);
  const std::string text = copy.to_text();
  EXPECT_NE(text.find("MatMul<bf16>(v0, v1) pad16"), std::string::npos) << text;
  EXPECT_EQ(text.find("pad16"), text.rfind("pad16")) << "only one node is padded:\n" << text;
}

// time_padding runs both variants of a node in isolation; its times are only checked to
// be times. The graph is left untouched.
TEST(Padding, TimePaddingMeasuresBothVariants) {
  Graph g;
  const NodeId mm = add_matmul(g, {16, 33, 10, false, true}, DType::bf16, "mm");
  const std::string before = g.to_text();
  PaddingTiming t;
  padding_pays(g, mm, {kPadTo, 1, 2, 0.05, default_cpu_backend()}, &t);
  EXPECT_GT(t.unpadded_ms, 0.0);
  EXPECT_GT(t.padded_ms, 0.0);
  EXPECT_TRUE(std::isfinite(t.unpadded_ms) && std::isfinite(t.padded_ms));
  EXPECT_EQ(g.to_text(), before);
  const NodeId relu =
      g.add_node(OpKind::Relu, {g.node(mm).outputs[0]}, NoAttrs{}, "relu", DType::bf16);
  EXPECT_THROW(time_padding(g, relu, {.backend = default_cpu_backend()}), Error);
  EXPECT_THROW(time_padding(g, mm, {}), Error);  // no backend to time it on
}

}  // namespace
}  // namespace campo::testing
