// DCGAN training as PyTorch's examples/dcgan/main.py does it, on campo graphs.
//
// One VariableStore holds both networks ("netG.*", "netD.*", see models/dcgan.h) and their
// optimizer state (Adam as the example, or SGD). It lives on the backend the session is given
// (--device): every buffer, kernel and copy of the session is that backend's, its steps, the
// cost-aware profiling step, the samples and the checkpoints (the host reads and writes only
// through its copies: VariableStore::read / write, Executable::feed / fetch). Three compiled
// graphs share the store:
//   D step  z -> fake = G(z) (training-mode BN; no gradient into G: only D's parameters are
//           differentiated, which is the example's fake.detach());
//           loss_D = mean BCE(D(x), 1) + mean BCE(D(fake), 0), both with logits
//           (SigmoidCrossEntropyWithLogits); the update of D's parameters only.
//   G step  loss_G = mean BCE(D(fake), 1) on the D step's fake, against the just-updated D;
//           the update of G's parameters only. D runs in training mode, so its BN running
//           statistics update here as in PyTorch.
//   samples G(fixed noise), 64 samples, in training mode like the example (which never
//           calls netG.eval()): BN normalises with the statistics of the fixed batch.
// Each graph has its own "lr" and "step" placeholders (append_optimizer looks them up by
// name in its graph). The three take turns in one arena (graph/executor.h, SharedArena).
//
// G's forward pass runs once per iteration, in the D step, as the example's
//   fake = netG(noise); ... netD(fake.detach()) ... optimizerD.step(); ... netD(fake)
// The G step still needs G's activations for G's backward pass, which autodiff builds from
// G's forward nodes, so the G step is built whole and then G's forward pass is cut out of it
// (without_generator_forward in the .cc): each value of G's forward pass that the rest of the
// step reads (fake itself, and what G's backward pass reads: the inputs of the transposed
// convolutions, the batch norms' inputs and batch statistics, the ReLU and tanh outputs)
// becomes a placeholder "saved/<node>" of the dtype the D step's precision plan gave that
// value. The D step fetches those values and step() copies them, and z, into the G step's
// placeholders on the device (Backend::copy) between the two runs. The precision policy
// (and cost-aware's profiling step) still sees the whole G step, and its decisions are
// replayed on the nodes that run, so that each keeps the precision it had next to G's
// forward pass (a plan of the cut graph alone would take the saved values, as every leaf,
// for f32 ones). The math is the two-graph step's that ran G's forward pass in both graphs
// on the same z: with plain layouts the same bits in fp32, amp and cost-aware
// (tests/train/gan_loss_pin_test.cc), with blocked layouts the same up to the rounding of
// G's forward pass on plain activations (below). G's BN running statistics now get one
// momentum update per iteration instead of two, as in PyTorch (they are never read: G is
// always evaluated in training mode).
// Why not one graph holding both updates: a graph's optimizer updates run last, after every
// read of the variables they write (graph/graph.h; the executor checks it, and the precision
// policies' shared casts and weight copies rely on it), and the G step must read D after
// D's update. What the hand-over costs: fetched values are stored plain (graph/layout.h),
// so G's forward pass runs on plain activations in the D step (each transposed convolution
// reorders its operands itself), the G step converts the saved values its blocked kernels
// read, the D step's arena holds them to its end, and step() copies them once.
//
// Images are rescaled to [-1, 1] (tanh's range): IDX data sets through mean 0.5 / std 0.5
// on [0, 1] pixels; the synthetic data set (roughly N(0, 1) pixels) through tanh.
// At the end of every epoch (and when --steps stops a run mid-epoch) G's samples of the
// fixed noise are written as an 8x8 grid PNG, samples_dir/epoch_NNN.png (1-based epoch),
// via a temporary file and a rename.
//
// Model arrays (train/model_array.h, HFTA-style fusion): a session of N models builds both
// networks arrayed (Builder::array_size: G maps z [B, N nz, 1, 1] to [B, N nc, S, S], D maps
// those to logits [B, N]); model i's losses are the batch means of its column of D's logits,
// each step graph differentiates the sum over the models (so each model's gradient is its
// own), and one update per variable applies each model's lr [N], weight decay and (sgd)
// momentum through OptimizerConfig slices (Adam's betas are shared). Every variable holds the
// N models' copies as N contiguous equal slices. Model i starts from exactly the weights a
// single session of seed_i starts from and draws exactly its noise (its own noise Rng, its
// z written into block i of z; its fixed sample noise likewise), so in fp32 it trains as
// that session would up to the summation order of the fused kernels
// (tests/train/gan_array_test.cc). With --array, train_gan writes one checkpoint per model
// (array_checkpoint_path: run.safetensors -> run-0.safetensors, ...; each a single
// session's checkpoint, which GanSession::restore reads) and one sample grid per model,
// samples_dir/epoch_NNN-<i>.png.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
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
#include "train/loop.h"
#include "train/model_array.h"
#include "train/options.h"
#include "train/prefetch.h"
#include "train/profiling.h"
#include "train/training_graph.h"

