// `campo train`: train a model (any kind: a classifier, BERT, DCGAN, a model array), evaluate
// it and print its JSON result; --profile-out's profile is written here (perf/predict.h).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <iostream>
#include <optional>
#include <type_traits>
#include <vector>

#include "datasets/registry.h"
#include "models/models.h"
#include "perf/calibration_store.h"
#include "perf/predict.h"
#include "runtime/check.h"
#include "runtime/path_check.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "train/make_session.h"
#include "train/model_array.h"
#include "train/options.h"
#include "train/trainer.h"

namespace campo::cli {

namespace {

// campo train's options that are read once the command line is: --lr, --momentum,
// --weight-decay, --dropout and --seed as typed (one value, or with --array N a
// comma-separated list of N values, one per model), and the names of its choices, each
// parsed into its enumeration next to its type (parse_lr_schedule, parse_optimizer, ...).
struct TrainAsTyped {
  std::string lr, momentum, weight_decay, dropout, seed;
  std::string schedule = "cosine", optimizer = "sgd", array_shuffle = "shared", progress = "auto",
              augment = "auto", precision = "cost-aware";
  std::string numerics;  // "" when given bare: quantized
};

// The values of a list option ("0.1,0.05,0.01"); one error line naming the option otherwise.
template <typename T>
std::vector<T> parse_values(const char* option, const std::string& text) {
  std::vector<T> out;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string piece = text.substr(begin, end - begin);
    T value{};
    auto [ptr, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), value);
    CAMPO_CHECK(!piece.empty() && ec == std::errc() && ptr == piece.data() + piece.size(), option,
                " expects ", std::is_integral_v<T> ? "a whole number from 0 to 2^64-1" : "a number",
                " or a comma-separated list of them (one per --array model), got '", text, "'");
    out.push_back(value);
    if (end == text.size()) break;
    begin = end + 1;
  }
  return out;
}

// Sets each given list option: one value into the scalar, several into the per-model list.
void apply_per_model_lists(const CLI::App* cmd, const TrainAsTyped& l, TrainOptions& o) {
  auto apply = [&](const char* option, const std::string& text, auto& scalar, auto& list) {
    if (!given(cmd, option)) return;
    using T = std::decay_t<decltype(scalar)>;
    std::vector<T> values = parse_values<T>(option, text);
    if (values.size() == 1)
      scalar = values[0];
    else
      list = std::move(values);
  };
  apply("--lr", l.lr, o.lr, o.array.lr);
  apply("--momentum", l.momentum, o.momentum, o.array.momentum);
  apply("--weight-decay", l.weight_decay, o.weight_decay, o.array.weight_decay);
  apply("--dropout", l.dropout, o.dropout, o.array.dropout);
  apply("--seed", l.seed, o.seed, o.array.seed);
}

