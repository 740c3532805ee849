// Channel padding of the convolution family (ops/conv_padding.h, amp/padding.h): the padded
// kernel's result is the unpadded kernel's, for Conv2D, Conv2DBackpropInput and
// Conv2DBackpropFilter, in f32, bf16 and f16, on a 1- or 3-channel first layer, LeNet's
// layers, an odd number of filters, odd channels on both sides, a blocked output and an f32
// dw from bf16 data; what it keeps for itself is counted; bad requests are refused; conv
// nodes are padding candidates in low precision only, are timed, padded and run by the
// executor like MatMuls. No test asserts on a time.
//
// Two paths are tested:
//  - the registered kernels (create_kernel with pad_to): on a CPU with AVX-512 BF16 a bf16
//    node runs oneDNN's bf16 convolutions on padded channels; elsewhere, and for f32 and f16
//    everywhere, the kernel ignores pad_to, so there the test shows only that it does;
//  - the padded kernel itself (make_padded_conv) around the registered kernel of any dtype,
//    so its copies and slices are tested on every machine.
// Inputs are multiples of 1/8 in [-1, 1] (exact in bf16 and f16): every product is a
// multiple of 1/64 and every sum here stays far below 2^18, so each f32 sum is exact in
// any order and the padded result must equal the unpadded one bit for bit, whichever
// oneDNN implementation either runs (the padded problem may take another one: a 16-channel
// input is read blocked, a 3-channel one plain). With values in [-1, 1) of full precision
// the two may add the same products in different orders; there the test demands what any
// order gives (see within_summation_order).
#include "ops/conv_padding.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "amp/padding.h"
#include "graph/executor.h"
#include "graph/variables.h"
#include "ops/cpu/context.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"
#include "runtime/cpu_backend.h"
#include "tests/ops/padding_util.h"
#include "tests/reference/conv.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

constexpr OpKind kConvOps[] = {OpKind::Conv2D, OpKind::Conv2DBackpropInput,
                               OpKind::Conv2DBackpropFilter};
constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};

// C = x[1] and K = w[0], at least one of them not a multiple of 16.
std::vector<ConvCase> padded_cases() {
  return {
      {"fashion_mnist_stem_c1_k64", {2, 1, 12, 12}, {64, 1, 3, 3}, 1, 1},
      {"rgb_stem_c3_k16_7x7_stride2", {2, 3, 17, 17}, {16, 3, 7, 7}, 2, 3},
      {"lenet_c1_c1_k6", {3, 1, 14, 14}, {6, 1, 5, 5}},
      {"lenet_c2_c6_k16", {3, 6, 9, 9}, {16, 6, 5, 5}},
      {"odd_k10_c32_stride2", {2, 32, 9, 9}, {10, 32, 3, 3}, 2, 1},
      {"odd_both_1x1_c5_k7", {2, 5, 7, 7}, {7, 5, 1, 1}},
      {"odd_both_c17_k33", {1, 17, 6, 6}, {33, 17, 3, 3}, 1, 1},
      // K = 32: y may be blocked (graph/layout.h); only x and w grow.
      {"stem_c3_k32_blocked_y", {2, 3, 10, 10}, {32, 3, 3, 3}, 1, 1, cpu_blocked_layout()},
  };
}

// The kernel spec of `kind` on case c: {x, w} -> y, {dy, w} -> dx, {x, dy} -> dw (in f32
// with `f32_dw`, a folded cast).
KernelSpec conv_spec(OpKind kind, const ConvCase& c, DType dtype, int pad_to, bool f32_dw = false) {
  const TensorDesc x{c.x, dtype}, w{c.w, dtype}, y{y_shape(c), dtype, c.y_layout};
  KernelSpec s{kind, attrs_of(c, kind), dtype, {}, {}, "conv"};
  switch (kind) {
    case OpKind::Conv2D:
      s.inputs = {x, w};
      s.outputs = {y};
      break;
    case OpKind::Conv2DBackpropInput:
      s.inputs = {y, w};
      s.outputs = {x};
      break;
    default:
      s.inputs = {x, y};
      s.outputs = {{c.w, f32_dw ? DType::f32 : dtype}};
      break;
  }
  s.pad_to = pad_to;
  return s;
}

