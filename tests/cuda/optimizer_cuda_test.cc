// CUDA ApplyMomentum / ApplyAdam against the CPU kernels (ops/cpu/optimizer.cc): the same
// in-place update on the same host values, then the updated variables, state and weight
// copy compared. Plain, nesterov, weight decay, slices (lr [S] and per-slice vectors), the
// AllFinite flag at 1 (update) and 0 (untouched), f16 / bf16 weight copies, sizes 1, 7 and
// 999999 (tails, three slices); Adam at step 1 and 1000, and a step below 1 reported.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::random_tensor_of;

// The kernel does the CPU's f32 operations one by one (no FMA), and division and sqrt are
// IEEE-rounded on both, so var and the state are expected bit for bit; the only slack is
// Adam's bias corrections, pow in double on both sides, whose last double ulp may differ
// and flip an f32 rounding: a few f32 ulp (rtol 1e-6), no absolute slack beyond denormals.
const testing::Tolerance kUpdateTol{1e-6, 1e-30};

// Runs `kind` in place on clones of `host` on the CPU and on device copies of it on `gpu`,
// and compares the inputs at `updated` afterwards (the weight copy with its dtype's
// tolerance: a one-ulp difference of var may flip its rounding).
::testing::AssertionResult update_matches_cpu(Backend& gpu, OpKind kind, const Attrs& attrs,
                                              const std::vector<Tensor>& host,
                                              const std::vector<size_t>& updated) {
  std::vector<Tensor> cpu_in;
  for (const Tensor& t : host) cpu_in.push_back(t.clone());
  ExecContext cpu_ctx;
  run_op_eager(kind, attrs, DType::f32, cpu_in, {}, cpu_ctx);

  ExecContext gpu_ctx(std::shared_ptr<Backend>(&gpu, [](Backend*) {}));
  std::vector<Tensor> gpu_in;
  for (const Tensor& t : host) gpu_in.push_back(gpu.to_device(t));
  run_op_eager(kind, attrs, DType::f32, gpu_in, {}, gpu_ctx);
  gpu.synchronize();
  for (size_t i : updated) {
    const testing::Tolerance tol =
        host[i].dtype() == DType::f32 ? kUpdateTol : testing::tolerance_for(host[i].dtype());
    auto r = testing::all_close(gpu.to_host(gpu_in[i]), cpu_in[i], tol.rtol, tol.atol);
    if (!r)
      return ::testing::AssertionFailure()
             << op_name(kind) << " input " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

Tensor scalar(float v) { return Tensor::from_vector(std::vector<float>{v}, {}); }

const Shape kSizes[] = {{1}, {7}, {999999}};

struct MomentumCase {
  MomentumAttrs attrs;
  bool lr_per_slice = false;
};

std::vector<MomentumCase> momentum_cases() {
  MomentumAttrs plain;
  MomentumAttrs nesterov{0.9f, 1e-4f, true, false, {}, {}};
  MomentumAttrs slices{0.9f, 0.0f, false, false, {0.5f, 0.9f, 0.99f}, {0.0f, 1e-3f, 1e-2f}};
  return {{plain}, {nesterov}, {slices}, {plain, true}, {nesterov, true}};
}

TEST(OptimizerCudaTest, MomentumMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(51);
  for (const Shape& s : kSizes)
    for (const MomentumCase& c : momentum_cases()) {
      const bool sliced = c.lr_per_slice || !c.attrs.slice_momentum.empty();
      if (sliced && s[0] % 3 != 0) continue;
      const Tensor lr = c.lr_per_slice
                            ? Tensor::from_vector(std::vector<float>{0.1f, 0.01f, 0.001f}, {3})
                            : scalar(0.05f);
      const std::vector<Tensor> in{random_tensor_of(DType::f32, s, rng),
                                   random_tensor_of(DType::f32, s, rng, -0.1f, 0.1f),
                                   random_tensor_of(DType::f32, s, rng), lr};
      EXPECT_TRUE(update_matches_cpu(*gpu, OpKind::ApplyMomentum, c.attrs, in, {0, 1}))
          << shape_str(s) << (c.attrs.nesterov ? " nesterov" : "") << (sliced ? " sliced" : "");
    }
}

// The AllFinite flag: 1 updates, 0 leaves var, accum and the copy as they were; a weight
// copy of each low-precision dtype is rewritten from the updated var.
TEST(OptimizerCudaTest, MomentumFlagAndCopy) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(52);
  MomentumAttrs a;
  a.skip_if_not_finite = true;
  for (DType copy : {DType::f16, DType::bf16})
    for (float flag : {1.0f, 0.0f}) {
      const Shape s{1000003};
      const std::vector<Tensor> in{random_tensor_of(DType::f32, s, rng),
                                   random_tensor_of(DType::f32, s, rng, -0.1f, 0.1f),
                                   random_tensor_of(DType::f32, s, rng),
                                   scalar(0.05f),
                                   scalar(flag),
                                   random_tensor_of(copy, s, rng)};
      EXPECT_TRUE(update_matches_cpu(*gpu, OpKind::ApplyMomentum, a, in, {0, 1, 5}))
          << dtype_name(copy) << " flag " << flag;
    }
}

TEST(OptimizerCudaTest, AdamMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(53);
  AdamAttrs plain;
  AdamAttrs decayed{0.9f, 0.98f, 1e-6f, 1e-2f, false, {}};
  AdamAttrs sliced{0.9f, 0.999f, 1e-8f, 0.0f, false, {0.0f, 1e-2f, 1e-1f}};
  for (const Shape& s : kSizes)
    for (float step : {1.0f, 1000.0f})
      for (int k = 0; k < 4; ++k) {
        const bool lr_per_slice = k == 3;
        const AdamAttrs& a = k == 0 ? plain : k == 1 ? decayed : k == 2 ? sliced : plain;
        if ((k >= 2) && s[0] % 3 != 0) continue;
        const Tensor lr = lr_per_slice
                              ? Tensor::from_vector(std::vector<float>{1e-3f, 1e-2f, 3e-4f}, {3})
                              : scalar(1e-3f);
        const std::vector<Tensor> in{random_tensor_of(DType::f32, s, rng),
                                     random_tensor_of(DType::f32, s, rng, -0.1f, 0.1f),
                                     random_tensor_of(DType::f32, s, rng, 0.0f, 0.01f),
                                     random_tensor_of(DType::f32, s, rng),
                                     lr,
                                     scalar(step)};
        EXPECT_TRUE(update_matches_cpu(*gpu, OpKind::ApplyAdam, a, in, {0, 1, 2}))
            << shape_str(s) << " step " << step << " case " << k;
      }
}

TEST(OptimizerCudaTest, AdamFlagAndCopy) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(54);
  AdamAttrs a;
  a.skip_if_not_finite = true;
  for (DType copy : {DType::f16, DType::bf16})
    for (float flag : {1.0f, 0.0f}) {
      const Shape s{4099};
      const std::vector<Tensor> in{random_tensor_of(DType::f32, s, rng),
                                   random_tensor_of(DType::f32, s, rng, -0.1f, 0.1f),
                                   random_tensor_of(DType::f32, s, rng, 0.0f, 0.01f),
                                   random_tensor_of(DType::f32, s, rng),
                                   scalar(1e-3f),
                                   scalar(7.0f),
                                   scalar(flag),
                                   random_tensor_of(copy, s, rng)};
      EXPECT_TRUE(update_matches_cpu(*gpu, OpKind::ApplyAdam, a, in, {0, 1, 2, 7}))
          << dtype_name(copy) << " flag " << flag;
    }
}