namespace campo {

// One model's results of an array run (train_gan fills one per model, also for a single run).
struct GanModelResult {
  double loss_d = 0, loss_g = 0, d_x = 0, d_g_z = 0;  // means over the last 50 steps
  std::vector<float> loss_d_history, loss_g_history;  // one entry per step
  std::vector<std::string> sample_files;              // PNGs written, in order
  std::string checkpoint;                             // with --save
};

struct GanResult {
  double loss_d = 0, loss_g = 0;  // means over the last 50 steps
  double d_x = 0, d_g_z = 0;      // mean D(x) and D(G(z)) (before D's update), last 50 steps
  double samples_per_sec = 0;     // real images per second through both steps (all models)
  double wall_seconds = 0;
  int64_t steps = 0;
  int64_t parameters_g = 0, parameters_d = 0;         // of one model
  std::vector<float> loss_d_history, loss_g_history;  // one entry per step
  std::vector<std::string> sample_files;              // PNGs written, in order
  // Every model's (one for a single run); the fields above are model 0's.
  std::vector<GanModelResult> models;
  std::optional<StepProfile> profile;  // --profile-out's (perf/profile_file.h writes it)
};

// campo train's options of a GAN run, beside validate's (check_training_options runs both,
// train_gan this and start_run validate): its data sets, image sizes, widths, precision and
// sample folder.
void check_gan_training_options(const TrainOptions& o);

// Trains o.model dcgan: on fashion-mnist, mnist or synthetic data, o.image_size 32 or 64
// (0: 64) pixels, o.channels 1 or 3 (0: 1), o.nz / ngf / ndf wide, Adam with the DCGAN
// paper's betas (0.5, 0.999) or SGD on both networks, the precision of o.precision and
// o.mixed on both step graphs (bf16 or fp32: no dynamic loss scaling), --array N models
// as one fused step (see the file comment). Sample grids go to o.samples_dir at each epoch
// end; checkpoints (one safetensors file, GanSession::save) at each epoch end, every
// o.checkpoint.save_every steps, on Ctrl-C and at the end; o.checkpoint.resume_path
// continues a run from one bit for bit. Progress goes to `log`, the final JSON line too.
// SIGINT or SIGTERM ends the run after the current step with Interrupted
// (train/interrupt.h), the checkpoint written first. A cost-aware run's calibration comes
// from `calibration`, as train()'s (train/trainer.h).
GanResult train_gan(const TrainOptions& o, std::ostream& log, bool log_is_terminal,
                    const CalibrationSource& calibration = {});

// The compiled graphs of one DCGAN run (see the file comment).
class GanSession final : public Session {
 public:
  struct StepStats {
    float loss_d = 0, loss_g = 0;
    float d_x = 0;     // mean D(x) on the real batch
    float d_g_z1 = 0;  // mean D(G(z)) in the D step (before D's update)
    float d_g_z2 = 0;  // mean D(G(z)) in the G step (after D's update)
  };

