// Pins DCGAN's training numerics (GanSession::step, train/gan_trainer.h): a small DCGAN
// (32x32x1, nz 16, ngf = ndf = 16, Adam as PyTorch's example, batch 16 of fixed uniform
// images) trains 20 steps in fp32, amp (bf16) and cost-aware (bf16, a fixed hand-written
// cost table, so the plan does not depend on timings), with plain and with blocked
// convolution layouts. Each step's loss_D and loss_G are compared with the values recorded
// on this machine (kGanPins, keyed as the classifiers' pins: tests/train/loss_pin_util.h).
//
// The pins were recorded with the two-graph step that ran G's forward pass twice per
// iteration (in the D step and again in the G step, on the same z). The step that runs it
// once computes the same math, so with plain layouts (as the classifiers' pins) it gives
// the same bits in every policy: tolerance 0. With blocked layouts the D step now fetches
// G's activations for the G step, and fetched values are stored plain (graph/layout.h), so
// G's forward pass runs on plain activations there: its batch norms sum in another order,
// which is float rounding (measured: fp32 within 3.3e-7 for 15 steps, amp and cost-aware
// the same bits for 6). Adam then amplifies it, as it amplifies any rounding change (its
// update of a near-zero gradient is +-lr whatever the gradient's size): by step 20 fp32 lies
// 7.7e-4 from the pins, amp 6.0e-3, cost-aware 2.1e-2, the size of what the layout alone
// does to the old step (its plain and blocked runs differ by 1.3e-7, 1.0e-2 and 1.4e-2).
// kTolerances holds those bands with a margin; blocked against plain training is
// BlockedLayoutTrainingTest's (tests/graph/layout_test.cc, within a perturbed control run).
// On a machine without pins the first step, whose losses depend only on the initial weights
// and the kernels, must lie within 1e-2 of the reference machine's and every loss must be
// finite. To record the pins of a new machine run
//   CAMPO_PRINT_PINS=1 ./build/campo_tests --gtest_filter='GanLossPinTest.*'
// and add the printed lines to kGanPins.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "amp/lists.h"
#include "runtime/rng.h"
#include "tests/train/loss_pin_util.h"
#include "train/gan_trainer.h"

