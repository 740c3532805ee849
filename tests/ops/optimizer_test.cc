// Optimizer updates: ApplyMomentum (plain, Nesterov, weight decay) and ApplyAdam (with
// and without weight decay) against PyTorch's update formulas written out in double, over
// three steps with a fresh gradient each step; in-place semantics through the executor;
// schema checks. Sliced updates (a model array's per-model lr, momentum, weight decay)
// against separate updates of each slice, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "graph/executor.h"
#include "ops/kernel.h"
#include "ops/op.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::error_message;

using testing::all_close;
using testing::random_tensor;

// A host f32 tensor (a plain from_vector on a braced list of integers would be i32).
Tensor floats(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape);
}

// The kernel updates in f32, the reference in double; three steps of a few f32 roundings
// each stay within the table's f32 tolerance.
const testing::Tolerance kF32 = testing::tolerance_for(DType::f32);

Tensor scalar(float v) { return Tensor::from_vector(std::vector<float>{v}, {}); }

std::vector<double> to_double(const Tensor& t) {
  std::vector<double> v;
  for (float f : t.to_float_vector()) v.push_back(f);
  return v;
}

std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// torch.optim.SGD(momentum=mu, weight_decay=wd, nesterov=...), dampening 0, one step.
void sgd_reference(std::vector<double>& var, std::vector<double>& buf, const Tensor& grad,
                   double lr, const MomentumAttrs& a) {
  for (size_t i = 0; i < var.size(); ++i) {
    double g = grad.data_as<float>()[i] + double(a.weight_decay) * var[i];
    buf[i] = double(a.momentum) * buf[i] + g;
    double update = a.nesterov ? g + double(a.momentum) * buf[i] : buf[i];
    var[i] -= lr * update;
  }
}

// torch.optim.Adam(betas, eps, weight_decay), one step t (1-based).
void adam_reference(std::vector<double>& var, std::vector<double>& m, std::vector<double>& v,
                    const Tensor& grad, double lr, int t, const AdamAttrs& a) {
  const double b1 = a.beta1, b2 = a.beta2;
  const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
  for (size_t i = 0; i < var.size(); ++i) {
    double g = grad.data_as<float>()[i] + double(a.weight_decay) * var[i];
    m[i] = b1 * m[i] + (1 - b1) * g;
    v[i] = b2 * v[i] + (1 - b2) * g * g;
    var[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + double(a.epsilon));
  }
}

class MomentumTest : public ::testing::TestWithParam<MomentumAttrs> {};

