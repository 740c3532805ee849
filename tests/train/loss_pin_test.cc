// Pins the CPU path's training numerics bit for bit: LeNet and ResNet-18 (small stem)
// train 20 steps in fp32, amp (bf16), cost-aware (bf16, a fixed hand-written cost table, so
// the plan does not depend on timings) and amp with fp16 and a dynamic loss scale that
// starts so high that the first steps overflow and are skipped. Each run's 20 losses (as
// float bits) and a hash of every variable's bytes after the last step must equal the
// values recorded on this machine before the backend refactoring (issue 11).
//
// Kernels differ between CPUs (oneDNN picks its implementation by ISA), so the pins are
// kept per machine, and for the Release build (the sanitizer build's -O1 compiles the
// loops differently); without pins for this machine and build the test is skipped, saying
// so. To record the pins of a new machine run
//   CAMPO_PRINT_PINS=1 ./build/campo_tests --gtest_filter='LossPinTest.*'
// and add the printed lines to kPins.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "amp/policy.h"
#include "tests/train/loss_pin_util.h"

namespace campo {
namespace {

struct Pin {
  const char* machine;
  const char* config;
  uint32_t losses[kPinSteps];
  uint64_t weights_hash;
};

// clang-format off
const Pin kPins[] = {
#include "tests/train/loss_pins.inc"
};
// clang-format on

void check_pinned(const std::string& config) {
  const std::string machine = pin_machine_key();
  const bool print = std::getenv("CAMPO_PRINT_PINS") != nullptr;
  const Pin* pin = nullptr;
  for (const Pin& p : kPins)
    if (machine == p.machine && config == p.config) pin = &p;
  if (pin == nullptr && !print)
    GTEST_SKIP() << "no pinned losses for this machine (" << machine << "), config " << config;
  const PinRun run = run_pinned_config(config);
  if (print) {
    std::printf("{\"%s\", \"%s\", {", machine.c_str(), config.c_str());
    for (size_t i = 0; i < run.losses.size(); ++i)
      std::printf("%s0x%08x", i ? ", " : "", std::bit_cast<uint32_t>(run.losses[i]));
    std::printf("}, 0x%016llxull},\n", static_cast<unsigned long long>(run.weights_hash));
  }
  if (pin == nullptr) GTEST_SKIP() << "printed the pins of " << machine << ", config " << config;
  ASSERT_EQ(run.losses.size(), size_t(kPinSteps));
  for (int i = 0; i < kPinSteps; ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(run.losses[size_t(i)]), pin->losses[i])
        << config << " step " << i << ": loss " << run.losses[size_t(i)] << ", pinned "
        << std::bit_cast<float>(pin->losses[i]);
  EXPECT_EQ(run.weights_hash, pin->weights_hash) << config << ": variables after the last step";
}

TEST(LossPinTest, LeNetFp32) { check_pinned("lenet/fp32"); }
TEST(LossPinTest, LeNetAmp) { check_pinned("lenet/amp"); }
TEST(LossPinTest, LeNetCostAware) { check_pinned("lenet/cost-aware"); }
TEST(LossPinTest, LeNetFp16LossScaleSkips) { check_pinned("lenet/amp-fp16-dynamic"); }
TEST(LossPinTest, ResNet18Fp32) { check_pinned("resnet18/fp32"); }
TEST(LossPinTest, ResNet18Amp) { check_pinned("resnet18/amp"); }
TEST(LossPinTest, ResNet18CostAware) { check_pinned("resnet18/cost-aware"); }

}  // namespace
}  // namespace campo
