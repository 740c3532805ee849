// CUPTI's range profiler (runtime/cuda/cupti_counters.h) on device 0: two memset ranges
// replayed over the passes the default metrics need, and the DRAM traffic of the large one;
// then the profiling step's read of every node of a small graph through the backend
// (train/profiling.h's read_node_counters).
// Skips with the reason without a GPU, without CUPTI, or where counters cannot be read
// (a container without the profiling capability, a MIG instance).
#include <gtest/gtest.h>

#include <string>

#include "graph/builder.h"
#include "tests/cuda/cuda_test_util.h"
#include "train/profiling.h"

#if CAMPO_HAVE_CUDA
#include <cuda_runtime.h>

#include <memory>

#include "runtime/cuda/cupti_counters.h"
#endif

namespace campo {
namespace {

TEST(CuptiCountersCudaTest, MemsetRangesCountTheirDramBytes) {
#if !CAMPO_HAVE_CUDA
  GTEST_SKIP() << "this build has no CUDA backend (configured without nvcc, or CAMPO_CUDA=OFF)";
#else
  auto gpu = CAMPO_CUDA_OR_SKIP();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::string why;
  auto profiler = cuda::CuptiCounterProfiler::open(0, cuda::CuptiCounterProfiler::default_metrics(),
                                                   /*max_ranges=*/2, why);
  if (!profiler) GTEST_SKIP() << "no CUPTI counters: " << why;

  // 256 MiB outgrows every L2 (50 MB on H100, 60 MB on H200) several times over, so most
  // of it is written back to DRAM.
  const size_t large = size_t(256) << 20, small = 4096;
  void* raw = nullptr;
  ASSERT_EQ(cudaMalloc(&raw, large), cudaSuccess);
  std::unique_ptr<void, cudaError_t (*)(void*)> buffer(raw, cudaFree);
  // A bound on the passes: a profiler that never says it is done fails instead of hanging.
  bool done = false;
  while (!done && profiler->passes() < 64) {
    profiler->begin_pass();
    profiler->push_range("memset_256MiB");
    ASSERT_EQ(cudaMemsetAsync(buffer.get(), 1, large), cudaSuccess);
    profiler->pop_range();
    profiler->push_range("memset_4KiB");
    ASSERT_EQ(cudaMemsetAsync(buffer.get(), 2, small), cudaSuccess);
    profiler->pop_range();
    done = profiler->end_pass();
  }
  ASSERT_TRUE(done) << "CUPTI still wanted passes after " << profiler->passes();

  const auto values = profiler->decode();
  ASSERT_EQ(values.size(), 2u);
  for (const auto& [range, metrics] : values)
    EXPECT_EQ(metrics.size(), cuda::CuptiCounterProfiler::default_metrics().size()) << range;
  EXPECT_GT(values.at("memset_256MiB")[0], 1e6) << "dram__bytes.sum of a 256 MiB memset";
#endif
}

// Each node moves more than L2 holds (x, y and z are 64 MiB each: the MatMul reads 64 MiB
// and writes 64, the Relu reads 64 and writes 64, against H200's 60 MB of L2), so each one's
// DRAM traffic is above zero whatever stays cached between passes; on tensors that fit in L2
// a replayed pass can find everything there and read 0 DRAM bytes.
TEST(CuptiCountersCudaTest, TheProfilingStepReadsEveryNodeOnTheGpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Graph g;
  VariableStore vars(3, gpu);
  Builder b(g, vars);
  const ValueId x = b.placeholder("x", {16384, 1024});
  const ValueId w = b.variable("w", {1024, 1024}, Init::normal(0.0f, 0.1f));
  const ValueId y = b.matmul(x, w);
  const ValueId z = b.relu(y);
  const NodeCounterRead r = read_node_counters(g, vars, {z}, TimingInputs{});
  if (r.by_node.empty()) GTEST_SKIP() << "no counters: " << r.unavailable;
  EXPECT_EQ(r.source, "CUPTI range profiler");
  EXPECT_GE(r.passes, 1);
  for (const ValueId v : {y, z}) {
    const CounterValues& c = r.by_node[size_t(g.value(v).producer)];
    ASSERT_TRUE(all_read(c)) << g.node(g.value(v).producer).name;
    EXPECT_GT(c[size_t(Counter::instructions)], 0);
    EXPECT_GT(c[size_t(Counter::dram_bytes)], 0);
  }
}

}  // namespace
}  // namespace campo
