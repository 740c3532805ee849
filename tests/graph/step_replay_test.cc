// CUDA graphs without a GPU: the executor's capture-and-replay logic (Executable::run) on a
// backend whose queue holds closures, so work is issued, recorded and replayed as on a GPU
// stream, and test kernels whose host code, host hooks (before_run / after_run) and queued
// work are counted apart. Checked: a warm launched step, then one capture and replays with
// the same results as launching every step; host values drawn per step (Dropout's seed) and
// deferred errors (found on the "device", reported by a later step) keep working in
// replays; timed steps launch; a moved arena is captured again; the refusals of
// --cuda-graph on. The CUDA backend's own capture is checked on a GPU
// (CudaBackendCudaTest.GraphReplayEqualsLaunchedSteps).
#include <gtest/gtest.h>

#include <functional>

#include "graph/builder.h"
#include "graph/executor.h"
#include "runtime/cpu_backend.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

// Host memory like the CPU's, but kernels (those registered for Device::cpu_strict below)
// issue their work as closures on a queue that synchronize() (and every copy) drains, and
// that a capture records instead.
class QueueBackend final : public CpuBackend {
 public:
  Device kernel_device() const override { return Device::cpu_strict; }
  bool emulates_low_precision() const override { return false; }
  std::string capture_unsupported() const override { return {}; }

  void issue(std::function<void()> work) {
    (capturing_ ? recorded_ : pending_).push_back(std::move(work));
  }
  void synchronize() override {
    CAMPO_CHECK(!capturing_, "synchronize while capturing");
    for (auto& w : pending_) w();
    pending_.clear();
  }
  void copy_from_host(const Tensor& dst, const void* src) override {
    synchronize();
    CpuBackend::copy_from_host(dst, src);
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    synchronize();
    CpuBackend::copy_to_host(dst, src);
  }

  class Recorded final : public CapturedWork {
   public:
    Recorded(QueueBackend& q, std::vector<std::function<void()>> work)
        : q_(q), work_(std::move(work)) {}
    void replay() override {
      for (auto& w : work_) q_.pending_.push_back(w);
    }

   private:
    QueueBackend& q_;
    std::vector<std::function<void()>> work_;
  };
  void begin_capture() override {
    CAMPO_CHECK(!capturing_, "nested capture");
    capturing_ = true;
    recorded_.clear();
  }
  std::unique_ptr<CapturedWork> end_capture() override {
    capturing_ = false;
    return std::make_unique<Recorded>(*this, std::move(recorded_));
  }
  void abort_capture() noexcept override {
    capturing_ = false;
    recorded_.clear();
    ++aborts;
  }
  bool capturing() const { return capturing_; }
  int aborts = 0;

 private:
  bool capturing_ = false;
  std::vector<std::function<void()>> pending_, recorded_;
};

QueueBackend& queue_of(ExecContext& ctx) { return dynamic_cast<QueueBackend&>(ctx.backend()); }

// What the test kernels count, and how they misbehave when asked.
struct Counts {
  int host_runs = 0, before = 0, after = 0;
};
Counts relu_counts, dropout_counts;
std::string relu_blocker;           // Relu's capture_blocker()
bool relu_fails_capturing = false;  // Relu's run() throws while the backend captures

// y = max(x, 0); an x above 1000 is an "error found on the device", reported by the next
// step's before_run (as a CUDA kernel's DeferredError).
class QueuedRelu final : public Kernel {
 public:
  void before_run(ExecContext&) override {
    ++relu_counts.before;
    CAMPO_CHECK(!*found_, "Relu: an x above 1000 in an earlier step");
  }
  void after_run(ExecContext&) override { ++relu_counts.after; }
  std::string capture_blocker() const override { return relu_blocker; }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    ++relu_counts.host_runs;
    CAMPO_CHECK(!relu_fails_capturing || !queue_of(ctx).capturing(), "Relu cannot be captured");
    const float* x = in[0].data_as<float>();
    float* y = out[0].data_as<float>();
    const int64_t n = in[0].numel();
    bool* found = found_.get();
    queue_of(ctx).issue([=] {
      for (int64_t i = 0; i < n; ++i) {
        y[i] = x[i] > 0 ? x[i] : 0;
        if (x[i] > 1000) *found = true;
      }
    });
  }

 private:
  std::shared_ptr<bool> found_ = std::make_shared<bool>(false);
};

// {y, mask}: mask from a seed drawn on the host every step and stored on the "device" by
// queued work, as the CUDA kernel does.
class QueuedDropout final : public Kernel {
 public:
  void before_run(ExecContext& ctx) override {
    ++dropout_counts.before;
    const uint64_t seed = ctx.rng.next_u64();
    uint64_t* word = seed_.get();
    queue_of(ctx).issue([=] { *word = seed; });
  }
  void after_run(ExecContext&) override { ++dropout_counts.after; }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    ++dropout_counts.host_runs;
    const float* x = in[0].data_as<float>();
    float* y = out[0].data_as<float>();
    float* mask = out[1].data_as<float>();
    const int64_t n = in[0].numel();
    const uint64_t* word = seed_.get();
    queue_of(ctx).issue([=] {
      Rng rng(*word);
      for (int64_t i = 0; i < n; ++i) {
        mask[i] = rng.uniform() >= 0.5f ? 2.0f : 0.0f;
        y[i] = x[i] * mask[i];
      }
    });
  }

 private:
  std::shared_ptr<uint64_t> seed_ = std::make_shared<uint64_t>(0);
};