TEST_P(MomentumTest, ThreeStepsMatchPyTorch) {
  const MomentumAttrs a = GetParam();
  Rng rng(1);
  // 70001 elements: the multithreaded, vectorised path and a scalar tail.
  for (const Shape& shape : {Shape{5, 3}, Shape{70001}}) {
    Tensor var = random_tensor(shape, rng), accum = Tensor::zeros(shape, DType::f32);
    std::vector<double> ref_var = to_double(var), ref_buf(size_t(var.numel()), 0.0);
    ExecContext ctx;
    const float lr = 0.05f;
    for (int step = 1; step <= 3; ++step) {
      Tensor grad = random_tensor(shape, rng);
      auto out = run_op_eager(OpKind::ApplyMomentum, a, DType::f32, {var, accum, grad, scalar(lr)},
                              {}, ctx);
      EXPECT_TRUE(out.empty());
      sgd_reference(ref_var, ref_buf, grad, lr, a);
      EXPECT_TRUE(all_close(var.to_float_vector(), to_float(ref_var), kF32.rtol, kF32.atol))
          << "var after step " << step;
      EXPECT_TRUE(all_close(accum.to_float_vector(), to_float(ref_buf), kF32.rtol, kF32.atol))
          << "accum after step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, MomentumTest,
                         ::testing::Values(MomentumAttrs{0.9f, 0.0f, false},
                                           MomentumAttrs{0.9f, 0.0f, true},
                                           MomentumAttrs{0.9f, 1e-2f, false},
                                           MomentumAttrs{0.8f, 5e-2f, true},
                                           MomentumAttrs{0.0f, 0.0f, false}),
                         [](const auto& info) {
                           const MomentumAttrs& a = info.param;
                           return std::string("mu") + std::to_string(int(a.momentum * 10)) +
                                  (a.weight_decay > 0 ? "_wd" : "") +
                                  (a.nesterov ? "_nesterov" : "");
                         });

class AdamTest : public ::testing::TestWithParam<float> {};

TEST_P(AdamTest, ThreeStepsMatchPyTorch) {
  const AdamAttrs a{0.9f, 0.999f, 1e-8f, GetParam()};
  Rng rng(2);
  for (const Shape& shape : {Shape{4, 3}, Shape{70001}}) {
    Tensor var = random_tensor(shape, rng);
    Tensor m = Tensor::zeros(shape, DType::f32), v = Tensor::zeros(shape, DType::f32);
    std::vector<double> ref_var = to_double(var), ref_m(size_t(var.numel()), 0.0),
                        ref_v(size_t(var.numel()), 0.0);
    ExecContext ctx;
    const float lr = 1e-2f;
    for (int step = 1; step <= 3; ++step) {
      Tensor grad = random_tensor(shape, rng);
      run_op_eager(OpKind::ApplyAdam, a, DType::f32,
                   {var, m, v, grad, scalar(lr), scalar(float(step))}, {}, ctx);
      adam_reference(ref_var, ref_m, ref_v, grad, lr, step, a);
      EXPECT_TRUE(all_close(var.to_float_vector(), to_float(ref_var), kF32.rtol, kF32.atol))
          << "var after step " << step;
      EXPECT_TRUE(all_close(m.to_float_vector(), to_float(ref_m), kF32.rtol, kF32.atol));
      EXPECT_TRUE(all_close(v.to_float_vector(), to_float(ref_v), kF32.rtol, kF32.atol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WeightDecay, AdamTest, ::testing::Values(0.0f, 1e-2f),
                         [](const auto& info) { return info.param > 0 ? "wd" : "no_wd"; });

TEST(OptimizerOpTest, AdamRejectsStepZero) {
  ExecContext ctx;
  Tensor t = Tensor::zeros({2}, DType::f32);
  std::string msg = error_message([&] {
    run_op_eager(OpKind::ApplyAdam, AdamAttrs{}, DType::f32,
                 {t.clone(), t.clone(), t.clone(), t.clone(), scalar(0.1f), scalar(0.0f)}, {}, ctx);
  });
  EXPECT_NE(msg.find("step must be >= 1"), std::string::npos) << msg;
}

TEST(OptimizerOpTest, SchemaChecksShapesAndHasSideEffects) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId var = b.placeholder("var", {3, 2});
  ValueId accum = b.placeholder("accum", {3, 2});
  ValueId grad = b.placeholder("grad", {3, 2});
  ValueId bad = b.placeholder("bad", {2, 3});
  ValueId lr = b.placeholder("lr", {});
  ValueId step = b.placeholder("step", {});
  ValueId vec = b.placeholder("vec", {1});
  ValueId lr4 = b.placeholder("lr4", {4});  // 4 does not divide var's 6 elements
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {var, accum, grad, lr}, MomentumAttrs{}), kNoValue);
  EXPECT_EQ(b.op(OpKind::ApplyAdam, {var, accum, accum, grad, lr, step}, AdamAttrs{}), kNoValue);
  const OpSchema& s = op_schema(OpKind::ApplyAdam);
  EXPECT_TRUE(s.has_side_effects);
  EXPECT_EQ(s.amp_list, AmpList::fp32);
  EXPECT_EQ(s.gradient, nullptr);
  EXPECT_TRUE(op_schema(OpKind::ApplyMomentum).has_side_effects);

  std::string msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, accum, bad, lr}, MomentumAttrs{});
  });
  EXPECT_NE(msg.find("grad has shape [2, 3] but var has shape [3, 2]"), std::string::npos) << msg;
  msg = error_message([&] { b.op(OpKind::ApplyMomentum, {var, bad, grad, lr}, MomentumAttrs{}); });
  EXPECT_NE(msg.find("accum has shape"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, accum, grad, lr4}, MomentumAttrs{});
  });
  EXPECT_NE(msg.find("lr has shape [4] but var has shape [3, 2]"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyAdam, {var, accum, bad, grad, lr, step}, AdamAttrs{});
  });
  EXPECT_NE(msg.find("v has shape"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyAdam, {var, accum, accum, grad, lr, vec}, AdamAttrs{});
  });
  EXPECT_NE(msg.find("step must be a scalar"), std::string::npos) << msg;
  msg = error_message([&] { b.op(OpKind::ApplyMomentum, {var, accum, grad}, MomentumAttrs{}); });
  EXPECT_NE(msg.find("takes 4 inputs"), std::string::npos) << msg;
}