  // cost-aware: the costs of a step graph (by node id of the graph given, which has no
  // casts yet), instead of the profiling step's measurements of it; for plans that must not
  // depend on timings (tests). Null: each step graph is profiled.
  using StepCosts = std::function<CostTable(const Graph& step_graph)>;

  // Everything runs on `backend` (required; see the file comment). `precision` applies to
  // both step graphs through apply_policy (train/training_graph.h; cost-aware profiles each
  // step graph itself on `backend`, or takes `step_costs`' table of it), the sample graph
  // stays f32; dynamic loss scaling is not supported for GANs yet.
  GanSession(const DcganOptions& model, int64_t batch, const OptimizerConfig& optimizer,
             uint64_t seed, std::shared_ptr<Backend> backend, int64_t num_samples = 64,
             const PrecisionConfig& precision = {}, ConvLayout conv_layout = ConvLayout::blocked,
             const StepCosts& step_costs = nullptr);
  // A model array of h.size() models (see the file comment): `optimizer` gives what is
  // shared (kind, betas, nesterov), h each model's momentum, weight decay and seed (h.lr is
  // not used here: step() takes the rates; h.dropout must be 0). One model (h.size() 1) is
  // exactly the session above with optimizer.momentum / weight_decay = h's.
  GanSession(const DcganOptions& model, int64_t batch, OptimizerConfig optimizer,
             const ArrayHyperparameters& h, std::shared_ptr<Backend> backend,
             int64_t num_samples = 64, const PrecisionConfig& precision = {},
             ConvLayout conv_layout = ConvLayout::blocked, const StepCosts& step_costs = nullptr);
  // Nodes in low precision and casts over both step graphs.
  PrecisionSummary precision_summary() const override;
  ~GanSession();

  // One iteration: draws z ~ N(0, 1), runs the D step on (real, G(z)), hands G(z) and G's
  // activations to the G step, runs it. `real` is [batch, nc, S, S] in [-1, 1].
  StepStats step(const Tensor& real, float lr);
  // One iteration of every model: model i trains on real[i] ([batch, nc, S, S]; the N
  // pointers may all be the same batch) at lr[i], drawing its own z; its stats, in order.
  std::vector<StepStats> step(const std::vector<const Tensor*>& real, const std::vector<float>& lr);
  // Steps whose images were uploaded during the step before (train/prefetch.h).
  int64_t prefetched_steps() const { return prefetch_.landed(); }
  // G(fixed noise) [num_samples, nc, S, S] of a single session; a view valid until the
  // next call.
  Tensor generate_samples();
  // Every model's G(its fixed noise), [num_samples, nc, S, S] each, from one run of the
  // sample graph (a single session: one tensor).
  std::vector<Tensor> generate_model_samples();
  int size() const { return n_; }

  // Per-node timing of both step graphs, summed per op kind (name -> total ms, largest
  // first).
  void set_profiling(bool on) override;
  const OpProfile& profile() const override { return profile_; }
  MemoryReport memory() const override;
  std::vector<const Executable*> step_executables() const override {
    return {d_exe_.get(), g_exe_.get()};
  }
  const VariableStore& variables() const override { return vars_; }
  FlopCount step_flops() const override;      // the D step's and the G step's
  double predicted_step_ms() const override;  // cost-aware: the two plans'

  // As run_training drives it (train/loop.h): per model loss_D, loss_G, D(x) and D(G(z))
  // before and after D's update, on the batches' images; no evaluation, no loss scaling.
  int models() const override { return n_; }
  std::vector<StepValue> step_values() const override;
  std::vector<std::vector<float>> step_models(const std::vector<const Batch*>& batches,
                                              const std::vector<float>& lr,
                                              const std::vector<const Batch*>& next) override;
  std::vector<double> evaluate_models(DataLoader&) override { return {}; }
  const LossScaler* loss_scaler() const override { return nullptr; }

