// Transpose on CUDA (ops/cuda/transpose.cu) against the CPU kernel, per dtype, through each of
// its paths: the identity on memory (after dropping size-1 dims), rows contiguous in x
// (BERT's {0, 2, 1, 3}), the tiled batched matrix transpose ({1, 0}, {0, 1, 3, 2}, tails of
// the 32 x 32 tiles), and the strided gather (reversals, rank 5). A transpose moves bytes and
// computes nothing, so the results must be equal: tolerance 0.
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
  Shape in;
  std::vector<int> perm;
};

Shape permuted(const Shape& in, const std::vector<int>& perm) {
  Shape out;
  for (int p : perm) out.push_back(in[size_t(p)]);
  return out;
}

TEST(TransposeCudaTest, MatchesCpuOnEveryPath) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  const std::vector<Case> cases = {
      {{1000003}, {0}},                        // identity, odd length
      {{5, 1, 6}, {1, 0, 2}},                  // identity once the size-1 dim is dropped
      {{1}, {0}},                              //
      {{7, 13}, {1, 0}},                       // 2-D: tiled, one partial tile each way
      {{33, 65}, {1, 0}},                      // tile tails of 1
      {{1000, 37}, {1, 0}},                    //
      {{2, 3, 33, 65}, {0, 1, 3, 2}},          // batched matrix transpose (attention's K^T)
      {{2, 5, 3, 7}, {0, 2, 1, 3}},            // BERT's head split: rows contiguous
      {{3, 4, 5, 6}, {3, 2, 1, 0}},            // reversal: gather
      {{2, 3, 1, 5, 7}, {4, 0, 3, 2, 1}},      // rank 5 with a size-1 dim
      {{3, 5, 7, 2, 3}, {1, 3, 0, 4, 2}},      // rank 5
      {{4, 1, 9}, {2, 1, 0}},                  // 2-D after dropping
  };
  for (DType dtype : kDtypes)
    for (const Case& c : cases) {
      std::string perm;
      for (int p : c.perm) perm += std::to_string(p) + " ";
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_str(c.in) + " perm " + perm);
      Tensor x = random_tensor_of(dtype, c.in, rng);
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Transpose, TransposeAttrs{c.perm}, dtype, {x},
                                   {{permuted(c.in, c.perm), dtype}}, {0.0, 0.0}));
    }
}

TEST(TransposeCudaTest, EmptyTensor) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  Tensor x = random_tensor_of(DType::f32, {3, 0, 5}, rng);
  EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::Transpose, TransposeAttrs{{2, 0, 1}}, DType::f32, {x},
                               {{{5, 3, 0}, DType::f32}}, {0.0, 0.0}));
}

}  // namespace
}  // namespace campo
