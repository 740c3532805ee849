// The runs of the loss pins (loss_pin_test.cc): a model, a precision configuration,
// 20 training steps on deterministic batches; the losses and a hash of the variables after.
#pragma once

#include <omp.h>

#include <fstream>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "ops/op.h"
#include "runtime/cpu_backend.h"
#include "runtime/rng.h"
#include "train/trainer.h"

namespace campo {

inline constexpr int kPinSteps = 20;

struct PinRun {
  std::vector<float> losses;
  uint64_t weights_hash = 0;
  int64_t replays = 0;     // steps replayed from a capture (--cuda-graph; 0 on the CPU)
  int64_t prefetched = 0;  // steps whose batch was uploaded during the step before
};

// What distinguishes one CPU's results from another's: the model name, the ISA extensions
// oneDNN and campo's own kernels choose by, the thread count (reductions split by it), the
// oneDNN release (its kernels sum in another order from one release to the next), and a
// build other than Release.
inline std::string pin_machine_key() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown", flags;
  while (std::getline(in, line)) {
    if (model == "unknown" && line.rfind("model name", 0) == 0)
      model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = " " + line + " ";
  }
  std::string key = model;
  for (const char* f : {"avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "f16c"})
    if (flags.find(std::string(" ") + f + " ") != std::string::npos) key += std::string(" ") + f;
  key += " threads=" + std::to_string(omp_get_max_threads());
  const std::string onednn = onednn_version();  // "3.2.0": the major and minor release
  key += " onednn=" + onednn.substr(0, onednn.rfind('.'));
  // Optimisation level and instrumentation change how campo's own loops compile (the
  // sanitizer build's -O1 gives other ResNet-18 bits); the pins are the Release build's.
#if defined(__SANITIZE_ADDRESS__)
  key += " build=sanitized";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  key += " build=sanitized";
#endif
#endif
#if !defined(__OPTIMIZE__)
  key += " build=unoptimized";
#endif
  return key;
}

// FNV-1a of a string.
inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Which allow ops lose in low precision in pinned_cost_table: every third by node id, or by
// node name (a node then has the same costs in every graph that holds it, as DCGAN's layers
// in both step graphs).
enum class PinnedKey { node_id, node_name };

// A cost table that does not depend on timings: f32 time grows with the output size; allow
// ops gain 2x in low precision except every third (by `key`), which loses; infer and clear
// ops gain 10%; casts cost a little. Gives a plan with both precisions and casts.
inline CostTable pinned_cost_table(const Graph& g, PinnedKey key = PinnedKey::node_id) {
  const AmpLists cpu_lists = AmpLists::defaults(Device::cpu, DType::bf16);
  CostTable t;
  t.nodes.resize(size_t(g.num_nodes()));
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    int64_t elements = 0;
    for (ValueId v : n.outputs) elements += shape_numel(g.value(v).shape);
    const double f32 = 0.01 + 1e-5 * double(elements);
    double low = f32;
    switch (cpu_lists.classify(n.kind)) {
      case AmpList::allow:
        low = (key == PinnedKey::node_id ? uint64_t(id) : fnv1a(n.name)) % 3 == 0 ? 1.5 * f32
                                                                                  : 0.5 * f32;
        break;
      case AmpList::infer:
      case AmpList::clear:
        low = 0.9 * f32;
        break;
      default:
        break;
    }
    t.nodes[size_t(id)] = {f32, low};
  }
  t.cast = {0.002, 2e-6};
  return t;
}

inline uint64_t hash_variables(const VariableStore& vars) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
      h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  };
  for (const std::string& name : vars.names()) {
    mix(name.data(), name.size());
    const std::vector<float> v = vars.read(name).to_float_vector();
    mix(v.data(), v.size() * sizeof(float));
  }
  return h;
}

// `batch` images of shape `image` ([C, H, W]) drawn from N(0, 1) and labels below 10.
inline Batch random_batch(Rng& rng, int64_t batch, const Shape& image) {
  Batch b;
  Shape shape = {batch};
  shape.insert(shape.end(), image.begin(), image.end());
  b.images = Tensor::empty(shape, DType::f32);
  b.labels = Tensor::empty({batch}, DType::i32);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data_as<float>()[i] = rng.normal();
  for (int64_t i = 0; i < batch; ++i) b.labels.data_as<int32_t>()[i] = int32_t(rng.below(10));
  return b;
}

// config: "<model>/<policy>", policy one of fp32, amp, cost-aware, amp-fp16-dynamic.
// `backend`: where the session trains (null: the default CPU backend); `steps` training steps;
// `read_ahead`: each step is given the next one's batch to upload (train/prefetch.h), as the
// training loop does on a device whose copies overlap its compute.
inline PinRun run_pinned_config(const std::string& config,
                                std::shared_ptr<Backend> backend = nullptr, int steps = kPinSteps,
                                bool read_ahead = false) {
  const std::string model = config.substr(0, config.find('/'));
  const std::string policy = config.substr(config.find('/') + 1);
  const bool lenet = model == "lenet";
  ModelOptions mo;
  mo.in_channels = lenet ? 1 : 3;
  mo.image_size = lenet ? 28 : 32;
  const Shape image_shape = {mo.in_channels, mo.image_size, mo.image_size};
  const int64_t batch = lenet ? 16 : 4;
  OptimizerConfig opt;
  if (!lenet) opt.kind = OptimizerConfig::Kind::adam;
  opt.weight_decay = 1e-4f;

  PrecisionConfig p;
  p.low = policy == "amp-fp16-dynamic" ? DType::f16 : DType::bf16;
  p.policy = policy == "fp32"         ? Precision::fp32
             : policy == "cost-aware" ? Precision::cost_aware
                                      : Precision::amp;
  if (policy == "amp-fp16-dynamic") {
    p.scaler = {.enabled = true, .init_scale = 0x1p24f, .growth_interval = 5};
  }
  if (p.policy == Precision::cost_aware) {
    p.padding = false;  // padding decisions are timed
    Graph scratch;
    VariableStore scratch_vars(1, default_cpu_backend());
    PrecisionConfig f32 = p;
    f32.policy = Precision::fp32;
    build_training_graph(scratch, scratch_vars, {model, mo, image_shape, batch, opt, f32});
    p.costs = std::make_shared<const CostTable>(pinned_cost_table(scratch));
  }

  // The pins were recorded with plain layouts; the blocked layout (the default) sums batch
  // norm and the 1x1 convolutions in another order, so it is compared with plain by
  // BlockedLayoutTrainingTest (tests/graph/layout_test.cc) instead of pinned.
  if (!backend) backend = default_cpu_backend();
  TrainingSession session(model, mo, image_shape, batch, opt, 1234, std::move(backend), p,
                          ConvLayout::plain);
  PinRun run;
  Rng rng(99);
  std::vector<Batch> batches;
  for (int i = 0; i < steps; ++i) batches.push_back(random_batch(rng, batch, image_shape));
  for (size_t step = 0; step < batches.size(); ++step) {
    std::vector<const Batch*> next;
    if (read_ahead && step + 1 < batches.size()) next = {&batches[step + 1]};
    run.losses.push_back(session.train_step({&batches[step]}, {lenet ? 0.05f : 0.002f}, next)[0]);
  }
  run.prefetched = session.prefetched_steps();
  run.weights_hash = hash_variables(session.variables());
  for (const Executable* e : session.step_executables()) run.replays += e->replays();
  return run;
}

}  // namespace campo