// A multi-tensor update (attrs `tensors`, ops/op.h UpdateLayout) of 70 variables of mixed
// sizes (more than one launch's table of 64; empty ones skipped), with the AllFinite flag
// and bf16 / f16 weight copies, against the CPU's multi-tensor kernel, which is checked
// bit for bit against separate updates (tests/graph/optimizer_test.cc).
std::vector<Tensor> multi_tensor_inputs(int roles, const std::vector<Tensor>& shared, int tensors,
                                        DType copy, Rng& rng) {
  const int64_t sizes[] = {1, 7, 0, 4099, 3, 20001, 96};
  std::vector<Shape> shapes;
  for (int t = 0; t < tensors; ++t) shapes.push_back({sizes[t % 7] * 3});
  std::vector<Tensor> in;
  for (int role = 0; role < roles; ++role)
    for (const Shape& s : shapes)
      in.push_back(role == 2 && roles == 4 ? random_tensor_of(DType::f32, s, rng, 0.0f, 0.01f)
                                           : random_tensor_of(DType::f32, s, rng));
  in.insert(in.end(), shared.begin(), shared.end());
  for (const Shape& s : shapes) in.push_back(random_tensor_of(copy, s, rng));
  return in;
}

TEST(OptimizerCudaTest, MultiTensorMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(56);
  const int k = 70;
  MomentumAttrs momentum{0.9f, 1e-4f, true, true, {0.5f, 0.9f, 0.99f}, {}, k};
  AdamAttrs adam{0.9f, 0.999f, 1e-8f, 1e-2f, true, {}, k};
  const Tensor lr3 = Tensor::from_vector(std::vector<float>{1e-3f, 1e-2f, 3e-4f}, {3});
  for (DType copy : {DType::bf16, DType::f16})
    for (float flag : {1.0f, 0.0f}) {
      std::vector<size_t> updated;  // every var, state and copy
      for (size_t i = 0; i < size_t(3 * k); ++i) updated.push_back(i);
      for (size_t i = 0; i < size_t(k); ++i) updated.push_back(size_t(3 * k + 2) + i);
      EXPECT_TRUE(update_matches_cpu(*gpu, OpKind::ApplyMomentum, momentum,
                                     multi_tensor_inputs(3, {lr3, scalar(flag)}, k, copy, rng),
                                     updated))
          << dtype_name(copy) << " flag " << flag;
      updated.clear();
      for (size_t i = 0; i < size_t(3 * k); ++i) updated.push_back(i);
      for (size_t i = 0; i < size_t(k); ++i) updated.push_back(size_t(4 * k + 3) + i);
      EXPECT_TRUE(update_matches_cpu(
          *gpu, OpKind::ApplyAdam, adam,
          multi_tensor_inputs(4, {lr3, scalar(5.0f), scalar(flag)}, k, copy, rng), updated))
          << dtype_name(copy) << " flag " << flag;
    }
}