// A host tensor of `desc` (in its layout's byte order: the values are i.i.d., so a blocked
// tensor is as random as a plain one) holding multiples of 1/8 in [-1, 1] (`exact`), or
// uniform values in [-1, 1) rounded to the dtype.
Tensor input_of(const TensorDesc& desc, bool exact, Rng& rng) {
  std::vector<float> v(size_t(shape_numel(desc.shape)));
  for (float& e : v)
    e = exact ? std::floor(rng.uniform(-8.0f, 9.0f)) / 8.0f : rng.uniform(-1.0f, 1.0f);
  for (float& e : v) e = std::min(e, 1.0f);
  Tensor t = Tensor::empty(desc.shape, desc.dtype);
  convert(v.data(), DType::f32, t.data(), desc.dtype, v.size());
  return t;
}

// Both inputs of `spec`, as input_of.
std::vector<Tensor> inputs_of(const KernelSpec& spec, bool exact, Rng& rng) {
  Tensor first = input_of(spec.inputs[0], exact, rng);
  return {first, input_of(spec.inputs[1], exact, rng)};
}

// Runs `kernel` on `inputs`; the output starts as NaN bytes (0xff), so an element the
// kernel does not write cannot pass for a correct one.
Tensor run(Kernel& kernel, const KernelSpec& spec, const std::vector<Tensor>& inputs,
           ExecContext& ctx) {
  Tensor out = Tensor::empty(spec.outputs[0].shape, spec.outputs[0].dtype);
  std::memset(out.data(), 0xff, out.nbytes());
  kernel.run(ctx, inputs, {out});
  return out;
}

// The registered kernel of a spec (pad_to 0 inside make_padded_conv).
std::unique_ptr<Kernel> registered(const KernelSpec& spec, ExecContext& ctx) {
  return create_kernel(spec, ctx);
}

int64_t differing_elements(const Tensor& a, const Tensor& b) {
  const size_t elem = dtype_size(a.dtype());
  int64_t n = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    n += std::memcmp(static_cast<const char*>(a.data()) + size_t(i) * elem,
                     static_cast<const char*>(b.data()) + size_t(i) * elem, elem) != 0;
  return n;
}

// Elements of two results of the same convolution (plain layout) further apart than two f32
// summation orders of the same products and a rounding to the output's dtype each can put
// them: |a - b| <= 2 (n - 1) 2^-24 sum |products| + one ulp of the larger, n the number of
// products of the element.
int64_t beyond_summation_order(OpKind kind, const ConvCase& c, const std::vector<Tensor>& in,
                               const Tensor& a, const Tensor& b) {
  const std::vector<float> p = in[0].to_float_vector(), q = in[1].to_float_vector();
  std::vector<double> abs_sum(size_t(a.numel()), 0.0);
  std::vector<int64_t> terms(size_t(a.numel()), 0);
  reference::for_each_conv_tap(
      c.x, c.w, y_shape(c), attrs_of(c, OpKind::Conv2D), [&](int64_t xi, int64_t wi, int64_t yi) {
        double product = 0;
        size_t out = 0;
        if (kind == OpKind::Conv2D)
          product = double(p[size_t(xi)]) * q[size_t(wi)], out = size_t(yi);
        else if (kind == OpKind::Conv2DBackpropInput)
          product = double(p[size_t(yi)]) * q[size_t(wi)], out = size_t(xi);
        else
          product = double(p[size_t(xi)]) * q[size_t(yi)], out = size_t(wi);
        abs_sum[out] += std::abs(product);
        ++terms[out];
      });
  const int mantissa = a.dtype() == DType::bf16 ? 7 : a.dtype() == DType::f16 ? 10 : 23;
  const std::vector<float> av = a.to_float_vector(), bv = b.to_float_vector();
  int64_t beyond = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    const double larger = std::max(std::abs(av[i]), std::abs(bv[i]));
    const double ulp =
        larger > 0 ? std::ldexp(1.0, std::max(std::ilogb(larger), -14) - mantissa) : 0;
    const double bound =
        2 * double(std::max<int64_t>(terms[i] - 1, 0)) * std::ldexp(abs_sum[i], -24) + ulp;
    if (!(std::abs(double(av[i]) - bv[i]) <= bound)) ++beyond;
  }
  return beyond;
}

std::string case_name(OpKind kind, DType dtype, const ConvCase& c) {
  return std::string(op_name(kind)) + " " + dtype_name(dtype) + " " + c.name;
}