namespace campo {
namespace {

constexpr int kGanPinSteps = 20;

struct GanPin {
  const char* machine;
  const char* config;
  uint32_t loss_d[kGanPinSteps], loss_g[kGanPinSteps];
};

// clang-format off
const GanPin kGanPins[] = {
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2", "fp32/plain",
 {0x3fb56508, 0x3fb0b186, 0x3fb307d4, 0x3fb3508a, 0x3faaff0e, 0x3fb6d6fe, 0x3fa4b0ce, 0x3faefac5, 0x3faf0386, 0x3fa3f616, 0x3fab88be, 0x3fa31347, 0x3fa9ed0c, 0x3fb6037b, 0x3fbda8e5, 0x3fa96a36, 0x3fa8de39, 0x3fb65660, 0x3fb45dde, 0x3fb8bc0b},
 {0x3f7227aa, 0x3f68dc01, 0x3f76b960, 0x3f653181, 0x3f825773, 0x3f571b23, 0x3f6ba6b3, 0x3f57bb4f, 0x3f7ed846, 0x3f650c0d, 0x3f63e0b0, 0x3f6dbbe0, 0x3f56b73b, 0x3f5cf817, 0x3f4177aa, 0x3f43ee61, 0x3f7049c9, 0x3f51585e, 0x3f530ef8, 0x3f557d70}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2", "amp/plain",
 {0x3fb55ed6, 0x3fb08b79, 0x3fb2f246, 0x3fb34c06, 0x3fab1175, 0x3fb68ed0, 0x3fa47050, 0x3faf4fc4, 0x3faebdb4, 0x3fa43044, 0x3fac2b7c, 0x3fa473bb, 0x3fab9a5e, 0x3fb7ac52, 0x3fbe26ae, 0x3fa94f98, 0x3fab2813, 0x3fb630a2, 0x3fb3cb8e, 0x3fb6acb0},
 {0x3f720c5b, 0x3f69085a, 0x3f76c1e7, 0x3f655caa, 0x3f823197, 0x3f578d32, 0x3f6c08e4, 0x3f5639e1, 0x3f7ef3ff, 0x3f64b4b2, 0x3f623066, 0x3f6a6a23, 0x3f53cde1, 0x3f5b8409, 0x3f4090a8, 0x3f44b646, 0x3f6beacb, 0x3f5248e7, 0x3f5570da, 0x3f58fdea}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2", "cost-aware/plain",
 {0x3fb541ef, 0x3fb0b032, 0x3fb2ebb4, 0x3fb35368, 0x3faaeae8, 0x3fb6a84f, 0x3fa48b19, 0x3faf5d10, 0x3faeb608, 0x3fa3e6e7, 0x3fabf2fc, 0x3fa43de2, 0x3faa412c, 0x3fb60eac, 0x3fbda3de, 0x3fa969ec, 0x3faaf1bc, 0x3fb66a1e, 0x3fb59095, 0x3fb8a008},
 {0x3f721ea2, 0x3f688437, 0x3f76d5e3, 0x3f65378e, 0x3f8287b8, 0x3f57388c, 0x3f6bdb9b, 0x3f5669c8, 0x3f7f9d6d, 0x3f64e657, 0x3f62874c, 0x3f6bf3e8, 0x3f56f6f6, 0x3f5d91f0, 0x3f410897, 0x3f436857, 0x3f6c1ec1, 0x3f52191a, 0x3f527236, 0x3f553bf7}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2", "fp32/blocked",
 {0x3fb56508, 0x3fb0b186, 0x3fb307d4, 0x3fb3508a, 0x3faaff0e, 0x3fb6d6fe, 0x3fa4b0ce, 0x3faefac5, 0x3faf0386, 0x3fa3f615, 0x3fab88be, 0x3fa31347, 0x3fa9ed0b, 0x3fb6037b, 0x3fbda8e6, 0x3fa96a36, 0x3fa8de39, 0x3fb65660, 0x3fb45dde, 0x3fb8bc0a},
 {0x3f7227ab, 0x3f68dc01, 0x3f76b961, 0x3f653183, 0x3f825772, 0x3f571b23, 0x3f6ba6b4, 0x3f57bb50, 0x3f7ed845, 0x3f650c0d, 0x3f63e0b1, 0x3f6dbbe1, 0x3f56b73a, 0x3f5cf818, 0x3f4177a9, 0x3f43ee62, 0x3f7049c9, 0x3f51585d, 0x3f530ef8, 0x3f557d70}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2", "amp/blocked",
 {0x3fb55ed6, 0x3fb08b79, 0x3fb2f246, 0x3fb34828, 0x3fab10f0, 0x3fb685bf, 0x3fa493fe, 0x3faf32b2, 0x3faee09d, 0x3fa47df6, 0x3fac25ab, 0x3fa4b4e2, 0x3fab4cb3, 0x3fb760a0, 0x3fbd68f0, 0x3fa91dc0, 0x3fab17c0, 0x3fb5ecaa, 0x3fb3cd36, 0x3fb81790},
 {0x3f720c5b, 0x3f69085a, 0x3f76c1e7, 0x3f655619, 0x3f823930, 0x3f576bae, 0x3f6b7d66, 0x3f56d480, 0x3f7f3527, 0x3f643e8a, 0x3f625152, 0x3f6a3549, 0x3f5460e6, 0x3f5b9d09, 0x3f41606a, 0x3f448f2d, 0x3f6c169b, 0x3f527b32, 0x3f54a77a, 0x3f56c402}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2", "cost-aware/blocked",
 {0x3fb541ef, 0x3fb0b4be, 0x3fb2e1d5, 0x3fb3889c, 0x3faac33a, 0x3fb6a863, 0x3fa46394, 0x3faecfb2, 0x3faef50a, 0x3fa3f87c, 0x3fab38c7, 0x3fa4726d, 0x3fab4e52, 0x3fb6c14e, 0x3fbe46c8, 0x3fa95583, 0x3fac34a7, 0x3fb6bca6, 0x3fb50a96, 0x3fb9ccb2},
 {0x3f721ea2, 0x3f6879af, 0x3f773df2, 0x3f649c15, 0x3f828268, 0x3f5702ca, 0x3f6b3435, 0x3f5715a2, 0x3f7f3b11, 0x3f649693, 0x3f63c409, 0x3f6ad995, 0x3f540bbc, 0x3f5be96f, 0x3f405b06, 0x3f438952, 0x3f692e67, 0x3f518acc, 0x3f535c1c, 0x3f550515}},
};
// clang-format on

// How far this machine's run may lie from its pins, relative, per step: the first `steps`
// steps within `rtol_first`, the others within `rtol_rest` (the file comment says why).
struct Tolerance {
  const char* config;
  int steps;
  double rtol_first, rtol_rest;
};
const Tolerance kTolerances[] = {
    {"fp32/plain", kGanPinSteps, 0.0, 0.0},
    {"amp/plain", kGanPinSteps, 0.0, 0.0},
    {"cost-aware/plain", kGanPinSteps, 0.0, 0.0},
    {"fp32/blocked", 15, 1e-6, 2e-3},
    {"amp/blocked", 6, 0.0, 1.5e-2},
    {"cost-aware/blocked", 6, 0.0, 5e-2},
};

Tolerance tolerance_for(const std::string& config) {
  for (const Tolerance& t : kTolerances)
    if (config == t.config) return t;
  ADD_FAILURE() << "no tolerance for " << config;
  return {"", kGanPinSteps, 0.0, 0.0};
}

struct GanPinRun {
  std::vector<float> loss_d, loss_g;
};

// config: "<policy>/<layout>", policy fp32, amp or cost-aware, layout plain or blocked.
GanPinRun run_gan_pin(const std::string& config) {
  const std::string policy = config.substr(0, config.find('/'));
  const ConvLayout layout = parse_conv_layout(config.substr(config.find('/') + 1));
  DcganOptions m;
  m.image_size = 32;
  m.channels = 1;
  m.nz = 16;
  m.ngf = m.ndf = 16;
  OptimizerConfig adam;
  adam.kind = OptimizerConfig::Kind::adam;
  adam.beta1 = 0.5f;
  PrecisionConfig p;
  p.low = DType::bf16;
  p.policy = policy == "fp32"  ? Precision::fp32
             : policy == "amp" ? Precision::amp
                               : Precision::cost_aware;
  GanSession::StepCosts costs;
  if (p.policy == Precision::cost_aware) {
    p.padding = false;  // padding decisions are timed
    // Keyed by node name: G's and D's layers have the same costs in both step graphs.
    costs = [](const Graph& g) { return pinned_cost_table(g, PinnedKey::node_name); };
  }
  const int64_t batch = 16;
  GanSession session(m, batch, adam, 1234, default_cpu_backend(), 4, p, layout, costs);
  GanPinRun run;
  Rng rng(99);
  Tensor real = Tensor::empty({batch, m.channels, m.image_size, m.image_size}, DType::f32);
  for (int step = 0; step < kGanPinSteps; ++step) {
    for (int64_t i = 0; i < real.numel(); ++i) real.data_as<float>()[i] = rng.uniform(-1, 1);
    const GanSession::StepStats s = session.step(real, 2e-4f);
    run.loss_d.push_back(s.loss_d);
    run.loss_g.push_back(s.loss_g);
  }
  return run;
}

void print_pin(const std::string& machine, const std::string& config, const GanPinRun& run) {
  auto bits = [](const std::vector<float>& v) {
    std::string s;
    char buf[16];
    for (size_t i = 0; i < v.size(); ++i) {
      std::snprintf(buf, sizeof buf, "%s0x%08x", i ? ", " : "", std::bit_cast<uint32_t>(v[i]));
      s += buf;
    }
    return s;
  };
  std::printf("{\"%s\", \"%s\",\n {%s},\n {%s}},\n", machine.c_str(), config.c_str(),
              bits(run.loss_d).c_str(), bits(run.loss_g).c_str());
}

void check_gan_pinned(const std::string& config) {
  const std::string machine = pin_machine_key();
  const GanPin* pin = nullptr;
  const GanPin* reference = nullptr;
  for (const GanPin& p : kGanPins) {
    if (config != p.config) continue;
    if (reference == nullptr) reference = &p;
    if (machine == p.machine) pin = &p;
  }
  const GanPinRun run = run_gan_pin(config);
  ASSERT_EQ(run.loss_d.size(), size_t(kGanPinSteps));
  if (std::getenv("CAMPO_PRINT_PINS") != nullptr) print_pin(machine, config, run);
  for (int i = 0; i < kGanPinSteps; ++i)
    EXPECT_TRUE(std::isfinite(run.loss_d[size_t(i)]) && std::isfinite(run.loss_g[size_t(i)]))
        << config << " step " << i;
  ASSERT_NE(reference, nullptr) << "no machine has pins for " << config;
  auto expect_near = [&](const char* what, int i, float got, uint32_t pinned_bits, double rtol,
                         const char* against) {
    const double want = std::bit_cast<float>(pinned_bits);
    EXPECT_LE(std::abs(double(got) - want), rtol * std::abs(want))
        << config << " step " << i << ": " << what << " " << got << ", " << against << " " << want
        << " (relative " << std::abs(double(got) - want) / std::abs(want) << ")";
  };
  if (pin != nullptr) {
    const Tolerance t = tolerance_for(config);
    for (int i = 0; i < kGanPinSteps; ++i) {
      const double rtol = i < t.steps ? t.rtol_first : t.rtol_rest;
      expect_near("loss_D", i, run.loss_d[size_t(i)], pin->loss_d[i], rtol, "pinned");
      expect_near("loss_G", i, run.loss_g[size_t(i)], pin->loss_g[i], rtol, "pinned");
    }
    return;
  }
  expect_near("loss_D", 0, run.loss_d[0], reference->loss_d[0], 1e-2, reference->machine);
  expect_near("loss_G", 0, run.loss_g[0], reference->loss_g[0], 1e-2, reference->machine);
}

TEST(GanLossPinTest, Fp32Plain) { check_gan_pinned("fp32/plain"); }
TEST(GanLossPinTest, AmpPlain) { check_gan_pinned("amp/plain"); }
TEST(GanLossPinTest, CostAwarePlain) { check_gan_pinned("cost-aware/plain"); }
TEST(GanLossPinTest, Fp32Blocked) { check_gan_pinned("fp32/blocked"); }
TEST(GanLossPinTest, AmpBlocked) { check_gan_pinned("amp/blocked"); }
TEST(GanLossPinTest, CostAwareBlocked) { check_gan_pinned("cost-aware/blocked"); }

}  // namespace
}  // namespace campo