  VariableStore& variables() override { return vars_; }
  // The discriminator's step, then the generator's.
  std::vector<StepGraph> step_graphs() override;
  // Real images in [-1, 1] (the noise is drawn per step).
  Batch random_batch(Rng& rng) const override;
  Graph& d_graph() { return d_graph_; }
  // The G step as it runs: without G's forward pass, whose values it reads from placeholders
  // (saved_values) that the D step's values fill.
  Graph& g_graph() { return g_graph_; }
  // The statistics each step fetches (its live nodes are those these and the updates need;
  // the D step also fetches the saved values, which its live nodes compute anyway).
  std::vector<ValueId> d_fetches() const { return {loss_d_, d_x_, d_g_z1_}; }
  std::vector<ValueId> g_fetches() const { return {loss_g_, d_g_z2_}; }
  // The G step's placeholders of G's forward values, each with the value of the D step
  // graph that fills it (z excepted: the G step's "z" is the D step's).
  struct SavedValue {
    std::string placeholder;
    ValueId source = kNoValue;
  };
  const std::vector<SavedValue>& saved_values() const { return saved_; }
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
  // A single session only (an array: restore each model's checkpoint into a single one).
  Position restore(const std::string& path, const std::string& optimizer);
  // Model i alone as a single session's checkpoint (netG.* / netD.* with the single
  // shapes, its optimizer state, its noise state; metadata array_index, array_size and its
  // hyperparameters): a single GanSession of the same options restores it and continues as
  // model i would. save() is save_model(0, ...) for one model.
  void save_model(int i, const std::string& path, int64_t epoch, int64_t position_in_epoch,
                  const std::string& optimizer) override;
  // Model i's copy of a variable, with the single model's shape.
  Tensor read_model_variable(int i, const std::string& name) const;
  // Of one model.
  int64_t generator_parameters() const;
  int64_t discriminator_parameters() const;

 private:
  // step(real, lr) whose images are `key`'s, uploaded during the step before when they were
  // `next` then; starts uploading `next`'s once the D step is launched.
  std::vector<StepStats> step(const std::vector<const Tensor*>& real, const std::vector<float>& lr,
                              const std::vector<const Batch*>& key,
                              const std::vector<const Batch*>& next);

  DcganOptions model_;
  int64_t batch_;
  int n_ = 1;
  ArrayHyperparameters hyper_;
  VariableStore vars_;
  std::vector<Rng> noise_rngs_;  // one per model, seeded as a single session of its seed
  ArraySlices slices_;           // arrays: the per-model view of vars_
  Graph d_graph_, g_graph_, sample_graph_;
  ValueId loss_d_ = kNoValue, d_x_ = kNoValue, d_g_z1_ = kNoValue;
  ValueId loss_g_ = kNoValue, d_g_z2_ = kNoValue, samples_ = kNoValue;
  std::vector<SavedValue> saved_;
  std::unique_ptr<Executable> d_exe_, g_exe_, sample_exe_;
  InputPrefetch prefetch_{vars_.backend()};  // the D step's images (train/prefetch.h)
  // What step() copies from the D step into the G step after the D step runs (besides z):
  // (G step placeholder, D step value) pairs, the saved values.
  std::vector<std::pair<Tensor, ValueId>> handoff_;
  PolicyResult d_policy_, g_policy_;
  std::shared_ptr<const CostTable> d_costs_, g_costs_;
  int64_t iterations_ = 0;
  OpProfile profile_;
};

// Step costs that hand out `costs` in step order (the D step's, then the G step's): a plan
// decided once, given again to another session. Empty: null (each step graph profiled).
GanSession::StepCosts given_step_costs(std::vector<std::shared_ptr<const CostTable>> costs);

}  // namespace campo
