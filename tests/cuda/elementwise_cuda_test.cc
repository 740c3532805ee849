// CUDA element-wise kernels (ops/cuda/elementwise.cu) against the CPU kernels on the same
// inputs, per dtype (f32, f16, bf16), on sizes that exercise the 16-byte packs' tails (1, 7,
// 1000003 elements) and on misaligned views (the one-element path).
//
// Tolerances:
//  - Relu, LeakyRelu, ReluGrad, LeakyReluGrad, TanhGrad, SigmoidGrad, Add, AddN, Mul,
//    BroadcastTo: exact. Both sides load to f32, do the same f32 operations in the same
//    order without FMA contraction (CPU: -ffp-contract=off; CUDA: __fmul_rn / __fadd_rn),
//    and round once to the same dtype.
//  - Tanh, Sigmoid, Gelu, GeluGrad: CUDA's tanhf / expf / normcdff (<= 2 ulp, CUDA
//    Programming Guide) against oneDNN's JIT'd eltwise approximations on the CPU (a few
//    ulp): f32 rtol 4e-6 (~32 f32 ulp, far below what a wrong formula gives, >= 1e-3), atol
//    1e-6 for the cancellations near zero (1 + tanh(u) for negative x, GeluGrad's zero near
//    x = -0.75); f16 / bf16 one ulp of the output dtype (see output_ulp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/kernel.h"
#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/elementwise_cuda_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::cuda_matches_cpu_misaligned;
using testing::exact_tolerance;
using testing::output_ulp;
using testing::random_tensor_of;
using testing::Tolerance;

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};
const std::vector<int64_t> kSizes = {1, 7, 1000003};

Tolerance transcendental(DType dtype) { return output_ulp(dtype, 4e-6, 1e-6); }

struct UnaryCase {
  OpKind kind;
  Attrs attrs;
  bool transcendental;
};

// Ops of one input x, drawn from [-3, 3] (Gelu's and Tanh's curved range).
std::vector<UnaryCase> unary_cases() {
  return {{OpKind::Relu, NoAttrs{}, false},       {OpKind::LeakyRelu, LeakyReluAttrs{0.2f}, false},
          {OpKind::Tanh, NoAttrs{}, true},        {OpKind::Sigmoid, NoAttrs{}, true},
          {OpKind::Gelu, GeluAttrs{false}, true}, {OpKind::Gelu, GeluAttrs{true}, true}};
}

struct GradCase {
  OpKind kind;
  Attrs attrs;
  float lo, hi;  // range of the second input (Y or X)
  bool transcendental;
};

// Ops of {dY, Y or X}: dY from [-1, 1], the second input from the forward op's range.
std::vector<GradCase> grad_cases() {
  return {{OpKind::ReluGrad, NoAttrs{}, -1.0f, 1.0f, false},
          {OpKind::LeakyReluGrad, LeakyReluAttrs{0.2f}, -1.0f, 1.0f, false},
          {OpKind::TanhGrad, NoAttrs{}, -1.0f, 1.0f, false},
          {OpKind::SigmoidGrad, NoAttrs{}, 0.0f, 1.0f, false},
          {OpKind::GeluGrad, GeluAttrs{false}, -3.0f, 3.0f, true},
          {OpKind::GeluGrad, GeluAttrs{true}, -3.0f, 3.0f, true}};
}

std::string label(OpKind kind, DType dtype, int64_t n) {
  return std::string(op_name(kind)) + " " + dtype_name(dtype) + " n=" + std::to_string(n);
}

TEST(ElementwiseCudaTest, ActivationsMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  for (const UnaryCase& c : unary_cases())
    for (DType dtype : kDtypes)
      for (int64_t n : kSizes) {
        SCOPED_TRACE(label(c.kind, dtype, n));
        const Tensor x = random_tensor_of(dtype, {n}, rng, -3.0f, 3.0f);
        EXPECT_TRUE(cuda_matches_cpu(*gpu, c.kind, c.attrs, dtype, {x}, {{{n}, dtype}},
                                     c.transcendental ? transcendental(dtype) : exact_tolerance()));
      }
}

TEST(ElementwiseCudaTest, ActivationGradientsMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  for (const GradCase& c : grad_cases())
    for (DType dtype : kDtypes)
      for (int64_t n : kSizes) {
        SCOPED_TRACE(label(c.kind, dtype, n));
        const Tensor dy = random_tensor_of(dtype, {n}, rng);
        const Tensor y = random_tensor_of(dtype, {n}, rng, c.lo, c.hi);
        EXPECT_TRUE(cuda_matches_cpu(*gpu, c.kind, c.attrs, dtype, {dy, y}, {{{n}, dtype}},
                                     c.transcendental ? transcendental(dtype) : exact_tolerance()));
      }
}