// A multi-tensor node (attrs `tensors` = k): k inputs per role, role by role, then lr (and
// step), the flag and k copies; each variable is checked on its own and named by number.
TEST(OptimizerOpTest, MultiTensorSchemaChecksEachVariable) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId v1 = b.placeholder("v1", {3, 2});
  ValueId v2 = b.placeholder("v2", {4});
  ValueId bad = b.placeholder("bad", {5});
  ValueId lr = b.placeholder("lr", {});
  ValueId lr3 = b.placeholder("lr3", {3});
  ValueId step = b.placeholder("step", {});
  ValueId flag = b.placeholder("flag", {});
  ValueId c1 = b.placeholder("c1", {3, 2}, DType::bf16);
  ValueId c2 = b.placeholder("c2", {4}, DType::f16);
  MomentumAttrs two;
  two.tensors = 2;
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {v1, v2, v1, v2, v1, v2, lr}, two), kNoValue);
  MomentumAttrs flagged = two;
  flagged.skip_if_not_finite = true;
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {v1, v2, v1, v2, v1, v2, lr, flag, c1, c2}, flagged),
            kNoValue);
  AdamAttrs adam;
  adam.tensors = 2;
  EXPECT_EQ(b.op(OpKind::ApplyAdam, {v1, v2, v1, v2, v1, v2, v1, v2, lr, step}, adam), kNoValue);

  std::string msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {v1, v2, v1, v2, v1, bad, lr}, two, "group");
  });
  EXPECT_NE(msg.find("ApplyMomentum 'group': grad 2 has shape [5] but var 2 has shape [4]"),
            std::string::npos)
      << msg;
  msg = error_message([&] { b.op(OpKind::ApplyMomentum, {v1, v2, v1, v2, v1, v2, lr, c1}, two); });
  EXPECT_NE(msg.find("takes 7 inputs (9 with weight copies), got 8"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {v1, v2, v1, v2, v1, v2, lr, c2, c1}, two);
  });
  EXPECT_NE(msg.find("the weight copy 1 has shape [4] but var 1 has shape [3, 2]"),
            std::string::npos)
      << msg;
  // lr [3]: 3 divides var 1's 6 elements but not var 2's 4.
  msg = error_message([&] { b.op(OpKind::ApplyMomentum, {v1, v2, v1, v2, v1, v2, lr3}, two); });
  EXPECT_NE(msg.find("lr has shape [3] but var 2 has shape [4] (4 elements)"), std::string::npos)
      << msg;
  msg = error_message([&] { b.op(OpKind::ApplyAdam, {v1, v2, v1, v2, v1, v2, v1, v2, lr}, adam); });
  EXPECT_NE(msg.find("takes 10 inputs"), std::string::npos) << msg;
}

