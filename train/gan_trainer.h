// DCGAN training as PyTorch's examples/dcgan/main.py does it, on campo graphs.
//
// One VariableStore holds both networks ("netG.*", "netD.*", see models/dcgan.h) and their
// optimizer state (Adam as the example, or SGD). Three compiled graphs share it:
//   D step  z -> G(z) (training-mode BN, no gradient into G: only D's parameters are
//           differentiated, which is the example's fake.detach());
//           loss_D = mean BCE(D(x), 1) + mean BCE(D(G(z)), 0), both with logits
//           (SigmoidCrossEntropyWithLogits); the update of D's parameters only.
//   G step  the same z -> loss_G = mean BCE(D(G(z)), 1) against the just-updated D; the
//           update of G's parameters only. D runs in training mode, so its BN running statistics
//           update here as in PyTorch.
//   samples G(fixed noise), 64 samples, in training mode like the example (which never
//           calls netG.eval()): BN normalises with the statistics of the fixed batch.
// Each graph has its own "lr" and "step" placeholders (append_optimizer looks them up by
// name in its graph). G's forward pass runs in both step graphs on the same z (PyTorch runs
// it once and reuses the output); the outputs are identical since only D changes in
// between, but G's BN running statistics get two momentum updates per iteration. They are
// never read (G is always evaluated in training mode), so training is unaffected.
//
// Images are rescaled to [-1, 1] (tanh's range): IDX data sets through mean 0.5 / std 0.5
// on [0, 1] pixels; the synthetic data set (roughly N(0, 1) pixels) through tanh.
// At the end of every epoch (and when --steps stops a run mid-epoch) G's samples of the
// fixed noise are written as an 8x8 grid PNG, samples_dir/epoch_NNN.png (1-based epoch),
// via a temporary file and a rename.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "amp/policy.h"
#include "graph/executor.h"
#include "graph/layout.h"
#include "graph/optimizer.h"
#include "models/dcgan.h"
#include "runtime/backend.h"
#include "runtime/rng.h"
#include "train/training_graph.h"

namespace campo {

struct GanOptions {
  std::string dataset = "fashion-mnist";  // fashion-mnist | mnist | synthetic
  std::string data_dir;
  int image_size = 64;  // 32 | 64
  int channels = 1;     // 1 | 3 (grey data replicated to 3 channels)
  int epochs = 1;
  int64_t steps = 0;   // 0: full epochs; else stop after this many steps
  int64_t batch = 64;  // the example's default
  float lr = 2e-4f;
  // The learning-rate schedule, as TrainOptions' (learning_rate_at, train/trainer.h);
  // the example trains at a constant rate.
  std::string lr_schedule = "constant";  // constant | step | cosine
  int lr_step_epochs = 30;
  float lr_gamma = 0.1f;
  int64_t warmup_steps = 0;
  std::string optimizer = "adam";  // adam (the example's) | sgd, on both networks
  float beta1 = 0.5f, beta2 = 0.999f;
  float momentum = 0.9f;      // sgd
  bool nesterov = false;      // sgd
  float weight_decay = 0.0f;  // the L2 term, on both networks
  int nz = 100, ngf = 64, ndf = 64;
  uint64_t seed = 42;
  std::string samples_dir = "samples";  // empty: write no sample grids
  std::string progress = "auto";        // auto | bar | lines | none
  int64_t train_limit = 0;              // use only the first N training samples (0: all)
  int threads = 0;                      // 0: OpenMP default
  bool profile = false;                 // time every node; print the time per op at the end
  DeviceSpec device;                    // cpu (cuda: make_backend's error, as for the classifiers)
  PrecisionConfig precision;            // fp32 unless set
  ConvLayout conv_layout = ConvLayout::blocked;  // --conv-layout (graph/layout.h)
  std::string calibration;                       // cost-aware: as TrainOptions::calibration
  // Checkpoints (one safetensors file, GanSession::save): written at each epoch end, every
  // save_every steps (0: epoch ends only), on Ctrl-C and at the end; resume_path continues
  // a run from one bit for bit.
  std::string save_path;
  int64_t save_every = 0;
  std::string resume_path;
};

struct GanResult {
  double loss_d = 0, loss_g = 0;  // means over the last 50 steps
  double d_x = 0, d_g_z = 0;      // mean D(x) and D(G(z)) (before D's update), last 50 steps
  double samples_per_sec = 0;     // real images per second through both steps
  double wall_seconds = 0;
  int64_t steps = 0;
  int64_t parameters_g = 0, parameters_d = 0;
  std::vector<float> loss_d_history, loss_g_history;  // one entry per step
  std::vector<std::string> sample_files;              // PNGs written, in order
};

// Checks the options (one clear campo::Error per problem) before anything is loaded.
void validate_gan(const GanOptions& o);

// Trains; progress goes to `log`, the final JSON line too. SIGINT or SIGTERM ends the run
// after the current step with Interrupted (train/interrupt.h), the checkpoint written first
// when save_path is set.
GanResult train_gan(const GanOptions& o, std::ostream& log, bool log_is_terminal);

// Writes images [N, C, H, W] with values in [-1, 1] as a PNG grid of `nrow` images per row
// with `padding` black pixels around each (torchvision's make_grid layout); grey for C = 1,
// RGB for C = 3; pixel = round(255 * clamp((x + 1) / 2, 0, 1)). Atomic: written to a
// temporary file in the same directory, then renamed over `path`.
void write_png_grid(const std::string& path, const Tensor& images, int nrow = 8, int padding = 2);

// The compiled graphs of one DCGAN run (see the file comment).
class GanSession {
 public:
  struct StepStats {
    float loss_d = 0, loss_g = 0;
    float d_x = 0;     // mean D(x) on the real batch
    float d_g_z1 = 0;  // mean D(G(z)) in the D step (before D's update)
    float d_g_z2 = 0;  // mean D(G(z)) in the G step (after D's update)
  };