void add_train_options(CLI::App* cmd, TrainOptions& o, std::string& device, TrainAsTyped& lists) {
  cmd->add_option("--model", o.model, "Model: " + join(model_names()))->capture_default_str();
  cmd->add_option("--dataset", o.dataset, "Data set: " + join(dataset_names()))
      ->capture_default_str();
  cmd->add_option("--data-dir", o.data_dir, "Directory of the data set's files")->check(kPath);
  cmd->add_option("--epochs", o.epochs, "Passes over the training set")->capture_default_str();
  cmd->add_option("--steps", o.max_steps, "Stop after this many steps (0: full epochs)")
      ->capture_default_str();
  cmd->add_option("--batch", o.batch, "Training batch size")->capture_default_str();
  cmd->add_option("--eval-batch", o.eval_batch, "Evaluation batch size")->capture_default_str();
  lists.lr = "0.05";
  cmd->add_option("--lr", lists.lr,
                  "Learning rate (when not given: vgg16, alexnet, inception_v3 0.01; bert 5e-4; "
                  "dcgan 2e-4); with --array N, a list of N")
      ->capture_default_str();
  cmd->add_option("--lr-schedule", lists.schedule,
                  "constant, step or cosine (when not given: dcgan constant)")
      ->capture_default_str();
  cmd->add_option("--lr-step-epochs", o.schedule.step_epochs, "step schedule: decay every N epochs")
      ->capture_default_str();
  cmd->add_option("--lr-gamma", o.schedule.gamma, "step schedule: decay factor")
      ->capture_default_str();
  cmd->add_option("--warmup-steps", o.schedule.warmup_steps, "Linear learning-rate warm-up steps")
      ->capture_default_str();
  cmd->add_option("--optimizer", lists.optimizer,
                  "sgd (with momentum) or adam (when not given: bert adam; dcgan adam, beta1 0.5)")
      ->capture_default_str();
  lists.momentum = "0.9";
  cmd->add_option("--momentum", lists.momentum, "SGD momentum; with --array N, a list of N")
      ->capture_default_str();
  cmd->add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  cmd->add_flag("--no-multi-tensor-updates{false}", o.multi_tensor_updates,
                "One optimizer update node (and GPU kernel launch) per parameter instead of one "
                "for all parameters (the same results)");
  cmd->add_option("--master-weights", o.master_weights,
                  "f32 (f32 weights, low-precision copies where ops run low) or none (bf16 "
                  "weights without f32 master copies: pure bf16 training; --device cpu)")
      ->capture_default_str();
  cmd->add_option("--optimizer-state", o.optimizer_state,
                  "Type of the optimizer state (momentum, Adam's moments): f32 or bf16")
      ->capture_default_str();
  cmd->add_option("--weight-rounding", o.weight_rounding,
                  "How the optimizer rounds what it stores in bf16 (--master-weights none, "
                  "--optimizer-state bf16): stochastic (default) or nearest (even)");
  lists.weight_decay = "0";
  cmd->add_option("--weight-decay", lists.weight_decay,
                  "L2 weight decay; with --array N, a list of N")
      ->capture_default_str();
  lists.dropout = "0";
  cmd->add_option("--dropout", lists.dropout,
                  "Dropout rate (mlp; bert, default 0.1); with --array N, a list of N")
      ->capture_default_str();
  lists.seed = "42";
  cmd->add_option("--seed", lists.seed,
                  "Random seed (weights, shuffling, dropout); with --array N, a list of N")
      ->capture_default_str();
  cmd->add_option("--array", o.array.size,
                  "Train N copies of the model as one fused step (a model array); --lr, "
                  "--momentum, --weight-decay, --dropout and --seed may list one value per model")
      ->capture_default_str();
  cmd->add_option("--array-shuffle", lists.array_shuffle,
                  "--array: shared (every model sees the same batches, in the first seed's "
                  "order) or independent (each model its own seed's order)")
      ->capture_default_str();
  cmd->add_option("--limit-train", o.train_limit, "Use only the first N training samples");
  cmd->add_option("--limit-test", o.test_limit, "Evaluate on the first N test samples");
  cmd->add_option("--progress", lists.progress,
                  "auto (a bar on a terminal, log lines otherwise), bar, lines or none")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--profile", o.report.profile, "Time every node; print the time per op at the end");
  cmd->add_option("--profile-out", o.report.profile_out,
                  "Time every node; write each node's op, shapes, FLOPs, bytes and time per "
                  "step to this JSON file at the end (campo predict reads it)")
      ->check(kPath);
  add_device_option(cmd, device);
  cmd->add_option("--augment", lists.augment,
                  "cifar10/folders: random crop + flip: auto (training split), on, off")
      ->capture_default_str();
  cmd->add_option("--resize", o.resize, "cifar10/folders: shorter side before cropping");
  cmd->add_option("--padding", o.padding, "cifar10/folders: random-crop border");
  cmd->add_flag("--skip-bad", o.skip_bad,
                "folders: warn about and leave out images whose header cannot be read");
  cmd->add_option("--holdout", o.holdout,
                  "folders without a test folder: fraction of each class held out for test");
  cmd->add_option("--bert-config", o.bert_config, "bert: tiny, mini, small, medium or base")
      ->capture_default_str();
  cmd->add_option("--seq-len", o.seq_len, "text: tokens per sequence ([CLS] and [SEP] included)")
      ->capture_default_str();
  cmd->add_option("--vocab-size", o.vocab_size, "text: size of the vocabulary trained on the text")
      ->capture_default_str();
  cmd->add_option("--vocab", o.vocab_path, "text: a saved vocabulary (--save-vocab) to use")
      ->check(kPath);
  cmd->add_option("--save-vocab", o.save_vocab_path, "text: write the vocabulary used here")
      ->check(kPath);
  cmd->add_option("--mask-prob", o.mask_prob, "text: fraction of tokens to predict (80/10/10)")
      ->capture_default_str();
  cmd->add_option("--save", o.checkpoint.save_path,
                  "Write a safetensors checkpoint at each epoch end and at the end")
      ->check(kPath);
  cmd->add_option("--save-every", o.checkpoint.save_every, "Also checkpoint every N steps");
  cmd->add_option("--resume", o.checkpoint.resume_path, "Continue training from a checkpoint")
      ->check(kPath);
  cmd->add_option("--metrics", o.report.metrics_path,
                  "Write the training curve as JSON lines (loss, lr, loss scale, samples/s at "
                  "the progress lines' steps; the test accuracy), flushed as the run goes")
      ->check(kPath);
  cmd->add_option("--tensorboard", o.report.tensorboard_dir,
                  "Write the same scalars as a TensorBoard event file into this directory")
      ->check(kPath);
  cmd->add_option("--numerics", lists.numerics,
                  "Record into --metrics and --tensorboard what casts to narrow formats lose "
                  "(amax, scale, underflow, saturation, overflow, NaN/inf): quantized (the "
                  "default when given bare: every FP8/MX GEMM operand) or all (also every "
                  "f16/bf16 tensor a Cast of the step produces)")
      ->expected(0, 1);
  cmd->add_option("--numerics-every", o.report.numerics_every,
                  "--numerics: record every N steps (and the last)")
      ->capture_default_str();
  cmd->add_option("--image-size", o.image_size, "Resize images to this square size (0: native)");
  cmd->add_option("--channels", o.channels, "Image channels, 1 or 3 (0: the data set's own)");
  cmd->add_option("--precision", lists.precision,
                  "cost-aware (Campo), amp (TensorFlow's list-based rewrite) or fp32")
      ->capture_default_str();
  cmd->add_option("--calibration", o.calibration,
                  "cost-aware: calibration file (default: this machine's, or a quick automatic "
                  "calibration first; none: time both precisions in the profiling step)")
      ->check(kPath);
  cmd->add_option("--search", o.mixed.search,
                  "cost-aware: exact (the four traversals, then the least predicted step time "
                  "found exactly by a minimum cut) or traversals (the paper's four alone)")
      ->capture_default_str();
  cmd->add_flag("--no-guard{false}", o.guard,
                "cost-aware: trust the plan; by default its step is first timed against fp32's "
                "and amp's, interleaved, and the run takes the fastest (the guard)");
  cmd->add_flag("--no-fold-casts{false}", o.mixed.fold_casts,
                "cost-aware: insert weight and weight-gradient casts as Cast nodes, as amp does "
                "(by default bf16 Conv2DBackpropFilter writes its f32 result itself and the "
                "optimizer keeps bf16 weight copies)");
  cmd->add_option(
      "--low-precision", o.mixed.low_precision,
      "Low-precision type: bf16, fp16 or auto (cost-aware chooses f32, f16 or bf16 per node; "
      "amp paints bf16) (default: bf16 on cpu, fp16 on cuda; dcgan bf16)");
  cmd->add_option(
         "--loss-scale", o.mixed.loss_scale,
         "auto (dynamic for fp16 and for cost-aware's auto, none for bf16), dynamic or none")
      ->capture_default_str();
  cmd->add_option("--loss-scale-init", o.mixed.loss_scale_init, "Initial dynamic loss scale")
      ->capture_default_str();
  cmd->add_option("--loss-scale-growth-interval", o.mixed.loss_scale_growth_interval,
                  "Clean steps before the loss scale doubles")
      ->capture_default_str();
  cmd->add_option("--amp-lists", o.mixed.amp_lists_edit,
                  "Edit the mixed-precision lists: 'allow+=Tanh;clear-=Relu'");
  cmd->add_option("--amp-lists-file", o.mixed.amp_lists_file,
                  "JSON file of list edits: {\"allow\": {\"add\": [...], \"remove\": [...]}}")
      ->check(kPath);
  cmd->add_option("--precision-policy", o.mixed.precision_policy_file, kPrecisionPolicyHelp)
      ->check(kPath);
  check_int64(cmd, {"--steps", "--batch", "--eval-batch", "--warmup-steps", "--limit-train",
                    "--limit-test", "--save-every", "--numerics-every"});
}