TEST(OptimizerOpTest, UpdatesVariablesInPlaceThroughTheExecutor) {
  // A graph whose only node with an effect is the update: it must survive dead-code
  // elimination and write into the VariableStore's tensors.
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId w = b.variable_exact("w", {3}, Init::constant(1.0f), VariableKind::parameter);
  ValueId buf = b.variable_exact("w.momentum", {3}, Init::zeros(), VariableKind::optimizer_state);
  ValueId grad = b.placeholder("grad", {3});
  ValueId lr = b.placeholder("lr", {});
  b.set_phase(Phase::update);
  b.op(OpKind::ApplyMomentum, {w, buf, grad, lr}, MomentumAttrs{0.5f, 0.0f, false});
  Executable exe(g, vars, CompileOptions{});
  exe.input("grad").copy_from(floats({1, 2, 3}, {3}));
  exe.input("lr").copy_from(scalar(0.1f));
  exe.run();  // buf = g, w = 1 - 0.1 g
  exe.run();  // buf = 0.5 g + g = 1.5 g, w -= 0.15 g
  EXPECT_TRUE(all_close(vars.at("w").to_float_vector(), {0.75f, 0.5f, 0.25f}, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(vars.at("w.momentum").to_float_vector(), {1.5f, 3.0f, 4.5f}, 1e-6, 0));
}

// A weight copy (the optional last input) is the updated var rounded as Cast rounds it,
// and does not change the update: every block, on the multithreaded path and the tail.
TEST(OptimizerOpTest, WeightCopyIsTheUpdatedVarRounded) {
  Rng rng(3);
  for (DType low : {DType::bf16, DType::f16}) {
    for (int variant = 0; variant < 3; ++variant) {
      const Shape shape{70001};
      Tensor var = random_tensor(shape, rng), grad = random_tensor(shape, rng);
      Tensor state = random_tensor(shape, rng, 0.0f, 1.0f);
      Tensor var2 = var.clone(), state2 = state.clone(), state3 = state.clone();
      Tensor state4 = state.clone(), copy = Tensor::zeros(shape, low);
      ExecContext ctx;
      if (variant < 2) {
        const MomentumAttrs a{0.9f, 1e-2f, variant == 1};
        run_op_eager(OpKind::ApplyMomentum, a, DType::f32, {var, state, grad, scalar(0.1f)}, {},
                     ctx);
        run_op_eager(OpKind::ApplyMomentum, a, DType::f32, {var2, state2, grad, scalar(0.1f), copy},
                     {}, ctx);
      } else {
        run_op_eager(OpKind::ApplyAdam, AdamAttrs{}, DType::f32,
                     {var, state, state3, grad, scalar(0.1f), scalar(2.0f)}, {}, ctx);
        run_op_eager(OpKind::ApplyAdam, AdamAttrs{}, DType::f32,
                     {var2, state2, state4, grad, scalar(0.1f), scalar(2.0f), copy}, {}, ctx);
      }
      EXPECT_TRUE(all_close(var2, var, 0, 0)) << dtype_name(low) << " variant " << variant;
      Tensor want = Tensor::zeros(shape, low);
      convert(var.data(), DType::f32, want.data(), low, size_t(var.numel()));
      EXPECT_EQ(std::memcmp(copy.data(), want.data(), want.nbytes()), 0)
          << dtype_name(low) << " variant " << variant;
    }
  }
}

TEST(OptimizerOpTest, WeightCopyMustBeLowPrecisionOfVarsShape) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId var = b.placeholder("var", {3, 2});
  ValueId grad = b.placeholder("grad", {3, 2});
  ValueId lr = b.placeholder("lr", {});
  ValueId f32_copy = b.placeholder("f32_copy", {3, 2});
  ValueId short_copy = b.placeholder("short_copy", {3}, DType::bf16);
  std::string msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, var, grad, lr, f32_copy}, MomentumAttrs{});
  });
  EXPECT_NE(msg.find("the weight copy must be f16 or bf16, got f32"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, var, grad, lr, short_copy}, MomentumAttrs{});
  });
  EXPECT_NE(msg.find("the weight copy has shape [3]"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, var, grad, lr, short_copy, short_copy}, MomentumAttrs{});
  });
  EXPECT_NE(msg.find("takes 4 inputs (5 with a weight copy), got 6"), std::string::npos) << msg;
}

// ---- slices (ops/op.h: lr [S], per-slice momentum and weight decay) ----