// Calls body(kind, c, unpadded spec, padded spec, ctx, rng) for every padded case, conv op
// and dtype, under a trace naming them, each with a fresh context and an Rng of `seed`.
template <typename F>
void for_each_padded_conv(uint64_t seed, F&& body) {
  for (const ConvCase& c : padded_cases())
    for (OpKind kind : kConvOps)
      for (DType dtype : kDtypes) {
        SCOPED_TRACE(case_name(kind, dtype, c));
        ExecContext ctx;
        Rng rng(seed);
        body(kind, c, conv_spec(kind, c, dtype, 0), conv_spec(kind, c, dtype, kPadTo), ctx, rng);
      }
}

// The padded kernel (around the registered kernel of the dtype: oneDNN's bf16 one with
// AVX-512 BF16, else the f32 one or its emulation) gives the unpadded kernel's bits. Run
// twice: the second run sees what the first left in the padded buffers.
TEST(ConvPadding, PaddedKernelBitIdenticalOnExactInputs) {
  for_each_padded_conv(5, [](OpKind, const ConvCase&, const KernelSpec& plain,
                             const KernelSpec& padded, ExecContext& ctx, Rng& rng) {
    ASSERT_TRUE(conv_runs_padded(padded));
    const std::vector<Tensor> in = inputs_of(plain, true, rng);
    auto padded_kernel = make_padded_conv(padded, ctx, registered, copy_rows_cpu);
    const Tensor expected = run(*create_kernel(plain, ctx), plain, in, ctx);
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(differing_elements(run(*padded_kernel, padded, in, ctx), expected), 0)
          << "run " << r;
  });
}

// Full-precision inputs: the same products, maybe summed in another order.
TEST(ConvPadding, PaddedKernelWithinSummationOrderOnRandomInputs) {
  for_each_padded_conv(6, [](OpKind kind, const ConvCase& c, const KernelSpec& plain,
                             const KernelSpec& padded, ExecContext& ctx, Rng& rng) {
    if (c.y_layout != Layout::plain) return;  // the bound reads y in NCHW order
    const std::vector<Tensor> in = inputs_of(plain, false, rng);
    const Tensor expected = run(*create_kernel(plain, ctx), plain, in, ctx);
    const Tensor actual =
        run(*make_padded_conv(padded, ctx, registered, copy_rows_cpu), padded, in, ctx);
    EXPECT_EQ(beyond_summation_order(kind, c, in, actual, expected), 0)
        << differing_elements(actual, expected) << " of " << expected.numel() << " elements differ";
  });
}

// The registered kernels with pad_to: bf16 pads where oneDNN runs bf16 natively; f32, f16
// and emulated bf16 ignore pad_to. Either way the result is the unpadded one's bits.
TEST(ConvPadding, RegisteredKernelsWithPadToBitIdentical) {
  for_each_padded_conv(7, [](OpKind, const ConvCase&, const KernelSpec& plain,
                             const KernelSpec& padded, ExecContext& ctx, Rng& rng) {
    const std::vector<Tensor> in = inputs_of(plain, true, rng);
    EXPECT_EQ(differing_elements(run(*create_kernel(padded, ctx), padded, in, ctx),
                                 run(*create_kernel(plain, ctx), plain, in, ctx)),
              0);
  });
}