// The model's own recipe (models.h's training_defaults) for what the command line leaves
// out: VGG-16, AlexNet and Inception-v3 at lr 0.01; bert with Adam, warm-up and dropout;
// dcgan with Adam at a constant 2e-4.
void apply_training_defaults(const CLI::App* cmd, TrainOptions& o) {
  if (!is_known_model(o.model)) return;  // unknown names fail in validate
  const TrainingDefaults d = training_defaults(o.model);
  if (d.lr_schedule && !given(cmd, "--lr-schedule"))
    o.schedule.kind = parse_lr_schedule(*d.lr_schedule);
  if (d.lr && !given(cmd, "--lr")) o.lr = *d.lr;
  if (d.optimizer && !given(cmd, "--optimizer")) o.optimizer = *d.optimizer;
  if (d.warmup_steps && !given(cmd, "--warmup-steps")) o.schedule.warmup_steps = *d.warmup_steps;
  if (d.dropout && !given(cmd, "--dropout")) o.dropout = *d.dropout;
}

// campo train's calibration source (train/options.h): --calibration resolved on the run's
// backend once it is made, and the line naming the file used.
CalibrationSource train_calibration(const std::string& calibration) {
  return [calibration](const Backend& backend, DType low, std::ostream& log) {
    std::string path;
    std::shared_ptr<const Calibration> cal =
        resolve_calibration(calibration, backend, low, log, &path);
    if (cal) log << "campo: calibration " << path << "\n";
    return cal;
  };
}

