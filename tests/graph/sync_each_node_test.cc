// CAMPO_CUDA_SYNC=1: the executor synchronizes the backend after every node, so that a
// fault a device reports asynchronously (at its next synchronization) names the node that
// caused it. Checked on the CPU with a backend whose synchronize() reports a fault once.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "graph/builder.h"
#include "graph/executor.h"
#include "runtime/cpu_backend.h"
#include "tests/test_util.h"

namespace campo {
namespace {

// The CPU backend whose n-th synchronize() throws, as a GPU backend does for a kernel that
// faulted since the last one.
class FaultOnSyncBackend final : public CpuBackend {
 public:
  explicit FaultOnSyncBackend(int fault_at) : fault_at_(fault_at) {}
  void synchronize() override {
    if (++calls_ == fault_at_) CAMPO_FAIL("an illegal memory access was encountered");
  }
  int calls() const { return calls_; }

 private:
  int fault_at_, calls_ = 0;
};

class SyncEnv {
 public:
  explicit SyncEnv(const char* value) { ::setenv("CAMPO_CUDA_SYNC", value, 1); }
  ~SyncEnv() { ::unsetenv("CAMPO_CUDA_SYNC"); }
};

// x -> relu ("first") -> tanh ("second"): two nodes with kernels.
struct TwoNodes {
  explicit TwoNodes(std::shared_ptr<Backend> backend) : vars(0, std::move(backend)) {
    Builder b(g, vars);
    const ValueId x = b.placeholder("x", {4, 8});
    const ValueId y = g.node(g.add_node(OpKind::Relu, {x}, {}, "first")).outputs[0];
    out = g.node(g.add_node(OpKind::Tanh, {y}, {}, "second")).outputs[0];
  }
  Graph g;
  VariableStore vars;
  ValueId out = kNoValue;
};

TEST(SyncEachNodeTest, AFaultNamesTheNodeThatRanBeforeTheSynchronize) {
  const SyncEnv on("1");
  auto backend = std::make_shared<FaultOnSyncBackend>(2);  // faults after the second node
  TwoNodes t(backend);
  Executable exe(t.g, t.vars, {.fetches = {t.out}});
  exe.feed("x", Tensor::zeros({4, 8}, DType::f32));
  const std::string msg = testing::error_message([&] { exe.run(); });
  EXPECT_TRUE(testing::contains(msg, "node second (Tanh, f32, step 0): "));
  EXPECT_TRUE(testing::contains(msg, "an illegal memory access was encountered"));
}

TEST(SyncEachNodeTest, OffByDefaultAndTheResultsAreTheSameWhenOn) {
  std::vector<float> results[2];
  for (const bool on : {false, true}) {
    const SyncEnv env(on ? "1" : "0");
    auto backend = std::make_shared<FaultOnSyncBackend>(-1);  // never faults
    TwoNodes t(backend);
    Executable exe(t.g, t.vars, {.fetches = {t.out}});
    Rng rng(3);
    exe.feed("x", testing::random_tensor({4, 8}, rng));
    exe.run();
    EXPECT_EQ(backend->calls(), on ? 2 : 0);
    results[on] = exe.fetch(t.out).to_float_vector();
  }
  EXPECT_EQ(results[0], results[1]);
}

TEST(SyncEachNodeTest, AnyOtherValueIsOneLine) {
  const SyncEnv bad("yes");
  TwoNodes t(default_cpu_backend());
  EXPECT_EQ(testing::error_message([&] { Executable exe(t.g, t.vars, {.fetches = {t.out}}); }),
            "CAMPO_CUDA_SYNC must be 0 or 1, got 'yes'");
}

}  // namespace
}  // namespace campo
