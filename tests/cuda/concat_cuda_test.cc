// ConcatV2 and SplitV on CUDA (ops/cuda/concat.cu) against the CPU kernels, per dtype: every
// axis (negative too), parts of odd byte widths (so the copies run in 2-byte and 4-byte
// words as well as 16-byte ones), an empty part, and more parts than one launch takes (8).
// SplitV is ConcatV2's gradient. Byte copies: the results must be equal, tolerance 0.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

struct Case {
  Shape shape;                // of the whole, with the axis dim filled from `sizes`
  int axis;                   // as given to the op (may be negative)
  std::vector<int64_t> sizes; // each part's size along the axis
};

Shape with_axis(Shape s, int axis, int64_t size) {
  s[size_t(axis < 0 ? axis + int(s.size()) : axis)] = size;
  return s;
}

std::vector<Case> cases() {
  std::vector<int64_t> many;
  for (int i = 0; i < 19; ++i) many.push_back(1 + i % 4);
  return {
      {{0, 7}, 0, {3, 1, 5}},               // axis 0: each part one block
      {{6, 0, 5}, 1, {3, 0, 8}},            // an empty part
      {{4, 3, 0}, -1, {1, 2, 7}},           // last axis, odd widths
      {{2, 0, 3, 3}, 1, {64, 16, 32, 8}},   // Inception-like channel concat
      {{5, 0}, -1, many},                   // 19 parts: three launches
      {{1000003, 0}, 1, {1, 1}},            // long, one element per part per row
  };
}

TEST(ConcatCudaTest, MatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  for (DType dtype : kDtypes)
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(c.shape) + " axis " +
                   std::to_string(c.axis) + " parts " + std::to_string(c.sizes.size()));
      std::vector<Tensor> parts;
      int64_t total = 0;
      for (int64_t size : c.sizes) {
        parts.push_back(random_tensor_of(dtype, with_axis(c.shape, c.axis, size), rng));
        total += size;
      }
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::ConcatV2, ConcatAttrs{c.axis}, dtype, parts,
                                   {{with_axis(c.shape, c.axis, total), dtype}}, {0.0, 0.0}));
    }
}

TEST(SplitCudaTest, MatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  for (DType dtype : kDtypes)
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(c.shape) + " axis " +
                   std::to_string(c.axis) + " parts " + std::to_string(c.sizes.size()));
      std::vector<TensorDesc> outputs;
      int64_t total = 0;
      for (int64_t size : c.sizes) {
        outputs.push_back({with_axis(c.shape, c.axis, size), dtype});
        total += size;
      }
      Tensor x = random_tensor_of(dtype, with_axis(c.shape, c.axis, total), rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::SplitV, SplitAttrs{c.axis, c.sizes}, dtype, {x},
                                   outputs, {0.0, 0.0}));
    }
}

}  // namespace
}  // namespace campo