// Every path campo train reads and writes, for the one check that no output lands on an
// input or on another output (runtime/path_check.h). --save may replace the --resume
// checkpoint: a run continued in place.
std::vector<PathUse> train_paths(const TrainOptions& o) {
  using K = PathUse::Kind;
  std::vector<PathUse> p = {
      {"--resume", o.checkpoint.resume_path, K::input_file},
      {"--vocab", o.vocab_path, K::input_file},
      {"--amp-lists-file", o.mixed.amp_lists_file, K::input_file},
      {"--precision-policy", o.mixed.precision_policy_file, K::input_file},
      {"--data-dir", o.data_dir, o.dataset == "text" ? K::input_file : K::input_directory}};
  if (o.calibration != "none") p.push_back({"--calibration", o.calibration, K::input_file});
  if (o.dataset.rfind("text:", 0) == 0)
    p.push_back({"--dataset", o.dataset.substr(5), K::input_file});
  if (o.dataset.rfind("folder:", 0) == 0)
    p.push_back({"--dataset", o.dataset.substr(7), K::input_directory});
  const std::string& save = o.checkpoint.save_path;
  if (!save.empty())
    for (int i = 0; i < std::max(1, o.array.size); ++i)
      p.push_back({"--save", o.array.size > 1 ? array_checkpoint_path(save, i) : save,
                   K::output_file, "--resume"});
  p.push_back({"--profile-out", o.report.profile_out, K::output_file});
  p.push_back({"--metrics", o.report.metrics_path, K::output_file});
  p.push_back({"--save-vocab", o.save_vocab_path, K::output_file});
  p.push_back({"--tensorboard", o.report.tensorboard_dir, K::output_directory});
  if (!has_accuracy(o.model))  // a GAN's sample grids
    p.push_back({"--samples-dir", o.samples_dir, K::output_directory});
  return p;
}

}  // namespace

