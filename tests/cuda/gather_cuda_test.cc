// GatherV2 and UnsortedSegmentSum on CUDA (ops/cuda/gather.cu) against the CPU kernels, per
// dtype, and the CUDA kernels' handling of out-of-range ids (reported by a later run, not
// thrown at once as on the CPU: see ops/cuda/gather.cu).
// Tolerances: GatherV2 copies rows, so equal (0). UnsortedSegmentSum sums each segment's rows
// in ascending row order in f32 and rounds once, exactly as the CPU kernel (and as the CPU's
// f16 emulation, whose f32 kernel sums in the same order), so equal as well (0): any
// difference is a bug, not rounding.
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

Tensor random_ids(const Shape& shape, int64_t limit, Rng& rng) {
  Tensor t = Tensor::empty(shape, DType::i32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(limit)));
  return t;
}

Shape concat(Shape a, const Shape& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

struct GatherCase {
  Shape params, indices;
};

TEST(GatherCudaTest, MatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  const std::vector<GatherCase> cases = {
      {{50, 7}, {3, 11}},        // odd rows: 2- or 4-byte words
      {{1000, 1}, {1000003}},    // one element per row, many indices
      {{30522, 8}, {2, 128}},    // BERT-like vocabulary, 16-byte rows in f16
      {{5, 3, 4}, {7}},          // params of rank 3
      {{1}, {4}},                // scalar rows
      {{9, 5}, {0}},             // no indices
  };
  for (DType dtype : kDtypes)
    for (const GatherCase& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " params " + shape_str(c.params) + " indices " +
                   shape_str(c.indices));
      Tensor params = random_tensor_of(dtype, c.params, rng);
      Tensor indices = random_ids(c.indices, c.params[0], rng);
      const Shape out = concat(c.indices, Shape(c.params.begin() + 1, c.params.end()));
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::GatherV2, GatherAttrs{0}, dtype, {params, indices},
                                   {{out, dtype}}, {0.0, 0.0}));
    }
}

struct SegmentCase {
  Shape data;
  size_t id_rank;  // segment ids: data's first id_rank dims
  int64_t segments;
  int64_t id_limit;  // ids drawn from [0, id_limit): below `segments` leaves segments empty
};

TEST(UnsortedSegmentSumCudaTest, MatchesCpuExactly) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  const std::vector<SegmentCase> cases = {
      {{1000, 13}, 1, 37, 30},        // empty segments 30..36
      {{10, 100, 3}, 2, 7, 7},        // 2-D ids, many rows per segment
      {{1000003}, 1, 5, 5},           // long sums of scalars
      {{256, 64}, 1, 30522, 30522},   // BERT's embedding gradient: most segments empty
      {{3, 4}, 1, 1, 1},              // one segment
      {{0, 4}, 1, 6, 6},              // no rows: all zeros
  };
  for (DType dtype : kDtypes)
    for (const SegmentCase& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " data " + shape_str(c.data) + " segments " +
                   std::to_string(c.segments));
      Tensor data = random_tensor_of(dtype, c.data, rng);
      const Shape ids_shape(c.data.begin(), c.data.begin() + long(c.id_rank));
      Tensor ids = random_ids(ids_shape, c.id_limit, rng);
      const Shape out = concat({c.segments}, Shape(c.data.begin() + long(c.id_rank), c.data.end()));
      EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::UnsortedSegmentSum, UnsortedSegmentSumAttrs{c.segments},
                                   dtype, {data, ids}, {{out, dtype}}, {0.0, 0.0}));
    }
}

// Runs a CUDA kernel of `kind` twice on the same inputs, synchronizing in between: the first
// run must not throw (the bad id is on the device), the second must report it.
void expect_reported_by_next_run(Backend& gpu, OpKind kind, const Attrs& attrs, const Tensor& a,
                                 const Tensor& ids, const TensorDesc& out_desc, const std::string& what) {
  auto gpu_ptr = std::shared_ptr<Backend>(&gpu, [](Backend*) {});
  ExecContext ctx(gpu_ptr);
  KernelSpec spec{kind, attrs, a.dtype(), {{a.shape(), a.dtype()}, {ids.shape(), DType::i32}},
                  {out_desc}, "bad_ids"};
  auto kernel = create_kernel(spec, ctx);
  const std::vector<Tensor> in = {gpu.to_device(a), gpu.to_device(ids)};
  const std::vector<Tensor> out = {gpu.zeros(out_desc.shape, out_desc.dtype)};
  run_kernel(*kernel, ctx, in, out);
  gpu.synchronize();
  try {
    run_kernel(*kernel, ctx, in, out);
    ADD_FAILURE() << "the out-of-range id was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
  gpu.synchronize();
}

TEST(GatherCudaTest, OutOfRangeIndexIsReportedByTheNextRun) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(3);
  Tensor params = random_tensor_of(DType::f32, {5, 3}, rng);
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{0, 4, 5, 1}, {4});
  expect_reported_by_next_run(*gpu, OpKind::GatherV2, GatherAttrs{0}, params, ids,
                              {{4, 3}, DType::f32}, "index 5 at position [2] is outside [0, 5)");
}

TEST(UnsortedSegmentSumCudaTest, OutOfRangeIdIsReportedByTheNextRun) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(4);
  Tensor data = random_tensor_of(DType::f32, {4, 3}, rng);
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{0, -1, 2, 1}, {4});
  expect_reported_by_next_run(*gpu, OpKind::UnsortedSegmentSum, UnsortedSegmentSumAttrs{3}, data,
                              ids, {{3, 3}, DType::f32}, "segment id -1 at position [1] is outside [0, 3)");
}

}  // namespace
}  // namespace campo