// step 0: the CPU throws at once; the GPU writes NaN into var, and the node's next run after
// the host has read var (so the report has landed) throws.
TEST(OptimizerCudaTest, AdamReportsStepBelowOne) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(55);
  const Shape s{5};
  ExecContext ctx(gpu);
  KernelSpec spec{OpKind::ApplyAdam, AdamAttrs{}, DType::f32, {}, {}, "adam"};
  std::vector<Tensor> in;
  for (int i = 0; i < 4; ++i)
    in.push_back(gpu->to_device(random_tensor_of(DType::f32, s, rng, 0.0f, 1.0f)));
  in.push_back(gpu->to_device(scalar(1e-3f)));
  in.push_back(gpu->to_device(scalar(0.0f)));
  for (const Tensor& t : in) spec.inputs.push_back({t.shape(), t.dtype()});
  auto kernel = create_kernel(spec, ctx);
  run_kernel(*kernel, ctx, in, {});
  for (float v : gpu->to_host(in[0]).to_float_vector()) EXPECT_TRUE(std::isnan(v));
  const std::string message = testing::error_message([&] { run_kernel(*kernel, ctx, in, {}); });
  EXPECT_TRUE(testing::contains(message, "step must be >= 1")) << message;
}

}  // namespace
}  // namespace campo