const std::vector<OptionScope>& train_option_scopes() {
  static const std::vector<OptionScope> table = {
      {"--eval-batch", kClassifier | kMaskedLm, kAllData,
       "applies to models with an evaluation (dcgan has none)"},
      {"--limit-test", kClassifier | kMaskedLm, kAllData,
       "applies to models with an evaluation (dcgan has none)"},
      {"--data-dir", kAllModels, kAllData & ~kSynthetic,
       "has no effect with --dataset synthetic (it reads no files)"},
      {"--image-size", kClassifier | kGan, kAllData & ~kText,
       "applies to image models and data sets (bert reads --seq-len tokens)"},
      {"--channels", kClassifier | kGan, kAllData & ~kText,
       "applies to image models and data sets (bert reads --seq-len tokens)"},
      {"--augment", kClassifier, kCifar | kFolder,
       "applies to cifar10 and folder data sets (the others are not augmented)"},
      {"--resize", kClassifier, kCifar | kFolder, "applies to cifar10 and folder data sets"},
      {"--padding", kClassifier, kCifar | kFolder,
       "applies to cifar10 and folder data sets (the random crop's border)"},
      {"--skip-bad", kClassifier, kFolder,
       "applies to folder data sets only (image files whose header cannot be read)"},
      {"--holdout", kClassifier, kFolder,
       "applies to folder data sets only (a test split held out of the train folder)"},
      {"--seq-len", kMaskedLm, kText,
       "applies to text data sets only (--dataset fortunes or text:PATH)"},
      {"--vocab-size", kMaskedLm, kText,
       "applies to text data sets only (--dataset fortunes or text:PATH)"},
      {"--vocab", kMaskedLm, kText,
       "applies to text data sets only (--dataset fortunes or text:PATH)"},
      {"--save-vocab", kMaskedLm, kText,
       "applies to text data sets only (--dataset fortunes or text:PATH)"},
      {"--mask-prob", kMaskedLm, kText,
       "applies to text data sets only (--dataset fortunes or text:PATH)"},
      {"--bert-config", kMaskedLm, kText, "applies to --model bert only"},
      {"--master-weights", kClassifier | kMaskedLm, kAllData,
       "does not support dcgan yet (its D and G step graphs are built apart)"},
      {"--optimizer-state", kClassifier | kMaskedLm, kAllData,
       "does not support dcgan yet (its D and G step graphs are built apart)"},
      {"--weight-rounding", kClassifier | kMaskedLm, kAllData,
       "does not support dcgan yet (its D and G step graphs are built apart)"},
      {"--samples-dir", kGan, kAllData, "applies to --model dcgan only"},
      {"--no-samples", kGan, kAllData, "applies to --model dcgan only"},
  };
  return table;
}

unsigned model_kind(const std::string& model) {
  if (!is_known_model(model)) return 0;
  switch (model_family(model)) {
    case ModelFamily::classifier: return kClassifier;
    case ModelFamily::masked_lm: return kMaskedLm;
    case ModelFamily::gan: return kGan;
  }
  return 0;
}

unsigned data_kind(const std::string& dataset) {
  if (dataset == "fashion-mnist" || dataset == "mnist") return kIdx;
  if (dataset == "synthetic") return kSynthetic;
  if (dataset == "cifar10") return kCifar;
  if (dataset.rfind("folder", 0) == 0) return kFolder;
  return is_text_dataset(dataset) ? kText : 0;
}

