// The options of `campo train` (every kind of run: a classifier, BERT, a model array, DCGAN)
// and what every run does with them alike before its data and session: the checks, the
// backend of --device, the ranks, --threads, each model's hyperparameters, and what the
// training loop (train/loop.h) takes straight from them. The sessions (train/trainer.h,
// train/gan_trainer.h) build on this; nothing here knows a session.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include "amp/calibration.h"
#include "amp/policy.h"
#include "graph/layout.h"
#include "graph/optimizer.h"
#include "runtime/backend.h"
#include "runtime/memory_info.h"
#include "train/data_parallel.h"
#include "train/loop_options.h"
#include "train/model_array.h"
#include "train/training_graph.h"

namespace campo {

// What every command that builds a model shares (campo train, eval, graph, plan, bench):
// the model, the shape of its input, its seed and where it runs. TrainOptions, EvalOptions
// (train/trainer.h) and ModelRunOptions (perf/model_run.h) are this and their own fields;
// their constructors set the defaults that differ (eval's batch, plan's 28x28x1 input).
struct CommonOptions {
  std::string model = "lenet";
  int64_t batch = 64;
  int image_size = 0;  // square input size (0: the data set's own)
  int channels = 0;    // 1 or 3 (0: the data set's own)
  uint64_t seed = 42;
  int seq_len = 128;   // text: tokens per sequence, [CLS] and [SEP] included
  DeviceSpec device;   // --device cpu | cuda[:N] | cpu:strict, parsed by the CLI
  CudaGraphMode cuda_graph = CudaGraphMode::automatic;  // --cuda-graph auto | on | off
};

struct TrainOptions : CommonOptions {
  std::string dataset = "fashion-mnist";
  std::string data_dir;
  int epochs = 1;
  int64_t max_steps = 0;  // 0: full epochs; else stop after this many steps
  int64_t eval_batch = 500;
  float lr = 0.05f;
  LrSchedule schedule;  // --lr-schedule (cosine: decay to 0 over the run) and its shape
  OptimizerConfig::Kind optimizer = OptimizerConfig::Kind::sgd;  // --optimizer sgd | adam
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  // One optimizer update node for all parameters (OptimizerConfig::multi_tensor);
  // --no-multi-tensor-updates: one per parameter, as before (the same bits).
  bool multi_tensor_updates = true;
  // Pure low-precision training (OptimizerConfig's storage types): --master-weights f32 |
  // none (bf16 weights without f32 master copies), --optimizer-state f32 | bf16, and
  // --weight-rounding nearest | stochastic for what the updates store in bf16 ("": not
  // given, stochastic; refused when nothing is stored in bf16).
  std::string master_weights = "f32";
  std::string optimizer_state = "f32";
  std::string weight_rounding;
  float dropout = 0.0f;
  int64_t train_limit = 0;                      // use only the first N training samples (0: all)
  int64_t test_limit = 0;                       // evaluate on the first N test samples (0: all)
  int threads = 0;                              // 0: OpenMP default
  Precision precision = Precision::cost_aware;  // --precision fp32 | amp | cost-aware
  // cost-aware: --calibration, the file; "" = this machine's (found, or a quick automatic
  // calibration first); "none" = no calibration, the profiling step times both precisions
  // instead. Read by the CalibrationSource the CLI hands to train() (below).
  std::string calibration;
  PrecisionOptions mixed;        // --low-precision, --loss-scale*, --amp-lists*, --search, ...
  CheckpointOptions checkpoint;  // --save, --save-every, --resume (safetensors)
  ReportOptions report;          // --progress, --profile, --metrics, --tensorboard
  bool deterministic = false;  // --deterministic: Backend::set_deterministic
  // Image folders and CIFAR-10 (see datasets/registry.h).
  std::optional<bool> augment;  // --augment: auto (unset: the train split only) | on | off
  int resize = 0;               // shorter side before cropping (0: --image-size)
  int padding = -1;             // random-crop border (-1: the data set's default)
  bool skip_bad = false;        // leave out images whose header cannot be read
  double holdout = 0;           // folder without a test folder: fraction held out for test
  // bert on text data sets (see datasets/registry.h's text:PATH).
  std::string bert_config = "mini";  // tiny | mini | small | medium | base
  int vocab_size = 8000;             // of the vocabulary trained on the text
  std::string vocab_path;            // a saved vocabulary instead of training one
  std::string save_vocab_path;       // write the vocabulary used
  float mask_prob = 0.15f;           // tokens chosen for prediction (BERT's 80/10/10)
  // --conv-layout: blocked activations between convolutions (graph/layout.h) or plain.
  ConvLayout conv_layout = ConvLayout::blocked;
  ArrayOptions array;  // --array N and the per-model lists of --lr, ..., --seed
  // dcgan (train/gan_trainer.h): its widths (the noise, G's and D's feature maps: the DCGAN
  // paper's 100, 64, 64) and where its sample grids go ("": none). Its images are 64 px
  // unless image_size says 32, grey unless channels says 3.
  int nz = 100, ngf = 64, ndf = 64;
  std::string samples_dir = "samples";
  // --data-parallel under mpirun (train/data_parallel.h): --batch is each rank's.
  DataParallelOptions data_parallel;
  // cost-aware: time the chosen plan against fp32's and amp's before training and run the
  // fastest (train/policy_guard.h); --no-guard trusts the plan.
  bool guard = true;
};

// --augment's names: auto (nullopt), on, off; one error line for any other.
std::optional<bool> parse_augment(const std::string& text);

// The options campo train uses for `model` when the command line gives nothing else: the
// defaults above with the model's recipe (models.h's training_defaults) applied.
TrainOptions training_options_for(const std::string& model);
// The run's precision configuration (checks the options). Leaves the calibration out.
PrecisionConfig precision_config(const TrainOptions& o);
// What a DCGAN session cannot do yet (--low-precision auto under cost-aware, dynamic loss
// scaling), checked by the session and, before any work, by validate.
void check_gan_precision(const PrecisionConfig& p);
// A token model trains on a text data set and only there.
void check_model_fits_data(const std::string& model, const std::string& dataset);
// --master-weights, --optimizer-state and --weight-rounding: each name, and the
// combinations a run can do (one error line for each that it cannot).
void check_storage_options(const TrainOptions& o);
// The optimizer of the options: sgd or adam, momentum, nesterov, weight decay, the types
// the weights and the state are stored in and how the updates round them.
OptimizerConfig optimizer_config(const TrainOptions& o);
// What every campo train run (a classifier, BERT, a model array, DCGAN) sets up alike
// before its data and session, in this order: the options checked; the backend of --device,
// made before any work so a device this build or machine lacks is its one error line; with
// --data-parallel the ranks (only rank 0's log shows anything); --threads; each model's
// hyperparameters (--array's lists).
struct RunStart {
  std::shared_ptr<Backend> backend;
  std::shared_ptr<Communicator> ranks;  // null: one process
  std::ostream* log = nullptr;          // the run's log on rank 0, nowhere on the others
  ArrayHyperparameters h;
};
RunStart start_run(const TrainOptions& o, std::ostream& log);
// What the training loop (train/loop.h) takes straight from the options and the start:
// batch sizes, epochs, steps, schedule, checkpoints (one per model), progress, --metrics,
// --tensorboard, --profile, each model's rate, the ranks and an array's batches and fields.
TrainingLoopOptions loop_options(const TrainOptions& o, const RunStart& run,
                                 const PrecisionConfig& precision, bool log_is_terminal);

// Checks the options (one clear campo::Error per problem) before anything is loaded,
// including that --save can be written and --resume read.
void validate(const TrainOptions& o);
// The executor's MemoryShortfall (runtime/memory_info.h) of a run at --batch `batch` as one
// error line that also says about which batch would fit.
[[noreturn]] void fail_with_batch_advice(const MemoryShortfall& e, int64_t batch);
// What `build` returns (a run's session, built in place), its MemoryShortfall turned into
// fail_with_batch_advice's line.
template <typename Build>
decltype(auto) build_with_batch_advice(int64_t batch, Build&& build) {
  try {
    return build();
  } catch (const MemoryShortfall& e) {
    fail_with_batch_advice(e, batch);
  }
}
// --threads: 0 (all cores) up to a few times this machine's logical cores.
void check_threads(int threads);
// The backend of --device, made once per run: the default CPU backend for cpu (so a run
// shares its oneDNN engine with everything else on the CPU), else make_backend's (its one
// error line where this build or machine lacks the device), set to --cuda-graph (one error
// line for `on` where the device cannot capture a step) and to --deterministic (every run
// sets it, so the shared CPU backend carries no earlier run's).
std::shared_ptr<Backend> backend_for(const DeviceSpec& device, CudaGraphMode cuda_graph,
                                     bool deterministic);
// Where a cost-aware run's calibration comes from once the run's backend is made: the CLI
// hands in the one lookup every subcommand uses (perf/calibration_store.h's
// resolve_calibration of --calibration), which says on `log` what it found or ran. Null, or
// one that returns null: no calibration, the profiling step times both precisions (as
// --calibration none). Other policies never call it.
using CalibrationSource =
    std::function<std::shared_ptr<const Calibration>(const Backend&, DType low, std::ostream& log)>;
// p.calibration from `source` for a cost-aware run on `backend`; other policies: unchanged.
void attach_calibration(PrecisionConfig& p, const CalibrationSource& source, const Backend& backend,
                        std::ostream& log);

}  // namespace campo
