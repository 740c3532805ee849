// Optimizer updates of pure low-precision training (ops/op.h): var and state stored in bf16,
// updated in f32 and rounded back. Rounding to nearest gives the bits of the f32 update
// rounded, for every mix of f32 and bf16 roles; stochastic rounding keeps moving weights
// whose every update is below half a bf16 ulp, where rounding to nearest stalls for good, with
// the f32 trajectory as its mean; its bits depend on the seed and the step, never on the
// thread count. The schema refuses what the kernels cannot store.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "ops/kernel.h"
#include "ops/op.h"
#include "tests/runtime/minifloat_test_util.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::error_message;
using testing::random_tensor;
using testing::ScopedOmpThreads;

Tensor scalar(float v) { return Tensor::from_vector(std::vector<float>{v}, {}); }
Tensor full(const Shape& shape, float v) {
  return Tensor::from_vector(std::vector<float>(size_t(shape_numel(shape)), v), shape);
}

// t in `dtype` (rounded to nearest even when narrowing).
Tensor as(const Tensor& t, DType dtype) {
  Tensor out = Tensor::empty(t.shape(), dtype);
  convert(t.data(), t.dtype(), out.data(), dtype, size_t(t.numel()));
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// One update on `stored` (var and its state, each f32 or bf16) against the f32 update of their
// f32 values, rounded to nearest into each stored type: the same bits. Three steps.
void expect_f32_update_rounded(OpKind kind, const Attrs& attrs, std::vector<DType> types) {
  Rng rng(5);
  const Shape shape{70001};  // the parallel, vectorised path and a tail
  std::vector<Tensor> stored, reference;
  for (size_t r = 0; r < types.size(); ++r) {
    const Tensor init = random_tensor(shape, rng, r == 0 ? -1.0f : 0.0f, 1.0f);
    stored.push_back(as(init, types[r]));
  }
  ExecContext ctx;
  for (int step = 1; step <= 3; ++step) {
    reference.clear();
    for (const Tensor& t : stored) reference.push_back(as(t, DType::f32));
    const Tensor grad = random_tensor(shape, rng);
    std::vector<Tensor> in = stored, ref_in = reference;
    for (auto* v : {&in, &ref_in}) {
      v->push_back(grad);
      v->push_back(scalar(0.01f));
      if (kind == OpKind::ApplyAdam) v->push_back(scalar(float(step)));
    }
    run_op_eager(kind, attrs, DType::f32, in, {}, ctx);
    run_op_eager(kind, attrs, DType::f32, ref_in, {}, ctx);
    for (size_t r = 0; r < types.size(); ++r)
      EXPECT_TRUE(same_bits(stored[r], as(reference[r], types[r])))
          << "role " << r << " in " << dtype_name(types[r]) << ", step " << step;
  }
}

TEST(PureLowPrecisionUpdateTest, NearestIsTheF32UpdateRounded) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  for (const auto& types :
       std::vector<std::vector<DType>>{{bf16, f32}, {bf16, bf16}, {f32, bf16}}) {
    SCOPED_TRACE(std::string(dtype_name(types[0])) + " var, " + dtype_name(types[1]) + " accum");
    expect_f32_update_rounded(OpKind::ApplyMomentum, MomentumAttrs{0.9f, 1e-2f, false}, types);
    expect_f32_update_rounded(OpKind::ApplyMomentum, MomentumAttrs{0.9f, 0.0f, true}, types);
  }
  for (const auto& types : std::vector<std::vector<DType>>{
           {bf16, f32, f32}, {bf16, bf16, bf16}, {f32, bf16, bf16}, {bf16, f32, bf16}}) {
    SCOPED_TRACE(std::string(dtype_name(types[0])) + " var, " + dtype_name(types[1]) + " m, " +
                 dtype_name(types[2]) + " v");
    expect_f32_update_rounded(OpKind::ApplyAdam, AdamAttrs{}, types);
  }
}

