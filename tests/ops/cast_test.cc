// Cast between f32, f16 and bf16: the op's output bit for bit against campo::convert_scalar
// (the scalar specification of rounding) on special values, rounding ties and a large
// tensor of random bit patterns; kernels registered under every source dtype; schema and
// gradient-builder structure.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "ops/kernel.h"
#include "ops/op.h"
#include "tests/gradcheck.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::error_message;

using testing::run_op;

// A host f32 tensor (a plain from_vector on a braced list of integers would be i32).
Tensor floats(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Specials, rounding ties for both 16-bit formats, overflow, f16 subnormals and random
// bit patterns (all exponents, NaNs included) — enough elements for the parallel path.
Tensor interesting_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.5f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          from_bits(0x7f800001u),  // signalling NaN
                          from_bits(0xffc12345u),  // negative NaN with payload
                          65504.0f,
                          65520.0f,
                          1e10f,
                          3.4e38f,
                          std::ldexp(1.0f, -24),
                          std::ldexp(1.0f, -25),
                          std::ldexp(3.0f, -26),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min(),
                          1.0f + std::ldexp(1.0f, -11),
                          1.0f + 3 * std::ldexp(1.0f, -11),
                          1.0f + std::ldexp(1.0f, -8),
                          1.0f + 3 * std::ldexp(1.0f, -8),
                          from_bits(0x3f808000u),
                          from_bits(0x3f818000u),
                          from_bits(0x7f7fffffu)};
  Rng rng(1);
  while (v.size() < 100003) v.push_back(from_bits(uint32_t(rng.next_u64() >> 32)));
  return Tensor::from_vector(v, {int64_t(v.size())});
}

// Raw bits of `x` converted with the scalar reference.
std::vector<uint8_t> reference_bytes(const Tensor& x, DType to) {
  std::vector<uint8_t> out(size_t(x.numel()) * dtype_size(to));
  convert_scalar(x.data(), x.dtype(), out.data(), to, size_t(x.numel()));
  return out;
}

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data());
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// Casts x to `to` with the node's compute dtype set to the source dtype (the convention).
Tensor cast(const Tensor& x, DType to) {
  std::vector<Tensor> out = run_op(OpKind::Cast, CastAttrs{to}, {x}, x.dtype());
  EXPECT_EQ(out[0].dtype(), to);
  EXPECT_EQ(out[0].shape(), x.shape());
  return out[0];
}

class CastRoundTripTest : public ::testing::TestWithParam<DType> {};

TEST_P(CastRoundTripTest, BitExactAgainstScalarConversion) {
  const DType low = GetParam();
  Tensor x = interesting_floats();
  Tensor down = cast(x, low);
  ASSERT_EQ(bytes_of(down), reference_bytes(x, low)) << "f32 -> " << dtype_name(low);
  Tensor up = cast(down, DType::f32);
  ASSERT_EQ(bytes_of(up), reference_bytes(down, DType::f32)) << dtype_name(low) << " -> f32";
  // Every value that survived is representable in `low`: a second trip changes nothing.
  EXPECT_EQ(bytes_of(cast(up, low)), bytes_of(down));
}

INSTANTIATE_TEST_SUITE_P(LowPrecision, CastRoundTripTest,
                         ::testing::Values(DType::bf16, DType::f16),
                         [](const auto& info) { return dtype_name(info.param); });

TEST(CastOpTest, BetweenSixteenBitTypesAndIdentity) {
  Tensor x = interesting_floats();
  Tensor h = cast(x, DType::f16);
  EXPECT_EQ(bytes_of(cast(h, DType::bf16)), reference_bytes(h, DType::bf16));
  Tensor bh = cast(x, DType::bf16);
  EXPECT_EQ(bytes_of(cast(bh, DType::f16)), reference_bytes(bh, DType::f16));
  EXPECT_EQ(bytes_of(cast(x, DType::f32)), bytes_of(x));
  EXPECT_EQ(bytes_of(cast(h, DType::f16)), bytes_of(h));
}