TEST(ElementwiseCudaTest, AddAndMulMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(3);
  for (DType dtype : kDtypes)
    for (int64_t n : kSizes) {
      const Tensor a = random_tensor_of(dtype, {n}, rng), b = random_tensor_of(dtype, {n}, rng);
      SCOPED_TRACE(label(OpKind::Add, dtype, n));
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Add, NoAttrs{}, dtype, {a, b}, {{{n}, dtype}},
                                   exact_tolerance()));
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Mul, NoAttrs{}, dtype, {a, b}, {{{n}, dtype}},
                                   exact_tolerance()));
    }
}

// Mul's b broadcast along a's trailing dims: a scalar, a's first dim, a's first two dims.
TEST(ElementwiseCudaTest, MulBroadcastMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(4);
  struct Case {
    Shape a, b;
  };
  // Runs of one b value longer than a 16-byte pack, and shorter (3: several per pack).
  const std::vector<Case> cases = {{{3, 5, 1001}, {}},     {{3, 5, 1001}, {3}},
                                   {{3, 5, 1001}, {3, 5}}, {{3, 5, 1001}, {3, 5, 1001}},
                                   {{1001, 3}, {1001}},    {{7, 1}, {7}}};
  for (DType dtype : kDtypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " a " + shape_str(c.a) + " b " +
                   shape_str(c.b));
      const Tensor a = random_tensor_of(dtype, c.a, rng), b = random_tensor_of(dtype, c.b, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Mul, NoAttrs{}, dtype, {a, b}, {{c.a, dtype}},
                                   exact_tolerance()));
    }
}

// 1, 3 and 40 inputs: 40 takes two passes through the f32 accumulator (32 per pass) and must
// still round once, as the CPU.
TEST(ElementwiseCudaTest, AddNMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(5);
  for (DType dtype : kDtypes)
    for (int64_t n : kSizes)
      for (int k : {1, 3, 40}) {
        SCOPED_TRACE(label(OpKind::AddN, dtype, n) + " k=" + std::to_string(k));
        std::vector<Tensor> xs;
        for (int j = 0; j < k; ++j) xs.push_back(random_tensor_of(dtype, {n}, rng));
        EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::AddN, NoAttrs{}, dtype, xs, {{{n}, dtype}},
                                     exact_tolerance()));
      }
}

TEST(ElementwiseCudaTest, BroadcastToMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(6);
  struct Case {
    ReduceAttrs attrs;
    Shape dy_shape;
  };
  const std::vector<Case> cases = {
      {{{0, 2}, true, {4, 6, 3}}, {1, 6, 1}},      // outer and inner reduced, keep_dims
      {{{1}, false, {5, 7, 9}}, {5, 9}},           // middle reduced
      {{{}, false, {7, 1, 11}}, {}},               // everything reduced
      {{{0, 3}, false, {3, 4, 1, 1001}}, {4, 1}},  // a size-1 dim kept
      {{{2}, false, {2, 3, 4, 5}}, {2, 3, 5}}};
  for (DType dtype : kDtypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " to " + shape_str(c.attrs.input_shape));
      const Tensor dy = random_tensor_of(dtype, c.dy_shape, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::BroadcastTo, c.attrs, dtype, {dy},
                                   {{c.attrs.input_shape, dtype}}, exact_tolerance()));
    }
}

// Views one element past an aligned allocation: the kernels' scalar path.
TEST(ElementwiseCudaTest, MisalignedViewsMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(7);
  const int64_t n = 1000003;
  for (DType dtype : kDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor x = random_tensor_of(dtype, {n}, rng, -3.0f, 3.0f),
                 dy = random_tensor_of(dtype, {n}, rng);
    const std::vector<TensorDesc> out = {{{n}, dtype}};
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::Relu, NoAttrs{}, dtype, {x}, out,
                                            exact_tolerance()));
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::Add, NoAttrs{}, dtype, {x, dy}, out,
                                            exact_tolerance()));
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::GeluGrad, GeluAttrs{false}, dtype,
                                            {dy, x}, out, transcendental(dtype)));
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::AddN, NoAttrs{}, dtype, {x, dy, x}, out,
                                            exact_tolerance()));
    const Tensor a = random_tensor_of(dtype, {7, 1001}, rng), b = random_tensor_of(dtype, {7}, rng);
    EXPECT_TRUE(cuda_matches_cpu_misaligned(*gpu, OpKind::Mul, NoAttrs{}, dtype, {a, b},
                                            {{{7, 1001}, dtype}}, exact_tolerance()));
  }
}

}  // namespace
}  // namespace campo
