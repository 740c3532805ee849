// The compiled training step: buffers are reused, live values never alias, and the
// steady state allocates nothing.
#include "graph/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "graph/autodiff.h"
#include "graph/memory_report.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "tests/test_util.h"

// Counts C++ heap allocations of at least kTensorSized bytes while `g_counting` is set (for
// the whole test binary). oneDNN's primitive::execute() makes a few small bookkeeping
// allocations of its own on every call (tens of bytes, outside our control); what the
// memory plan guarantees is that no tensor-sized buffer is ever allocated in the steady
// state, and that is what this counts.
static constexpr size_t kTensorSized = 4096;
static std::atomic<bool> g_counting{false};
static std::atomic<int64_t> g_allocations{0};

//
// Every unaligned form is replaced, so that new and delete always pair malloc with free:
// a sanitizer runtime supplies its own versions of the forms left out (the nothrow new
// that std::stable_sort's buffer uses, the array forms), which freed here would be an
// alloc-dealloc mismatch (found by scripts/sanitize.sh).
static void* counted_malloc(size_t n) {
  if (n >= kTensorSized && g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  return std::malloc(n ? n : 1);
}
void* operator new(size_t n) {
  void* p = counted_malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted_malloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace campo {
namespace {

struct LenetStep {
  Graph g;
  VariableStore vars{1, default_cpu_backend()};
  ValueId loss = kNoValue;
  std::unique_ptr<Executable> exe;

  explicit LenetStep(int64_t batch, std::shared_ptr<SharedArena> arena = nullptr) {
    Builder b(g, vars);
    ValueId images = b.placeholder("images", {batch, 1, 28, 28});
    ValueId labels = b.placeholder("labels", {batch}, DType::i32);
    ValueId logits = build_model("lenet", b, images, ModelOptions{});
    loss = b.mean(b.sparse_softmax_cross_entropy(logits, labels));
    ValueId seed = b.placeholder("loss_scale", {});
    auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (auto& n : params) pv.push_back(g.node(g.find_node(n)).outputs[0]);
    append_optimizer(b, params, append_gradients(b, loss, seed, pv), OptimizerConfig{});
    CompileOptions co;
    co.fetches = {loss};
    co.arena = std::move(arena);
    exe = std::make_unique<Executable>(g, vars, co);
    testing::fill_classifier_step_inputs(*exe, 5, 10, 0.01f);
  }
};

TEST(ExecutorTest, ExecutablesSharingAnArenaComputeWhatTheyComputeAlone) {
  // Alone: each step with its own arena.
  std::vector<float> alone_small, alone_large;
  {
    LenetStep small(4), large(16);
    for (int i = 0; i < 3; ++i) {
      small.exe->run();
      alone_small.push_back(small.exe->fetch_scalar(small.loss));
      large.exe->run();
      alone_large.push_back(large.exe->fetch_scalar(large.loss));
    }
  }
  // Shared: the larger plan, compiled second, grows (moves) the arena the first was bound
  // to; the first rebinds at its next run. Each reads its loss before the other runs.
  auto arena = std::make_shared<SharedArena>(default_cpu_backend());
  LenetStep small(4, arena);
  const size_t small_plan = small.exe->memory_plan().arena_bytes;
  LenetStep large(16, arena);
  const size_t large_plan = large.exe->memory_plan().arena_bytes;
  ASSERT_LT(small_plan, large_plan);
  EXPECT_EQ(arena->bytes(), large_plan);
  for (int i = 0; i < 3; ++i) {
    small.exe->run();
    EXPECT_EQ(small.exe->fetch_scalar(small.loss), alone_small[size_t(i)]) << "step " << i;
    large.exe->run();
    EXPECT_EQ(large.exe->fetch_scalar(large.loss), alone_large[size_t(i)]) << "step " << i;
  }
  // Counted once in a memory report, with the larger of the two lower bounds.
  const MemoryReport m = memory_report(small.vars, {small.exe.get(), large.exe.get()});
  EXPECT_EQ(m.graphs.arena, large_plan);
  EXPECT_EQ(m.graphs.live_peak, std::max(small.exe->memory_plan().live_peak_bytes,
                                         large.exe->memory_plan().live_peak_bytes));
  EXPECT_GE(m.graphs.arena, m.graphs.live_peak);
}

TEST(ExecutorTest, MemoryPlanReusesBuffersWithoutAliasingLiveValues) {
  LenetStep s(8);
  const MemoryPlan& plan = s.exe->memory_plan();
  EXPECT_LT(plan.arena_bytes, plan.naive_bytes);
  // Rebuild the lifetimes from the schedule and check the plan against them.
  const auto& sched = s.exe->schedule();
  std::map<ValueId, BufferRequest> req;
  for (int pos = 0; pos < int(sched.size()); ++pos) {
    const Node& n = s.g.node(sched[size_t(pos)]);
    if (n.kind == OpKind::Variable || n.kind == OpKind::Placeholder) continue;
    for (ValueId v : n.outputs) req[v] = {0, pos, pos};
  }
  for (int pos = 0; pos < int(sched.size()); ++pos)
    for (ValueId v : s.g.node(sched[size_t(pos)]).inputs)
      if (req.count(v)) req[v].last = std::max(req[v].last, pos);
  req[s.loss].last = int(sched.size());
  // Two values alive at the same time never share bytes (checked on the real pointers).
  std::vector<std::pair<ValueId, BufferRequest>> items(req.begin(), req.end());
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t j = i + 1; j < items.size(); ++j) {
      auto& [va, a] = items[i];
      auto& [vb, b] = items[j];
      if (a.last < b.first || b.last < a.first) continue;
      const Tensor& ta = s.exe->buffer(va);
      const Tensor& tb = s.exe->buffer(vb);
      const char* pa = static_cast<const char*>(ta.data());
      const char* pb = static_cast<const char*>(tb.data());
      bool overlap = pa < pb + tb.nbytes() && pb < pa + ta.nbytes();
      EXPECT_FALSE(overlap && ta.nbytes() && tb.nbytes())
          << "values " << va << " and " << vb << " are alive together but share memory";
    }
}

TEST(ExecutorTest, SteadyStateAllocatesNoBuffers) {
  LenetStep s(8);
  s.exe->run();  // warm-up (lazy initialisation inside libraries)
  s.exe->run();
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < 3; ++i) s.exe->run();
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0) << "buffers of >= " << kTensorSized
                                     << " bytes allocated during 3 training steps";
}

TEST(ExecutorTest, TrainingStepLowersTheLoss) {
  LenetStep s(16);
  s.exe->input("lr").data_as<float>()[0] = 0.05f;
  s.exe->run();
  float first = s.exe->output(s.loss).data_as<float>()[0];
  for (int i = 0; i < 80; ++i) s.exe->run();
  float last = s.exe->output(s.loss).data_as<float>()[0];
  EXPECT_TRUE(std::isfinite(first));
  EXPECT_LT(last, first * 0.5f) << "overfitting one fixed batch must drive the loss down";
}

TEST(ExecutorTest, TimingHookSeesEveryKernelNode) {
  LenetStep s(4);
  int calls = 0;
  s.exe->set_timing(true);
  s.exe->set_node_hook([&](NodeId, double ms) {
    EXPECT_GE(ms, 0.0);
    ++calls;
  });
  s.exe->run();
  int kernels = 0;
  for (NodeId id : s.exe->schedule())
    kernels += s.g.node(id).kind != OpKind::Variable && s.g.node(id).kind != OpKind::Placeholder;
  EXPECT_EQ(calls, kernels);
}

}  // namespace
}  // namespace campo