  // `precision` applies to both step graphs through apply_policy (train/training_graph.h;
  // cost-aware profiles each step graph itself), the sample graph stays f32; dynamic loss
  // scaling is not supported for GANs yet.
  GanSession(const DcganOptions& model, int64_t batch, const OptimizerConfig& optimizer,
             uint64_t seed, int64_t num_samples = 64, const PrecisionConfig& precision = {},
             ConvLayout conv_layout = ConvLayout::blocked);
  // Nodes in low precision and casts over both step graphs.
  PrecisionSummary precision_summary() const;
  ~GanSession();

  // One iteration: draws z ~ N(0, 1), runs the D step on (real, G(z)), then the G step.
  // `real` is [batch, nc, S, S] in [-1, 1].
  StepStats step(const Tensor& real, float lr);
  // G(fixed noise) [num_samples, nc, S, S]; a view valid until the next call.
  Tensor generate_samples();

  // Per-node timing of both step graphs, summed per op kind (name -> total ms, largest
  // first).
  void set_profiling(bool on);
  std::vector<std::pair<std::string, double>> profile_by_op() const;

  VariableStore& variables() { return vars_; }
  Graph& d_graph() { return d_graph_; }
  Graph& g_graph() { return g_graph_; }
  // What each step fetches (its live nodes are those these and the updates need).
  std::vector<ValueId> d_fetches() const { return {loss_d_, d_x_, d_g_z1_}; }
  std::vector<ValueId> g_fetches() const { return {loss_g_, d_g_z2_}; }
  // cost-aware only (else null): the costs and decisions of each step graph, by node id of
  // the graph before casts.
  const std::shared_ptr<const CostAwarePlan>& d_plan() const { return d_policy_.cost_plan; }
  const std::shared_ptr<const CostAwarePlan>& g_plan() const { return g_policy_.cost_plan; }
  // What apply_policy did to each step graph (cost-aware: the plan and the padding).
  const PolicyResult& d_policy() const { return d_policy_; }
  const PolicyResult& g_policy() const { return g_policy_; }
  const std::shared_ptr<const CostTable>& d_costs() const { return d_costs_; }
  const std::shared_ptr<const CostTable>& g_costs() const { return g_costs_; }
  int64_t iterations() const { return iterations_; }

  // A checkpoint of both networks and their optimizer states (one VariableStore: "netG.*",
  // "netD.*", "optimizer.netG.*", ...; graph/checkpoint.h), with the training position in
  // its metadata: the iterations done (campo.step), `epoch` and `position_in_epoch`, the
  // optimizer's name, the RNG states of the noise and of both step executables, and their
  // executor step counters. Restoring it into a session built with the same options
  // continues bit for bit.
  void save(const std::string& path, int64_t epoch, int64_t position_in_epoch,
            const std::string& optimizer);
  struct Position {
    int64_t epoch = 0, position_in_epoch = 0;
  };
  // Checks the checkpoint (model dcgan, `optimizer`, every field) before it changes
  // anything, then restores the variables and the position.
  Position restore(const std::string& path, const std::string& optimizer);
  int64_t generator_parameters() const;
  int64_t discriminator_parameters() const;

 private:
  DcganOptions model_;
  int64_t batch_;
  VariableStore vars_;
  Rng noise_rng_;
  Graph d_graph_, g_graph_, sample_graph_;
  ValueId loss_d_ = kNoValue, d_x_ = kNoValue, d_g_z1_ = kNoValue;
  ValueId loss_g_ = kNoValue, d_g_z2_ = kNoValue, samples_ = kNoValue;
  std::unique_ptr<Executable> d_exe_, g_exe_, sample_exe_;
  PolicyResult d_policy_, g_policy_;
  std::shared_ptr<const CostTable> d_costs_, g_costs_;
  int64_t iterations_ = 0;
  std::vector<double> op_ms_;  // by OpKind
};

}  // namespace campo