KernelRegistrar relu(OpKind::Relu, Device::cpu_strict, DType::f32,
                     [](const KernelSpec&, ExecContext&) -> std::unique_ptr<Kernel> {
                       return std::make_unique<QueuedRelu>();
                     });
KernelRegistrar dropout(OpKind::Dropout, Device::cpu_strict, DType::f32,
                        [](const KernelSpec&, ExecContext&) -> std::unique_ptr<Kernel> {
                          return std::make_unique<QueuedDropout>();
                        });

// x [rows, 8] -> Relu -> Dropout: y.
struct Step {
  Step(std::shared_ptr<QueueBackend> b, CudaGraphMode mode, int64_t rows = 4,
       std::shared_ptr<SharedArena> arena = nullptr)
      : backend(std::move(b)), vars(0, backend) {
    backend->set_cuda_graph(mode);
    Builder builder(g, vars);
    const ValueId x = builder.placeholder("x", {rows, 8});
    const ValueId r = g.node(g.add_node(OpKind::Relu, {x}, {}, "relu")).outputs[0];
    y = g.node(g.add_node(OpKind::Dropout, {r}, DropoutAttrs{0.5f, {}}, "drop")).outputs[0];
    exe = std::make_unique<Executable>(
        g, vars, CompileOptions{.fetches = {y}, .seed = 7, .arena = std::move(arena)});
  }
  std::vector<float> run(const Tensor& x) {
    exe->feed("x", x);
    exe->run();
    return exe->fetch(y).to_float_vector();
  }
  std::shared_ptr<QueueBackend> backend;
  Graph g;
  VariableStore vars;
  ValueId y = kNoValue;
  std::unique_ptr<Executable> exe;
};

class StepReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    relu_counts = dropout_counts = {};
    relu_blocker.clear();
    relu_fails_capturing = false;
  }
};

Tensor input(int step, int64_t rows = 4) {
  Rng rng(uint64_t(100 + step));
  return testing::random_tensor({rows, 8}, rng);
}

TEST_F(StepReplayTest, ReplayedStepsEqualLaunchedOnesAndTheHostHooksRunEveryStep) {
  constexpr int kSteps = 5;
  std::vector<std::vector<float>> launched, replayed;
  {
    Step s(std::make_shared<QueueBackend>(), CudaGraphMode::off);
    for (int i = 0; i < kSteps; ++i) launched.push_back(s.run(input(i)));
    EXPECT_EQ(s.exe->replay_blocker(), "--cuda-graph off");
    EXPECT_EQ(s.exe->captures(), 0);
    EXPECT_EQ(relu_counts.host_runs, kSteps);
  }
  relu_counts = dropout_counts = {};
  Step s(std::make_shared<QueueBackend>(), CudaGraphMode::automatic);
  for (int i = 0; i < kSteps; ++i) replayed.push_back(s.run(input(i)));
  EXPECT_EQ(s.exe->replay_blocker(), "");
  EXPECT_EQ(s.exe->captures(), 1);
  EXPECT_EQ(s.exe->replays(), kSteps - 1);  // the first step warms up, launched
  // Host code: the warm step and the capture; hooks: every step.
  EXPECT_EQ(relu_counts.host_runs, 2);
  EXPECT_EQ(dropout_counts.host_runs, 2);
  EXPECT_EQ(relu_counts.before, kSteps);
  EXPECT_EQ(relu_counts.after, kSteps);
  EXPECT_EQ(dropout_counts.before, kSteps);
  EXPECT_EQ(dropout_counts.after, kSteps);
  for (int i = 0; i < kSteps; ++i)
    EXPECT_EQ(replayed[size_t(i)], launched[size_t(i)]) << "step " << i;
  // Each step's own seed: the same input twice gives another mask.
  EXPECT_NE(s.run(input(0)), replayed[0]);
}

TEST_F(StepReplayTest, AnErrorFoundDuringAReplayIsReportedByTheNextStep) {
  Step s(std::make_shared<QueueBackend>(), CudaGraphMode::automatic);
  for (int i = 0; i < 3; ++i) s.run(input(i));
  ASSERT_EQ(s.exe->replays(), 2);
  Tensor bad = input(3);
  bad.data_as<float>()[5] = 5000.0f;
  s.run(bad);  // found on the "device"
  EXPECT_EQ(testing::error_message([&] { s.run(input(4)); }),
            "Relu: an x above 1000 in an earlier step");
}

