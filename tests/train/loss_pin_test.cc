// Pins the CPU path's training numerics: LeNet and ResNet-18 (small stem) train 20 steps in
// fp32, amp (bf16), cost-aware (bf16, a fixed hand-written cost table, so the plan does not
// depend on timings) and amp with fp16 and a dynamic loss scale that starts so high that the
// first steps overflow and are skipped.
//
// On a machine with pins (kPins: the machine key, below), each run's 20 losses (as float
// bits) and a hash of every variable's bytes after the last step must equal the values
// recorded there. Kernels differ between CPUs (oneDNN picks its implementation by ISA), so
// exact pins are kept per machine and for the Release build (the sanitizer build's -O1
// compiles the loops differently). On every other machine the run is compared with the
// reference run (the first machine pinned for the config) within a band per step, so the
// test asserts something everywhere:
//  - LeNet: all 20 steps within 5e-3 relative. Between the AVX2 EPYC and the AVX-512 BF16
//    EPYC (native bf16 dot products against emulated ones) fp32, amp and fp16 differ by at
//    most 1e-5 over 20 steps and cost-aware by 4.5e-4.
//  - ResNet-18: the first 2 steps within 2e-2 (measured: at most 7e-3, amp's second step),
//    and every loss finite. From the third step on, batch norm over 4 samples and Adam make
//    the run chaotic (those two machines' losses differ by up to 30% by step 8, as do two
//    runs on one machine from inputs perturbed by 1e-6), so no band would mean anything.
// To record the pins of a new machine run
//   CAMPO_PRINT_PINS=1 ./build/campo_tests --gtest_filter='LossPinTest.*'
// and add the printed lines to loss_pins.inc.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
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

// How far another machine's run may lie from the reference run: steps [0, steps) within
// rtol relative (the file comment says where the figures come from).
struct Band {
  int steps;
  double rtol;
};

Band band_for(const std::string& config) {
  if (config.rfind("lenet/", 0) == 0) return {kPinSteps, 5e-3};
  return {2, 2e-2};
}

void check_pinned(const std::string& config) {
  const std::string machine = pin_machine_key();
  const bool print = std::getenv("CAMPO_PRINT_PINS") != nullptr;
  const Pin* pin = nullptr;
  const Pin* reference = nullptr;
  for (const Pin& p : kPins) {
    if (config != p.config) continue;
    if (reference == nullptr) reference = &p;
    if (machine == p.machine) pin = &p;
  }
  ASSERT_NE(reference, nullptr) << "no machine has pins for " << config;
  const PinRun run = run_pinned_config(config);
  ASSERT_EQ(run.losses.size(), size_t(kPinSteps));
  if (print) {
    std::printf("{\"%s\", \"%s\", {", machine.c_str(), config.c_str());
    for (size_t i = 0; i < run.losses.size(); ++i)
      std::printf("%s0x%08x", i ? ", " : "", std::bit_cast<uint32_t>(run.losses[i]));
    std::printf("}, 0x%016llxull},\n", static_cast<unsigned long long>(run.weights_hash));
  }
  for (int i = 0; i < kPinSteps; ++i)
    EXPECT_TRUE(std::isfinite(run.losses[size_t(i)])) << config << " step " << i;
  if (pin != nullptr) {
    for (int i = 0; i < kPinSteps; ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(run.losses[size_t(i)]), pin->losses[i])
          << config << " step " << i << ": loss " << run.losses[size_t(i)] << ", pinned "
          << std::bit_cast<float>(pin->losses[i]);
    EXPECT_EQ(run.weights_hash, pin->weights_hash) << config << ": variables after the last step";
    return;
  }
  const Band band = band_for(config);
  for (int i = 0; i < band.steps; ++i) {
    const double want = std::bit_cast<float>(reference->losses[i]);
    EXPECT_LE(std::abs(run.losses[size_t(i)] - want), band.rtol * std::abs(want))
        << config << " step " << i << ": loss " << run.losses[size_t(i)] << ", the reference run ("
        << reference->machine << ") " << want << "; no exact pins for " << machine;
  }
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