// A bf16 (f16) backprop-filter node with a folded cast writes an f32 dw; the padded dw is
// f32 too and sliced as such. On exact inputs every f32 sum is exact, so a kernel's dw is
// the f32 kernel's bits, or those rounded once to the low type where oneDNN has no
// low-precision kernel with an f32 dw for the shape (on an AVX512-BF16 CPU, LeNet's first
// convolution, C = 1, runs oneDNN's GEMM kernel with a bf16 dw): checked element by element
// for the unpadded kernel, the padded one and the registered one with pad_to.
TEST(ConvPadding, BackpropFilterF32DwBitIdentical) {
  auto to_f32 = [](const Tensor& t) {
    Tensor f = Tensor::empty(t.shape(), DType::f32);
    convert(t.data(), t.dtype(), f.data(), DType::f32, size_t(t.numel()));
    return f;
  };
  for (const ConvCase& c : padded_cases())
    for (DType dtype : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(case_name(OpKind::Conv2DBackpropFilter, dtype, c));
      ExecContext ctx;
      Rng rng(8);
      const KernelSpec plain = conv_spec(OpKind::Conv2DBackpropFilter, c, dtype, 0, true);
      const KernelSpec padded = conv_spec(OpKind::Conv2DBackpropFilter, c, dtype, kPadTo, true);
      const KernelSpec f32 = conv_spec(OpKind::Conv2DBackpropFilter, c, DType::f32, 0);
      ASSERT_EQ(padded.outputs[0].dtype, DType::f32);
      const std::vector<Tensor> in = inputs_of(plain, true, rng);
      const Tensor exact = run(*create_kernel(f32, ctx), f32, {to_f32(in[0]), to_f32(in[1])}, ctx);
      Tensor rounded = Tensor::empty(exact.shape(), dtype);
      convert(exact.data(), DType::f32, rounded.data(), dtype, size_t(exact.numel()));
      const Tensor once = to_f32(rounded);
      auto expect_exact_or_rounded_once = [&](const Tensor& dw, const char* which) {
        ASSERT_EQ(dw.dtype(), DType::f32);
        int64_t bad = 0;
        for (int64_t i = 0; i < exact.numel(); ++i) {
          const float v = dw.data_as<float>()[i];
          bad += v != exact.data_as<float>()[i] && v != once.data_as<float>()[i];
        }
        EXPECT_EQ(bad, 0) << which;
      };
      expect_exact_or_rounded_once(run(*create_kernel(plain, ctx), plain, in, ctx), "unpadded");
      expect_exact_or_rounded_once(
          run(*make_padded_conv(padded, ctx, registered, copy_rows_cpu), padded, in, ctx),
          "padded");
      expect_exact_or_rounded_once(run(*create_kernel(padded, ctx), padded, in, ctx), "pad_to");
    }
}

// The padded operands are the kernel's own (zeroed once), counted for the memory report:
// Conv2D of C = 3 -> K = 10 at pad 16 keeps x [2, 16, 8, 8], w [16, 16, 3, 3] and
// y [2, 16, 8, 8].
TEST(ConvPadding, PaddedBuffersCounted) {
  const ConvCase c{"c3_k10", {2, 3, 8, 8}, {10, 3, 3, 3}, 1, 1};
  ExecContext ctx;
  const size_t before = ctx.kernel_buffer_bytes();
  auto k = make_padded_conv(conv_spec(OpKind::Conv2D, c, DType::bf16, 16), ctx, registered,
                            copy_rows_cpu);
  EXPECT_EQ(ctx.kernel_buffer_bytes() - before,
            size_t(2 * 16 * 64 + 16 * 16 * 9 + 2 * 16 * 64) * 2);
}

// Aligned channels: nothing to pad, the registered kernel is the unpadded one; a grouped
// convolution with unaligned channels and a negative pad_to are refused with the node's name.
TEST(ConvPadding, AlignedGroupedAndNegativeRequests) {
  const ConvCase aligned{"c16_k32", {1, 16, 6, 6}, {32, 16, 3, 3}, 1, 1};
  for (OpKind kind : kConvOps)
    EXPECT_FALSE(conv_runs_padded(conv_spec(kind, aligned, DType::bf16, 16)));

  ConvCase grouped{"groups2", {1, 6, 6, 6}, {4, 3, 3, 3}, 1, 1};
  KernelSpec g = conv_spec(OpKind::Conv2D, grouped, DType::bf16, 16);
  std::get<ConvAttrs>(g.attrs).groups = 2;
  g.outputs[0].shape =
      reference::conv2d_output_shape(grouped.x, grouped.w, std::get<ConvAttrs>(g.attrs));
  const std::string msg = error_message([&] { conv_runs_padded(g); });
  EXPECT_TRUE(contains(msg,
                       "Conv2D 'conv': padding (pad_to = 16) is implemented for "
                       "convolutions with one group, not 2"))
      << msg;
  KernelSpec negative = conv_spec(OpKind::Conv2D, aligned, DType::bf16, -1);
  EXPECT_TRUE(contains(error_message([&] { conv_runs_padded(negative); }),
                       "Conv2D 'conv': pad_to must be >= 0, not -1"));
}

// ---- graph level: candidates, timing, the decision, the executor ----