TEST(CastOpTest, KernelRegisteredForEverySourceType) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    EXPECT_TRUE(has_kernel(OpKind::Cast, Device::cpu, t, true)) << dtype_name(t);
  // A Cast node left at the default f32 compute dtype still converts from its real source.
  Tensor x = floats({1.5f, -3.0f, 1e-3f}, {3});
  Tensor b = cast(x, DType::bf16);
  std::vector<Tensor> out = run_op(OpKind::Cast, CastAttrs{DType::f32}, {b}, DType::f32);
  EXPECT_EQ(bytes_of(out[0]), reference_bytes(b, DType::f32));
}

TEST(CastOpTest, NonFloatingTypesAreRejected) {
  Tensor labels = Tensor::from_vector(std::vector<int32_t>{1, 2}, {2});
  std::string msg = error_message([&] { run_op(OpKind::Cast, CastAttrs{DType::f32}, {labels}); });
  EXPECT_NE(msg.find("i32 -> f32 is not supported"), std::string::npos) << msg;
  Tensor x = floats({1.0f}, {1});
  msg = error_message([&] { run_op(OpKind::Cast, CastAttrs{DType::i64}, {x}); });
  EXPECT_NE(msg.find("f32 -> i64 is not supported"), std::string::npos) << msg;
}

TEST(CastOpTest, GradientCastsBackToTheSourceType) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId x = b.placeholder("x", {2, 3});
  ValueId y = b.cast(x, DType::bf16);
  EXPECT_EQ(g.value(y).dtype, DType::bf16);
  ValueId dy = b.placeholder("dy", {2, 3}, DType::bf16);
  const Node n = g.node(g.value(y).producer);
  std::vector<ValueId> dx = op_schema(OpKind::Cast).gradient(b, n, {dy});
  ASSERT_EQ(dx.size(), 1u);
  EXPECT_EQ(g.value(dx[0]).dtype, DType::f32);
  EXPECT_EQ(g.value(dx[0]).shape, (Shape{2, 3}));
  const Node& back = g.node(g.value(dx[0]).producer);
  EXPECT_EQ(back.kind, OpKind::Cast);
  EXPECT_EQ(back.dtype, DType::bf16) << "a Cast's compute dtype is its source dtype";
}

// --numerics all: a watched Cast to f16 counts, at an armed step, what it lost. f16's largest is
// 65504, its smallest subnormal 2^-24 (below 2^-25 rounds to zero): 1e5 and 7e4 overflow to
// inf, 65519 rounds down to 65504 (saturated), 1e-8 flushes to zero; NaN is an input's.
TEST(CastOpTest, WatchedCastCountsWhatItLosesAtArmedSteps) {
  ExecContext ctx;
  ctx.numerics = std::make_shared<NumericsRecorder>(NumericsScope::all);
  ctx.numerics->watch("c", "x", "forward", "f16");
  KernelSpec spec{OpKind::Cast,        CastAttrs{DType::f16}, DType::f32,
                  {{{6}, DType::f32}}, {{{6}, DType::f16}},   "c"};
  auto kernel = create_kernel(spec, ctx);
  Tensor x = floats({1e5f, 7e4f, 65519.0f, 1e-8f, 1.0f, NAN}, {6});
  Tensor y = Tensor::zeros({6}, DType::f16);
  run_kernel(*kernel, ctx, {x}, {y});
  EXPECT_FALSE(ctx.numerics->entries()[0].written);  // not armed: nothing counted
  ctx.numerics->arm(true);
  run_kernel(*kernel, ctx, {x}, {y});
  const NumericsEntry& e = ctx.numerics->entries()[0];
  ASSERT_TRUE(e.written);
  EXPECT_EQ(e.numerics.counts.elements, 6);
  EXPECT_EQ(e.numerics.counts.overflow, 2);
  EXPECT_EQ(e.numerics.counts.saturated, 1);
  EXPECT_EQ(e.numerics.counts.underflow, 1);
  EXPECT_EQ(e.numerics.counts.nan, 1);
  EXPECT_EQ(e.numerics.counts.amax, 1e5f);
  EXPECT_TRUE(std::isnan(e.numerics.scale));
}

}  // namespace
}  // namespace campo