// n weights at 1.0 in bf16, each step lowered by lr * grad = 0.3 ulp (below 1 the bf16
// spacing is 2^-8), plain SGD; `steps` updates at executor steps 0, 1, ...
Tensor tiny_updates(bool stochastic, int steps, uint64_t seed = 7, int64_t first_step = 0) {
  const Shape shape{70001};
  Tensor var = as(full(shape, 1.0f), DType::bf16);
  Tensor accum = Tensor::zeros(shape, DType::f32);
  const Tensor grad = full(shape, 1.0f);
  MomentumAttrs a{0.0f, 0.0f, false};
  a.stochastic_rounding = stochastic;
  ExecContext ctx;
  ctx.seed = seed;
  for (int s = 0; s < steps; ++s) {
    ctx.step = first_step + s;
    run_op_eager(OpKind::ApplyMomentum, a, DType::f32, {var, accum, grad, scalar(0.3f * 0x1p-8f)},
                 {}, ctx);
  }
  return var;
}

double mean_of(const Tensor& bf16) {
  double sum = 0;
  for (float x : bf16.to_float_vector()) sum += x;
  return sum / double(bf16.numel());
}

TEST(PureLowPrecisionUpdateTest, StochasticRoundingMovesWhereNearestStalls) {
  const int steps = 10;
  const double lr = 0.3 * 0x1p-8;
  // Nearest: every update rounds back to 1, for ever.
  const Tensor nearest = tiny_updates(false, steps);
  for (float x : nearest.to_float_vector()) ASSERT_EQ(x, 1.0f);
  // Stochastic: each step is unbiased, so the mean follows 1 - steps lr (3 ulps down), within
  // 6 standard deviations of the mean of 70001 walks (each at most sqrt(steps) / 2 ulps).
  const Tensor stochastic = tiny_updates(true, steps);
  const double sigma = 0.5 * std::sqrt(double(steps)) * 0x1p-8 / std::sqrt(70001.0);
  EXPECT_NEAR(mean_of(stochastic), 1.0 - steps * lr, 6 * sigma);
  // ... on the bf16 grid, never more than `steps` ulps from the start.
  for (float x : stochastic.to_float_vector()) ASSERT_GE(x, 1.0f - float(steps) * 0x1p-8f);
}

TEST(PureLowPrecisionUpdateTest, StochasticBitsFollowSeedAndStepNotThreads) {
  Tensor one, two;
  {
    ScopedOmpThreads threads(1);
    one = tiny_updates(true, 3);
  }
  {
    ScopedOmpThreads threads(2);
    two = tiny_updates(true, 3);
  }
  EXPECT_TRUE(same_bits(one, two));
  EXPECT_FALSE(same_bits(one, tiny_updates(true, 3, 8)));     // another seed
  EXPECT_FALSE(same_bits(one, tiny_updates(true, 3, 7, 1)));  // other steps
}

TEST(PureLowPrecisionUpdateTest, SchemaRefusesWhatTheKernelsCannotStore) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  const ValueId var = b.placeholder("var", {3, 2}, DType::bf16);
  const ValueId state = b.placeholder("state", {3, 2}, DType::bf16);
  const ValueId grad = b.placeholder("grad", {3, 2});
  const ValueId lr = b.placeholder("lr", {});
  const ValueId step = b.placeholder("step", {});
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {var, state, grad, lr}, MomentumAttrs{}), kNoValue);
  EXPECT_EQ(b.op(OpKind::ApplyAdam, {var, state, state, grad, lr, step}, AdamAttrs{}), kNoValue);
  std::string msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, state, b.placeholder("g16", {3, 2}, DType::bf16), lr},
         MomentumAttrs{});
  });
  EXPECT_NE(msg.find("grad must be f32, got bf16"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {b.placeholder("h", {3, 2}, DType::f16), state, grad, lr},
         MomentumAttrs{});
  });
  EXPECT_NE(msg.find("var must be f32 or bf16, got f16"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, state, grad, lr, b.placeholder("copy", {3, 2}, DType::bf16)},
         MomentumAttrs{});
  });
  EXPECT_NE(msg.find("var is stored in bf16: it is the low-precision weight and takes no weight "
                     "copy"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace campo
