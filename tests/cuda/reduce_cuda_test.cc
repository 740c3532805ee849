// CUDA Mean / Sum / MeanGrad / BroadcastTo against the CPU kernels (ops/cpu/reduce.cc), per
// dtype, over axis sets that take every path of ops/cuda/reduce.cu: inner reduced by warps
// and by blocks with one or several tasks per output, inner kept with and without row chunks,
// keep_dims, size-1 dims, a single element, empty inputs, and odd sizes that leave tails.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;

struct ReduceCase {
  Shape shape;
  std::vector<int> axes;
  bool keep_dims = false;
};

std::vector<ReduceCase> cases() {
  return {
      {{1}, {}},                // one element
      {{1000003}, {}},          // block tasks, several per output (partials)
      {{7, 13, 5}, {1}},        // inner kept, few rows
      {{7, 13, 5}, {0, 2}},     // inner reduced, warp tasks, strided runs
      {{7, 13, 5}, {2}, true},  // keep_dims
      {{7, 13, 5}, {-3, -2}},   // negative axes
      {{3, 1, 4}, {1}},         // a size-1 reduced dim only
      {{37, 4099}, {1}},        // block tasks, one per output
      {{3, 40001}, {1}},        // block tasks, several per output
      {{5003, 3}, {0}},         // inner kept, row chunks
      {{129, 7, 33}, {0, 2}},   // inner reduced with a kept middle dim
      {{2, 0, 3}, {1}},         // empty input
      {{2, 0, 3}, {0}},         // empty input and output
  };
}

Shape reduced_shape(const ReduceCase& c) {
  const int rank = int(c.shape.size());
  std::vector<bool> reduced(size_t(rank), c.axes.empty());
  for (int a : c.axes) reduced[size_t(a < 0 ? a + rank : a)] = true;
  Shape out;
  for (int i = 0; i < rank; ++i) {
    if (!reduced[size_t(i)])
      out.push_back(c.shape[size_t(i)]);
    else if (c.keep_dims)
      out.push_back(1);
  }
  return out;
}

std::string name_of(const ReduceCase& c) {
  std::string s = shape_str(c.shape) + " axes";
  for (int a : c.axes) s += " " + std::to_string(a);
  return s + (c.keep_dims ? " keep_dims" : "");
}

const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// Mean / Sum: both sides read the same (rounded) inputs, sum in double and round once to
// f32, so they differ only by the summation order: about one f32 ulp, for every input dtype.
const testing::Tolerance kSumTol = testing::tolerance_for(DType::f32);

void check_forward(Backend& gpu, OpKind kind) {
  Rng rng(7);
  for (const ReduceCase& c : cases())
    for (DType dtype : kDtypes) {
      ReduceAttrs a{c.axes, c.keep_dims, {}};
      EXPECT_TRUE(cuda_matches_cpu(gpu, kind, a, dtype, {random_tensor_of(dtype, c.shape, rng)},
                                   {{reduced_shape(c), DType::f32}}, kSumTol))
          << name_of(c);
    }
}

// MeanGrad / BroadcastTo: dX = dY * scale in f32 with the same f32 scale, one rounding: the
// same bits on both sides; the table's tolerance of the dtype is ample.
void check_backward(Backend& gpu, OpKind kind) {
  Rng rng(8);
  for (const ReduceCase& c : cases())
    for (DType dtype : kDtypes) {
      ReduceAttrs a{c.axes, c.keep_dims, c.shape};
      EXPECT_TRUE(cuda_matches_cpu(gpu, kind, a, dtype,
                                   {random_tensor_of(dtype, reduced_shape(c), rng)},
                                   {{c.shape, dtype}}, testing::tolerance_for(dtype)))
          << name_of(c);
    }
}

TEST(ReduceCudaTest, MeanMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  check_forward(*gpu, OpKind::Mean);
}

TEST(ReduceCudaTest, SumMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  check_forward(*gpu, OpKind::Sum);
}

TEST(ReduceCudaTest, MeanGradMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  check_backward(*gpu, OpKind::MeanGrad);
}

TEST(ReduceCudaTest, BroadcastToMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  check_backward(*gpu, OpKind::BroadcastTo);
}

// The same reduction twice gives the same bits (no atomics, a fixed summation order).
TEST(ReduceCudaTest, SumIsDeterministic) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(9);
  const Tensor x = gpu->to_device(random_tensor_of(DType::f32, {3, 400001}, rng));
  ExecContext ctx(gpu);
  const ReduceAttrs a{{1}, false, {}};
  const Tensor y1 =
      gpu->to_host(run_op_eager(OpKind::Sum, a, DType::f32, {x}, {{{3}, DType::f32}}, ctx)[0]);
  const Tensor y2 =
      gpu->to_host(run_op_eager(OpKind::Sum, a, DType::f32, {x}, {{{3}, DType::f32}}, ctx)[0]);
  EXPECT_EQ(y1.to_float_vector(), y2.to_float_vector());
}

}  // namespace
}  // namespace campo