namespace {

void check_train_options_apply(const CLI::App* cmd, const TrainOptions& o) {
  check_conv_layout_applies(cmd, o.device, o.model);
  // The table, for the kinds of this model and data set (unknown names fail later, each
  // with its own line).
  check_option_scopes(cmd, model_kind(o.model), data_kind(o.dataset));
  check_data_parallel_options_apply(cmd, o.data_parallel);
  CAMPO_CHECK(!given(cmd, "--vocab") || !given(cmd, "--vocab-size"),
              "--vocab-size trains a vocabulary; --vocab loads one: give one of them");
  const Precision policy = o.precision;
  if (policy == Precision::fp32)
    for (const char* option :
         {"--low-precision", "--loss-scale", "--loss-scale-init", "--loss-scale-growth-interval",
          "--amp-lists", "--amp-lists-file", "--precision-policy", "--calibration", "--search",
          "--no-fold-casts", "--no-guard"})
      CAMPO_CHECK(!given(cmd, option), option,
                  " has no effect with --precision fp32 (it applies to amp and cost-aware)");
  if (policy == Precision::amp)
    for (const char* option : {"--calibration", "--search", "--no-fold-casts", "--no-guard"})
      CAMPO_CHECK(!given(cmd, option), option, " applies to --precision cost-aware only, not amp");
  if (policy != Precision::fp32) {
    const PrecisionConfig p = precision_config(o);
    for (const char* option : {"--loss-scale-init", "--loss-scale-growth-interval"})
      CAMPO_CHECK(!given(cmd, option) || p.scaler.enabled, option,
                  " has no effect without dynamic loss scaling (--loss-scale dynamic, or "
                  "--low-precision fp16)");
  }
  CAMPO_CHECK(!given(cmd, "--save-every") || given(cmd, "--save"),
              "--save-every needs --save (the checkpoint path to write)");
  CAMPO_CHECK(!given(cmd, "--numerics-every") || given(cmd, "--numerics"),
              "--numerics-every needs --numerics (what to record)");
  CAMPO_CHECK(!given(cmd, "--padding") || o.padding >= 0,
              "--padding must be zero or positive, got ", o.padding);
  // After apply_training_defaults: the model's own optimizer and schedule count.
  for (const char* option : {"--momentum", "--nesterov"})
    CAMPO_CHECK(!given(cmd, option) || o.optimizer == OptimizerConfig::Kind::sgd, option,
                " applies to --optimizer sgd only, not ", optimizer_name(o.optimizer));
  for (const char* option : {"--lr-step-epochs", "--lr-gamma"})
    CAMPO_CHECK(!given(cmd, option) || o.schedule.kind == LrSchedule::Kind::step, option,
                " applies to --lr-schedule step only, not ", lr_schedule_name(o.schedule.kind));
}

class TrainCommand final : public Command {
 public:
  explicit TrainCommand(CLI::App& app) {
    app_ = app.add_subcommand("train", "Train a model and evaluate it");
    add_train_options(app_, options_, device_, lists_);
    add_cuda_graph_option(app_, cuda_graph_);
    add_deterministic_option(app_, options_.deterministic);
    app_->add_option("--conv-layout", conv_layout_, kConvLayoutHelp)->capture_default_str();
    add_data_parallel_options(app_, options_.data_parallel,
                              "Train with every rank of an MPI launch (mpirun -np N campo train "
                              "...): each rank takes --batch samples of every step, the gradients "
                              "are averaged over the ranks; outside mpirun one process");
    app_->add_option("--samples-dir", options_.samples_dir,
                     "dcgan: where the sample grid of each epoch is written (epoch_NNN.png; "
                     "with --array, epoch_NNN-<i>.png per model)")
        ->capture_default_str()
        ->check(kPath);
    app_->add_flag("--no-samples", no_samples_,
                   "dcgan: write no sample grids (an empty --samples-dir is refused, as every "
                   "empty path is)");
  }

  int run() override {
    TrainOptions& o = options_;
    o.device = parse_device_spec(device_);
    o.cuda_graph = parse_cuda_graph_mode(cuda_graph_);
    o.conv_layout = parse_conv_layout(conv_layout_);
    apply_per_model_lists(app_, lists_, o);
    o.schedule.kind = parse_lr_schedule(lists_.schedule);
    o.precision = parse_precision(lists_.precision);
    o.optimizer = parse_optimizer(lists_.optimizer);
    o.array.shuffle = parse_array_shuffle(lists_.array_shuffle);
    o.report.progress = parse_progress(lists_.progress);
    o.augment = parse_augment(lists_.augment);
    if (given(app_, "--numerics"))
      o.report.numerics =
          parse_numerics_scope(lists_.numerics.empty() ? "quantized" : lists_.numerics);
    apply_training_defaults(app_, o);
    default_low_precision_of(app_, o.device, o.model, o.mixed.low_precision);
    check_distinct_paths(train_paths(o));  // before any file is read
    check_train_options_apply(app_, o);
    CAMPO_CHECK(!no_samples_ || !given(app_, "--samples-dir"),
                "--no-samples writes no sample grids; --samples-dir names their folder: give one "
                "of them");
    if (no_samples_) o.samples_dir.clear();  // TrainOptions: empty writes none
    // Before any backend or work: the options, then that a named calibration fits --device.
    check_training_options(o);
    check_calibration_device(o.calibration, o.precision, o.device);
    const CalibrationSource calibration = train_calibration(o.calibration);
    const bool terminal = isatty(STDOUT_FILENO) != 0;
    const std::optional<StepProfile> profile = train_model(o, std::cout, terminal, calibration);
    if (profile) write_profile(o.report.profile_out, *profile);
    return 0;
  }

 private:
  TrainOptions options_;
  TrainAsTyped lists_;  // --lr, ... as typed, and the choices' names
  bool no_samples_ = false;
  // As given; parsed once the command line is read.
  std::string device_ = "cpu", cuda_graph_ = "auto", conv_layout_ = "blocked";
};

}  // namespace

std::unique_ptr<Command> add_train_command(CLI::App& app) {
  return std::make_unique<TrainCommand>(app);
}

}  // namespace campo::cli