// A view of elements [begin, begin + len) of a 1-D tensor (f32 or 16-bit).
Tensor part(const Tensor& t, int64_t begin, int64_t len) {
  char* base = static_cast<char*>(t.data()) + begin * int64_t(dtype_size(t.dtype()));
  return Tensor::borrow(base, {len}, t.dtype());
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// How the slice hyperparameters are given: lr [S] with per-slice vectors, lr [S] alone
// (the scalar attrs for every slice), or a scalar lr with per-slice vectors.
enum class SliceSource { lr_and_vectors, lr_only, vectors_only };

struct SliceCase {
  int slices;
  int64_t numel;
  SliceSource source;
  DType copy;  // f32: no weight copy
};

std::string slice_case_name(const SliceCase& c) {
  const char* src[] = {"lr_and_vectors", "lr_only", "vectors_only"};
  return "S" + std::to_string(c.slices) + "_n" + std::to_string(c.numel) + "_" +
         src[int(c.source)] + (c.copy == DType::f32 ? "" : std::string("_") + dtype_name(c.copy));
}

void PrintTo(const SliceCase& c, std::ostream* os) { *os << slice_case_name(c); }

// S in {1, 3, 4}; 12 elements (one block per slice), and 60036 = 3 * 4 * 5003 elements: the
// parallel path with slices of 20012 / 15009 elements, not multiples of the 4096 block.
std::vector<SliceCase> slice_cases() {
  std::vector<SliceCase> cases;
  for (int slices : {1, 3, 4})
    for (int64_t numel : {int64_t(12), int64_t(60036)})
      for (SliceSource source :
           {SliceSource::lr_and_vectors, SliceSource::lr_only, SliceSource::vectors_only})
        cases.push_back({slices, numel, source, DType::f32});
  cases.push_back({3, 60036, SliceSource::lr_and_vectors, DType::bf16});
  cases.push_back({4, 60036, SliceSource::lr_and_vectors, DType::f16});
  cases.push_back({4, 12, SliceSource::vectors_only, DType::bf16});
  return cases;
}

const float kSliceLr[] = {0.05f, 0.1f, 0.02f, 0.07f};
const float kSliceMomentum[] = {0.9f, 0.5f, 0.0f, 0.99f};
const float kSliceWeightDecay[] = {0.0f, 1e-2f, 5e-2f, 1e-4f};

class SlicedUpdateTest : public ::testing::TestWithParam<SliceCase> {
 protected:
  // The node's lr input and the slice s's scalar lr for the separate update.
  Tensor node_lr() const {
    const SliceCase& c = GetParam();
    if (c.source == SliceSource::vectors_only) return scalar(0.03f);
    return floats(std::vector<float>(kSliceLr, kSliceLr + c.slices), {int64_t(c.slices)});
  }
  float slice_lr(int s) const {
    return GetParam().source == SliceSource::vectors_only ? 0.03f : kSliceLr[s];
  }
  bool has_vectors() const { return GetParam().source != SliceSource::lr_only; }
  std::vector<float> vec(const float* v) const {
    return has_vectors() ? std::vector<float>(v, v + GetParam().slices) : std::vector<float>{};
  }
};

// var and accum (and the copy) after two steps of one sliced ApplyMomentum equal, bit for
// bit, those of separate ApplyMomentum runs on each slice with its scalar hyperparameters.
TEST_P(SlicedUpdateTest, MomentumEqualsSeparateSliceUpdates) {
  const SliceCase& c = GetParam();
  for (bool nesterov : {false, true}) {
    Rng rng(20);
    const Shape shape{c.numel};
    Tensor var = random_tensor(shape, rng), accum = Tensor::zeros(shape, DType::f32);
    Tensor var2 = var.clone(), accum2 = accum.clone();
    const bool with_copy = c.copy != DType::f32;
    Tensor copy = Tensor::zeros(shape, with_copy ? c.copy : DType::f32), copy2 = copy.clone();
    MomentumAttrs sliced{0.8f, 2e-2f, nesterov};
    sliced.slice_momentum = vec(kSliceMomentum);
    sliced.slice_weight_decay = vec(kSliceWeightDecay);
    ExecContext ctx;
    const int64_t len = c.numel / c.slices;
    for (int step = 0; step < 2; ++step) {
      Tensor grad = random_tensor(shape, rng);
      std::vector<Tensor> in = {var, accum, grad, node_lr()};
      if (with_copy) in.push_back(copy);
      run_op_eager(OpKind::ApplyMomentum, sliced, DType::f32, in, {}, ctx);
      for (int s = 0; s < c.slices; ++s) {
        MomentumAttrs one{has_vectors() ? kSliceMomentum[s] : sliced.momentum,
                          has_vectors() ? kSliceWeightDecay[s] : sliced.weight_decay, nesterov};
        std::vector<Tensor> part_in = {part(var2, s * len, len), part(accum2, s * len, len),
                                       part(grad, s * len, len), scalar(slice_lr(s))};
        if (with_copy) part_in.push_back(part(copy2, s * len, len));
        run_op_eager(OpKind::ApplyMomentum, one, DType::f32, part_in, {}, ctx);
      }
      EXPECT_TRUE(same_bits(var, var2)) << "var, step " << step << " nesterov " << nesterov;
      EXPECT_TRUE(same_bits(accum, accum2)) << "accum, step " << step << " nesterov " << nesterov;
      if (with_copy) EXPECT_TRUE(same_bits(copy, copy2)) << "copy, step " << step;
    }
    // The hyperparameters differ per slice, so the slices did not all update alike.
    if (c.slices > 1) EXPECT_FALSE(same_bits(part(accum, 0, len), part(accum, len, len)));
  }
}

TEST_P(SlicedUpdateTest, AdamEqualsSeparateSliceUpdates) {
  const SliceCase& c = GetParam();
  Rng rng(21);
  const Shape shape{c.numel};
  Tensor var = random_tensor(shape, rng);
  Tensor m = Tensor::zeros(shape, DType::f32), v = Tensor::zeros(shape, DType::f32);
  Tensor var2 = var.clone(), m2 = m.clone(), v2 = v.clone();
  const bool with_copy = c.copy != DType::f32;
  Tensor copy = Tensor::zeros(shape, with_copy ? c.copy : DType::f32), copy2 = copy.clone();
  AdamAttrs sliced{0.9f, 0.99f, 1e-8f, 3e-2f};
  sliced.slice_weight_decay = vec(kSliceWeightDecay);
  ExecContext ctx;
  const int64_t len = c.numel / c.slices;
  for (int step = 1; step <= 2; ++step) {
    Tensor grad = random_tensor(shape, rng);
    std::vector<Tensor> in = {var, m, v, grad, node_lr(), scalar(float(step))};
    if (with_copy) in.push_back(copy);
    run_op_eager(OpKind::ApplyAdam, sliced, DType::f32, in, {}, ctx);
    for (int s = 0; s < c.slices; ++s) {
      AdamAttrs one{0.9f, 0.99f, 1e-8f, has_vectors() ? kSliceWeightDecay[s] : 3e-2f};
      std::vector<Tensor> part_in = {part(var2, s * len, len), part(m2, s * len, len),
                                     part(v2, s * len, len),   part(grad, s * len, len),
                                     scalar(slice_lr(s)),      scalar(float(step))};
      if (with_copy) part_in.push_back(part(copy2, s * len, len));
      run_op_eager(OpKind::ApplyAdam, one, DType::f32, part_in, {}, ctx);
    }
    EXPECT_TRUE(same_bits(var, var2)) << "var, step " << step;
    EXPECT_TRUE(same_bits(m, m2)) << "m, step " << step;
    EXPECT_TRUE(same_bits(v, v2)) << "v, step " << step;
    if (with_copy) EXPECT_TRUE(same_bits(copy, copy2)) << "copy, step " << step;
  }
  if (c.slices > 1 && c.source != SliceSource::lr_only)
    EXPECT_FALSE(same_bits(part(m, 0, len), part(m, len, len)));
}

INSTANTIATE_TEST_SUITE_P(Slices, SlicedUpdateTest, ::testing::ValuesIn(slice_cases()),
                         [](const auto& info) { return slice_case_name(info.param); });

// An overflowed step (AllFinite flag 0) leaves every slice as it was.
TEST(OptimizerOpTest, SlicedUpdateIsSkippedWhenNotFinite) {
  Rng rng(22);
  Tensor var = random_tensor({12}, rng), accum = random_tensor({12}, rng);
  Tensor var0 = var.clone(), accum0 = accum.clone();
  MomentumAttrs a{0.9f, 0.0f, false, true};
  a.slice_momentum = {0.1f, 0.2f, 0.3f};
  ExecContext ctx;
  run_op_eager(OpKind::ApplyMomentum, a, DType::f32,
               {var, accum, random_tensor({12}, rng), floats({0.1f, 0.2f, 0.3f}, {3}), scalar(0)},
               {}, ctx);
  EXPECT_TRUE(same_bits(var, var0));
  EXPECT_TRUE(same_bits(accum, accum0));
}

TEST(OptimizerOpTest, SchemaChecksSlices) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ValueId var = b.placeholder("var", {12});
  ValueId lr = b.placeholder("lr", {});
  ValueId lr1 = b.placeholder("lr1", {1});
  ValueId lr3 = b.placeholder("lr3", {3});
  ValueId lr5 = b.placeholder("lr5", {5});
  ValueId lr_matrix = b.placeholder("lr_matrix", {3, 1});
  ValueId step = b.placeholder("step", {});
  MomentumAttrs three_mu;
  three_mu.slice_momentum = {0.9f, 0.8f, 0.7f};
  AdamAttrs three_wd;
  three_wd.slice_weight_decay = {0.0f, 0.1f, 0.2f};
  // Accepted: lr [1], lr [3] with or without vectors of 3, scalar lr with vectors of 3.
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {var, var, var, lr1}, MomentumAttrs{}), kNoValue);
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {var, var, var, lr3}, MomentumAttrs{}), kNoValue);
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {var, var, var, lr3}, three_mu), kNoValue);
  EXPECT_EQ(b.op(OpKind::ApplyMomentum, {var, var, var, lr}, three_mu), kNoValue);
  EXPECT_EQ(b.op(OpKind::ApplyAdam, {var, var, var, var, lr3, step}, three_wd), kNoValue);
  EXPECT_EQ(b.op(OpKind::ApplyAdam, {var, var, var, var, lr, step}, three_wd), kNoValue);

  std::string msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, var, var, lr5}, MomentumAttrs{}, "w/ApplyMomentum");
  });
  EXPECT_NE(msg.find("ApplyMomentum 'w/ApplyMomentum': lr has shape [5] but var has shape [12]"),
            std::string::npos)
      << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyAdam, {var, var, var, var, lr5, step}, AdamAttrs{});
  });
  EXPECT_NE(msg.find("lr has shape [5] but var has shape [12]"), std::string::npos) << msg;
  msg = error_message([&] {
    b.op(OpKind::ApplyMomentum, {var, var, var, lr_matrix}, MomentumAttrs{});
  });
  EXPECT_NE(msg.find("lr has shape [3, 1]"), std::string::npos) << msg;

  MomentumAttrs two_wd;
  two_wd.slice_weight_decay = {0.1f, 0.2f};
  msg = error_message([&] { b.op(OpKind::ApplyMomentum, {var, var, var, lr3}, two_wd); });
  EXPECT_NE(msg.find("slice_weight_decay has 2 values but lr has shape [3] (3 slices)"),
            std::string::npos)
      << msg;
  MomentumAttrs mismatched = three_mu;
  mismatched.slice_weight_decay = {0.1f, 0.2f};
  msg = error_message([&] { b.op(OpKind::ApplyMomentum, {var, var, var, lr}, mismatched); });
  EXPECT_NE(msg.find("slice_weight_decay has 2 values but slice_momentum has 3 values"),
            std::string::npos)
      << msg;
  MomentumAttrs five_mu;
  five_mu.slice_momentum = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  msg = error_message([&] { b.op(OpKind::ApplyMomentum, {var, var, var, lr}, five_mu); });
  EXPECT_NE(msg.find("slice_momentum has 5 values (slices) but var has shape [12]"),
            std::string::npos)
      << msg;
  AdamAttrs two_adam;
  two_adam.slice_weight_decay = {0.1f, 0.2f};
  msg = error_message([&] { b.op(OpKind::ApplyAdam, {var, var, var, var, lr3, step}, two_adam); });
  EXPECT_NE(msg.find("slice_weight_decay has 2 values but lr has shape [3]"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace campo
