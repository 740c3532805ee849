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
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2 onednn=3.2", "fp32/plain",
 {0x3fb56508, 0x3fb0b186, 0x3fb307d5, 0x3fb3508a, 0x3faaff0e, 0x3fb6d6fe, 0x3fa4b0ce, 0x3faefac5, 0x3faf0386, 0x3fa3f616, 0x3fab88be, 0x3fa31348, 0x3fa9ed0b, 0x3fb6037b, 0x3fbda8e4, 0x3fa96a35, 0x3fa8de38, 0x3fb65660, 0x3fb45ddf, 0x3fb8bc0a},
 {0x3f7227aa, 0x3f68dc02, 0x3f76b960, 0x3f653183, 0x3f825772, 0x3f571b23, 0x3f6ba6b2, 0x3f57bb51, 0x3f7ed845, 0x3f650c0e, 0x3f63e0b0, 0x3f6dbbdf, 0x3f56b73c, 0x3f5cf818, 0x3f4177ab, 0x3f43ee62, 0x3f7049cb, 0x3f515860, 0x3f530ef8, 0x3f557d71}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2 onednn=3.2", "amp/plain",
 {0x3fb55ed6, 0x3fb09424, 0x3fb2ea32, 0x3fb33ffe, 0x3faaf384, 0x3fb62d54, 0x3fa3f0fe, 0x3faee8ac, 0x3fae895a, 0x3fa41232, 0x3fabdbc8, 0x3fa3c8fc, 0x3fab0458, 0x3fb61c1f, 0x3fbe412d, 0x3fa9ed04, 0x3fab3cc5, 0x3fb794d6, 0x3fb48188, 0x3fb70e1c},
 {0x3f720c5b, 0x3f68e083, 0x3f76eca4, 0x3f65475b, 0x3f82288c, 0x3f5812f5, 0x3f6cb847, 0x3f575d73, 0x3f7fc433, 0x3f64f8d9, 0x3f62f96f, 0x3f6c8ac1, 0x3f5514d5, 0x3f5e1f44, 0x3f3ff665, 0x3f436d05, 0x3f6c2676, 0x3f501562, 0x3f543219, 0x3f58fa0f}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2 onednn=3.2", "cost-aware/plain",
 {0x3fb541ef, 0x3fb0bb46, 0x3fb2e9a8, 0x3fb3457e, 0x3fab0df3, 0x3fb65de7, 0x3fa41612, 0x3faebc2c, 0x3fae7d40, 0x3fa3f6bc, 0x3fab8a3c, 0x3fa35b97, 0x3fab1797, 0x3fb63465, 0x3fbd5568, 0x3fa8e030, 0x3faa45d6, 0x3fb565f4, 0x3fb369c2, 0x3fb782b6},
 {0x3f721ea2, 0x3f689884, 0x3f772a3e, 0x3f653e6e, 0x3f825957, 0x3f57dd85, 0x3f6c0568, 0x3f579346, 0x3f8021a3, 0x3f64c955, 0x3f636efa, 0x3f6d108c, 0x3f54a4ec, 0x3f5d4263, 0x3f41ba7c, 0x3f44a54c, 0x3f6e4e0e, 0x3f539da8, 0x3f561df5, 0x3f586f4b}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2 onednn=3.2", "fp32/blocked",
 {0x3fb56508, 0x3fb0b186, 0x3fb307d4, 0x3fb3508a, 0x3faaff0e, 0x3fb6d6ff, 0x3fa4b0ce, 0x3faefac6, 0x3faf0386, 0x3fa3f615, 0x3fab88be, 0x3fa31348, 0x3fa9ed0c, 0x3fb6037c, 0x3fbda8e6, 0x3fa96a36, 0x3fa8de3a, 0x3fb65660, 0x3fb45dde, 0x3fb8bc0b},
 {0x3f7227aa, 0x3f68dc02, 0x3f76b961, 0x3f653183, 0x3f825773, 0x3f571b22, 0x3f6ba6b4, 0x3f57bb50, 0x3f7ed846, 0x3f650c0e, 0x3f63e0b1, 0x3f6dbbe0, 0x3f56b73a, 0x3f5cf818, 0x3f4177a9, 0x3f43ee63, 0x3f7049c9, 0x3f51585d, 0x3f530ef8, 0x3f557d70}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2 onednn=3.2", "amp/blocked",
 {0x3fb55ed6, 0x3fb09424, 0x3fb2ef19, 0x3fb33504, 0x3faad2e1, 0x3fb6584c, 0x3fa3edb8, 0x3faeb6f4, 0x3fae8ebc, 0x3fa381cd, 0x3fab76af, 0x3fa33862, 0x3fa9e6ea, 0x3fb5d0d3, 0x3fbe2a1e, 0x3fa9e47c, 0x3fabf136, 0x3fb7a4ae, 0x3fb48d76, 0x3fb90f52},
 {0x3f720c5b, 0x3f68e083, 0x3f76e80a, 0x3f650eaa, 0x3f824ba0, 0x3f57e312, 0x3f6d0ed0, 0x3f57c344, 0x3f7f502f, 0x3f65d0b4, 0x3f639cce, 0x3f6cc0e8, 0x3f56c913, 0x3f5e104f, 0x3f3ff4c7, 0x3f42782a, 0x3f68ee93, 0x3f4f1d57, 0x3f541178, 0x3f5553cf}},
{"AMD EPYC avx2 avx512f avx512_bf16 f16c threads=2 onednn=3.2", "cost-aware/blocked",
 {0x3fb541ef, 0x3fb0bb46, 0x3fb2e5dd, 0x3fb35f24, 0x3fab05c6, 0x3fb68934, 0x3fa40aec, 0x3faeac36, 0x3fae8784, 0x3fa41242, 0x3fab8786, 0x3fa39720, 0x3fa9ba2e, 0x3fb62983, 0x3fbd449a, 0x3fa95eca, 0x3fabfd3b, 0x3fb60bcc, 0x3fb32f2b, 0x3fb90f45},
 {0x3f721ea2, 0x3f689884, 0x3f772c55, 0x3f650b25, 0x3f826f19, 0x3f57dced, 0x3f6c6651, 0x3f578d97, 0x3f7ff91c, 0x3f64ce5b, 0x3f638eec, 0x3f6d49f6, 0x3f576215, 0x3f5dec9e, 0x3f41b2d1, 0x3f43fdb5, 0x3f698d9b, 0x3f52508f, 0x3f56d9b4, 0x3f540b5a}},
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