TEST_F(StepReplayTest, TimedStepsAreLaunchedAndLeaveTheCaptureAlone) {
  Step s(std::make_shared<QueueBackend>(), CudaGraphMode::automatic);
  for (int i = 0; i < 3; ++i) s.run(input(i));
  const int host_runs = relu_counts.host_runs;
  s.exe->set_timing(true);
  s.run(input(3));
  EXPECT_EQ(relu_counts.host_runs, host_runs + 1);
  EXPECT_EQ(s.exe->replays(), 2);
  s.exe->set_timing(false);
  s.run(input(4));
  EXPECT_EQ(s.exe->replays(), 3);
  EXPECT_EQ(s.exe->captures(), 1);
}

TEST_F(StepReplayTest, AMovedArenaIsWarmedAndCapturedAgain) {
  auto backend = std::make_shared<QueueBackend>();
  auto arena = std::make_shared<SharedArena>(backend);
  Step small(backend, CudaGraphMode::automatic, 4, arena);
  for (int i = 0; i < 3; ++i) small.run(input(i));
  ASSERT_EQ(small.exe->captures(), 1);
  Step big(backend, CudaGraphMode::automatic, 64, arena);  // grows, so moves, the arena
  big.run(input(0, 64));
  Step check(std::make_shared<QueueBackend>(), CudaGraphMode::off);
  std::vector<float> expected;
  for (int i = 0; i < 6; ++i) expected = check.run(input(i));
  std::vector<float> got;
  for (int i = 3; i < 6; ++i) got = small.run(input(i));  // warm, capture, replay
  EXPECT_EQ(small.exe->captures(), 2);
  EXPECT_EQ(small.exe->replays(), 4);
  EXPECT_EQ(got, expected);
}

TEST_F(StepReplayTest, AKernelThatCannotBeCapturedLaunchesUnderAutoAndIsAnErrorUnderOn) {
  relu_blocker = "its host code must run every step";
  {
    Step s(std::make_shared<QueueBackend>(), CudaGraphMode::automatic);
    for (int i = 0; i < 3; ++i) s.run(input(i));
    EXPECT_EQ(s.exe->replay_blocker(), "node relu: its host code must run every step");
    EXPECT_EQ(s.exe->captures(), 0);
    EXPECT_EQ(relu_counts.host_runs, 3);
  }
  EXPECT_EQ(
      testing::error_message([] { Step s(std::make_shared<QueueBackend>(), CudaGraphMode::on); }),
      "--cuda-graph on: this step cannot be replayed: node relu: its host code must run "
      "every step (--cuda-graph auto launches it kernel by kernel)");
}

TEST_F(StepReplayTest, AFailedCaptureLaunchesUnderAutoAndIsAnErrorUnderOn) {
  relu_fails_capturing = true;
  std::vector<float> expected;
  {
    Step check(std::make_shared<QueueBackend>(), CudaGraphMode::off);
    for (int i = 0; i < 4; ++i) expected = check.run(input(i));
  }
  auto backend = std::make_shared<QueueBackend>();
  Step s(backend, CudaGraphMode::automatic);
  std::vector<float> got;
  for (int i = 0; i < 4; ++i) got = s.run(input(i));
  EXPECT_EQ(got, expected);
  EXPECT_EQ(backend->aborts, 1);
  EXPECT_EQ(s.exe->replay_blocker(), "capturing the step failed: Relu cannot be captured");
  EXPECT_EQ(s.exe->captures(), 0);

  Step on(std::make_shared<QueueBackend>(), CudaGraphMode::on);
  on.run(input(0));
  EXPECT_EQ(testing::error_message([&] { on.run(input(1)); }),
            "--cuda-graph on: capturing the step failed: Relu cannot be captured");
  EXPECT_FALSE(on.backend->capturing());
}

TEST(CudaGraphCliTest, OnWithoutADeviceThatCapturesAndBadValuesAreOneLine) {
  using testing::expect_error;
  using testing::run_cli;
  expect_error(run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "1",
                        "--cuda-graph", "on"}),
               "--cuda-graph on: the cpu backend runs each kernel on the host as it is issued; "
               "CUDA graphs need --device cuda");
  expect_error(run_cli({"bench", "--model", "lenet", "--cuda-graph", "on"}),
               "--cuda-graph on: the cpu backend");
  expect_error(run_cli({"eval", "--checkpoint", "x.safetensors", "--cuda-graph", "on"}),
               "--cuda-graph on: the cpu backend");
  expect_error(run_cli({"train", "--cuda-graph", "yes"}),
               "--cuda-graph 'yes': expected auto, on or off");
}

TEST(CudaGraphCliTest, TheResultSaysWhyStepsWereLaunched) {
  const auto r = testing::run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps",
                                   "2", "--limit-test", "100", "--precision", "fp32",
                                   "--cuda-graph", "off", "--progress", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = testing::json_event(r.out)["cuda_graph"];
  EXPECT_EQ(j["launched_because"], "--cuda-graph off");
  EXPECT_EQ(j["replays"], 0);
  const auto a =
      testing::run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "2",
                        "--limit-test", "100", "--precision", "fp32", "--progress", "none"});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(testing::json_event(a.out)["cuda_graph"]["launched_because"],
            "the cpu backend runs each kernel on the host as it is issued");
}

}  // namespace
}  // namespace campo