TEST(ConvPadding, CandidatesAreLowPrecisionUnalignedUngroupedConvs) {
  Graph g;
  const ConvCase stem{"stem", {2, 1, 8, 8}, {8, 1, 3, 3}, 1, 1};
  const ConvCase aligned{"aligned", {2, 16, 8, 8}, {32, 16, 3, 3}, 1, 1};
  const ConvCase odd_k{"odd_k", {2, 16, 8, 8}, {10, 16, 3, 3}, 1, 1};
  const ConvCase grouped{"grouped", {2, 6, 8, 8}, {6, 3, 3, 3}, 1, 1};
  std::vector<NodeId> expected;
  for (OpKind kind : kConvOps) {
    const std::string k = op_name(kind);
    expected.push_back(add_conv(g, kind, stem, DType::bf16, k + ".stem"));
    expected.push_back(add_conv(g, kind, odd_k, DType::f16, k + ".odd_k"));
    const NodeId f32 = add_conv(g, kind, stem, DType::f32, k + ".f32");
    const NodeId al = add_conv(g, kind, aligned, DType::bf16, k + ".aligned");
    const NodeId gr = add_conv(g, kind, grouped, DType::bf16, k + ".grouped", 2);
    EXPECT_FALSE(is_padding_candidate(g, f32)) << k;
    EXPECT_FALSE(is_padding_candidate(g, al)) << k;
    EXPECT_FALSE(is_padding_candidate(g, gr)) << k;
    // Aligned to 16 is aligned to 8.
    EXPECT_FALSE(is_padding_candidate(g, add_conv(g, kind, aligned, DType::bf16, k + ".a8"), 8));
  }
  EXPECT_EQ(padding_candidates(g), expected);
  // odd_k's K = 10 is aligned to 5 (pad_to 5), its C = 16 is not.
  EXPECT_TRUE(is_padding_candidate(g, expected[1], 5));
  EXPECT_FALSE(is_padding_candidate(g, expected[1], 2));

  int asked = 0;
  EXPECT_EQ(apply_padding(
                g, [&](NodeId) { return ++asked % 2 == 1; }, 8),
            3);
  EXPECT_EQ(asked, 6);
  int padded = 0;
  for (const Node& n : g.nodes()) {
    EXPECT_TRUE(n.pad_to == 0 || n.pad_to == 8) << n.name;
    padded += n.pad_to > 0;
  }
  EXPECT_EQ(padded, 3);
}

// time_padding compiles and runs each conv op both ways (its times are positive; whether
// padding pays is the machine's); an f32-output backprop-filter keeps its output type.
TEST(ConvPadding, TimePaddingRunsConvNodes) {
  const ConvCase c{"c3_k10", {2, 3, 8, 8}, {10, 3, 3, 3}, 1, 1};
  for (OpKind kind : kConvOps) {
    Graph g;
    const NodeId id = add_conv(g, kind, c, DType::bf16, "conv");
    PaddingTiming t;
    padding_pays(g, id, {kPadTo, 1, 2, 0.05, default_cpu_backend()}, &t);
    EXPECT_GT(t.unpadded_ms, 0.0) << op_name(kind);
    EXPECT_GT(t.padded_ms, 0.0) << op_name(kind);
  }
}

// The executor hands a conv node's pad_to to its kernel; the padded graph computes the
// unpadded one's bits (exact inputs), forward and both backprops.
TEST(ConvPadding, ExecutorRunsPaddedConvNodes) {
  const ConvCase c{"c3_k10", {2, 3, 9, 9}, {10, 3, 3, 3}, 2, 1};
  for (OpKind kind : kConvOps) {
    SCOPED_TRACE(op_name(kind));
    Graph g;
    const NodeId id = add_conv(g, kind, c, DType::bf16, "conv");
    const ValueId out = g.node(id).outputs[0];
    VariableStore vars(0, default_cpu_backend());
    CompileOptions options;
    options.fetches = {out};
    auto run_graph = [&](int pad_to) {
      g.node(id).pad_to = pad_to;
      Executable exe(g, vars, options);
      Rng rng(9);
      for (const ValueId v : g.node(id).inputs) {
        const std::string& name = g.node(g.value(v).producer).name;
        const Tensor host = input_of({g.value(v).shape, DType::bf16}, true, rng);
        std::memcpy(exe.input(name).data(), host.data(), host.nbytes());
      }
      exe.run();
      exe.run();  // a second step reuses the padded buffers
      return exe.output(out).clone();
    };
    const Tensor plain = run_graph(0), padded = run_graph(kPadTo);
    EXPECT_EQ(differing_elements(padded, plain), 0);
    g.node(id).pad_to = -1;  // refused by the kernel: the field reached it
    EXPECT_THROW({ Executable exe(g, vars, options); }, Error);
  }
}

}  // namespace
}  // namespace campo::testing
