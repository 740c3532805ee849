// The options of the one training loop (train/loop.h) and what it returns: the learning-rate
// schedule, checkpoints and where a resumed run continues, what a run shows and records
// (--progress, --profile, --metrics, --tensorboard), model arrays' lists, and each option's
// parse and check.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "datasets/dataset.h"
#include "graph/optimizer.h"
#include "runtime/numerics.h"

namespace campo {

class Backend;
class Communicator;

// The learning-rate schedule (--lr-schedule and the options that shape it).
struct LrSchedule {
  enum class Kind { constant, step, cosine };
  Kind kind = Kind::cosine;
  int step_epochs = 30;  // step: multiply by gamma every N epochs
  float gamma = 0.1f;
  int64_t warmup_steps = 0;  // linear warm-up from 0 over the first N steps
};
// "constant", "step" or "cosine"; one error line naming --lr-schedule otherwise.
LrSchedule::Kind parse_lr_schedule(const std::string& text);
const char* lr_schedule_name(LrSchedule::Kind kind);
// Checks the schedule's numbers (one error line naming the option).
void validate(const LrSchedule& s);
// The learning rate at (0-based) `step` of `total_steps`, `steps_per_epoch` per epoch, for
// a base rate `lr`.
float learning_rate_at(const LrSchedule& s, float lr, int64_t step, int64_t total_steps,
                       int64_t steps_per_epoch);

// Where a resumed run continues: the epoch and the batch within it of a checkpoint's
// position (an epoch's end is the next epoch's start). Checks, naming the checkpoint
// `path`, that the position lies within this run (`epochs` epochs of `per_epoch` batches)
// and that its `steps` plus the `skipped_steps` of the loss scaler do not exceed the
// batches the position accounts for.
struct ResumePoint {
  int epoch = 0;
  int64_t batch = 0;
};
ResumePoint resume_point(const std::string& path, int64_t epoch, int64_t position_in_epoch,
                         int64_t steps, int64_t skipped_steps, int64_t per_epoch, int epochs);

// --save, --save-every, --resume.
struct CheckpointOptions {
  // Written at each epoch end, every save_every steps, on Ctrl-C and at the end (a model
  // array: one file per model, array_checkpoint_path).
  std::string save_path;
  int64_t save_every = 0;   // 0: epoch ends only
  std::string resume_path;  // continue a run from this checkpoint
};
// --save-every needs --save; the checkpoint can be written, the one to resume read.
void validate(const CheckpointOptions& c);

// --progress: a bar on a terminal and log lines otherwise (automatic), either, or nothing.
enum class Progress { automatic, bar, lines, none };
// "auto", "bar", "lines" or "none"; one error line naming --progress otherwise.
Progress parse_progress(const std::string& text);

// What a run shows and records as it goes.
struct ReportOptions {
  Progress progress = Progress::automatic;
  bool profile = false;     // time every node; print the time per op at the end
  std::string profile_out;  // time every node; write the per-node profile here (JSON)
  // Training curves (train/metrics_log.h), at the steps of the progress lines: --metrics
  // writes one JSON line per logged step and evaluation; --tensorboard an event file.
  std::string metrics_path, tensorboard_dir;
  // --numerics (runtime/numerics.h): what the casts to narrow formats lose, recorded into
  // --metrics and --tensorboard at every numerics_every-th step and the last.
  NumericsScope numerics = NumericsScope::off;
  int64_t numerics_every = 10;
};
// --metrics and --tensorboard can be written; --numerics has one of them to write into.
void validate(const ReportOptions& r);
// Whether step `step` (1-based: the steps done once it has run) of a run of `total` records
// --numerics: every numerics_every-th and the last.
bool records_numerics(const ReportOptions& r, int64_t step, int64_t total);

// shared: every model of an array sees the same batches (the first seed's order, as in
// HFTA); independent: model i its own order from its seed, as a single run with that seed.
enum class ArrayShuffle { shared, independent };
// "shared" or "independent"; one error line naming --array-shuffle otherwise.
ArrayShuffle parse_array_shuffle(const std::string& text);
const char* array_shuffle_name(ArrayShuffle s);

// --array N: N copies of a model trained as one fused step (train/model_array.h); the lists
// give each model's value (N of them; empty: the scalar option for every model).
struct ArrayOptions {
  int size = 0;  // N >= 2; 0 or 1: a single model
  std::vector<float> lr, momentum, weight_decay, dropout;
  std::vector<uint64_t> seed;
  ArrayShuffle shuffle = ArrayShuffle::shared;
};
// The size, each list's length and values (as the scalar option's are checked), what the
// model and the optimizer make of them, and that an array is not resumed.
void validate(const ArrayOptions& a, const std::string& model, OptimizerConfig::Kind optimizer,
              bool resume);

// What a restored checkpoint says of its run.
struct Resumed {
  std::string path;
  int64_t epoch = 0, position_in_epoch = 0;
  int64_t steps = 0;          // updates applied
  int64_t skipped_steps = 0;  // batches whose update the loss scaler skipped
};

struct TrainingLoopOptions {
  // Training data: one data set (every model sees the same batches) or one per model, each
  // shuffled with its seed.
  std::vector<std::shared_ptr<const Dataset>> train;
  std::vector<uint64_t> shuffle_seeds;
  std::shared_ptr<const Dataset> test;  // null: no evaluation
  int64_t eval_batch = 500;
  int64_t batch = 64;  // per model
  int epochs = 1;
  int64_t max_steps = 0;  // 0: full epochs
  std::vector<float> lr;  // each model's base rate
  LrSchedule schedule;
  std::string optimizer;  // the name checkpoints record
  CheckpointOptions checkpoint;
  std::function<std::string(int model)> checkpoint_path;  // model i's (one model: save_path)
  std::optional<Resumed> resumed;                         // read from checkpoint.resume_path
  ReportOptions report;
  bool log_is_terminal = false;  // --progress auto: a bar
  // Recent steps averaged on the progress line.
  int display_window = 50;
  // The banner: "campo: training <what> on <data>, ..., precision <precision>[, <shuffle>]".
  std::string what;
  PrecisionConfig precision_config;
  bool per_model_batch = false;               // "batch B per model"
  std::optional<ArrayShuffle> array_shuffle;  // arrays
  // After each epoch's last step (DCGAN: its sample grids).
  std::function<void(int epoch)> end_of_epoch;
  // The evaluation's words: "test accuracy", "samples of" (BERT: masked tokens of sequences).
  std::string accuracy_label = "test accuracy", eval_unit = "samples of";
  // The JSON result: what only this kind of run reports, and each model's own fields (its
  // hyperparameters in an array, in the order of its summary line; DCGAN's sample file).
  nlohmann::json result;
  std::function<nlohmann::ordered_json(int model)> model_fields;
  std::vector<std::string> model_line_fields;  // model_fields shown on its summary line
  // --data-parallel (train/data_parallel.h): this rank's shard of every batch and of the
  // evaluation; only rank 0 writes (checkpoints, --metrics, --tensorboard: give the others a
  // log that goes nowhere); a signal on any rank stops every rank after the same step.
  // Null: one process.
  std::shared_ptr<Communicator> ranks;
  // --numerics: the recorder the session's step kernels write into (watching its tensors); the
  // loop arms it for the steps that record (records_numerics). Null: off.
  std::shared_ptr<NumericsRecorder> numerics;
};

// What --profile-out records of a run, measured by run_training and written by its caller
// (perf/profile_file.h, which adds the machine): the run's own JSON fields (model, data
// set, parameters, ...), its policy and batch, the device report's fields, and every node's
// time over the `steps` profiled steps (train/profiling.h's profile_nodes_json).
struct StepProfile {
  nlohmann::json run, device, nodes;
  Precision precision = Precision::fp32;
  int64_t batch = 0, steps = 0;
  std::shared_ptr<Backend> backend;
};

struct TrainingLoopResult {
  int64_t steps = 0;
  double samples_per_sec = 0;                           // every model's
  double wall_seconds = 0;                              // of the whole run (`wall`)
  std::vector<std::vector<std::vector<float>>> values;  // [model][value][step] (this run)
  std::vector<std::vector<double>> final_values;        // [model][value]: last 50 steps' mean
  std::vector<double> test_accuracy;                    // per model; empty without evaluation
  std::vector<std::string> checkpoints;                 // per model, with --save
  std::optional<StepProfile> profile;                   // with --profile-out
};

}  // namespace campo
