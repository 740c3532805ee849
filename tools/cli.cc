#include "tools/cli.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <iostream>
#include <new>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "amp/calibration.h"
#include "datasets/registry.h"
#include "models/models.h"
#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_features.h"
#include "runtime/file_check.h"
#include "train/calibrate.h"
#include "train/gan_trainer.h"
#include "train/interrupt.h"
#include "train/model_array.h"
#include "train/plan.h"
#include "train/predict.h"
#include "train/trainer.h"
#ifdef CAMPO_HAVE_CUDA
#include "runtime/cuda/device_info.h"
#endif

namespace campo::cli {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string cpu_features() {
  std::string s;
  auto add = [&](const char* name, bool has) {
    if (has) s += (s.empty() ? "" : " ") + std::string(name);
  };
  __builtin_cpu_init();
  add("avx2", __builtin_cpu_supports("avx2"));
  add("fma", __builtin_cpu_supports("fma"));
  add("f16c", cpu_has_f16c_instructions());
  add("avx512f", __builtin_cpu_supports("avx512f"));
  add("avx512bw", __builtin_cpu_supports("avx512bw"));
  add("avx512_vnni", __builtin_cpu_supports("avx512vnni"));
  add("avx512_bf16", __builtin_cpu_supports("avx512bf16"));
  add("amx_bf16", cpu_has_amx_bf16_instructions());
  return s.empty() ? "none" : s;
}

std::string version_text() {
  std::ostringstream os;
  const dnnl_version_t* v = dnnl_version();
  os << "campo " CAMPO_VERSION "\n";
#ifdef CAMPO_HAVE_CUDA
  int devices = cuda::device_count();
  // CUDA versions as major.minor from major * 1000 + minor * 10.
  const auto cuda_version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  os << "cuda: on (runtime " << cuda_version(cuda::runtime_version()) << ", " << devices
     << " device" << (devices == 1 ? "" : "s");
  if (devices > 0) os << ": " << cuda::device_name(0);
  os << ")\n";
  const int driver = cuda::driver_version();
  // cuDNN 9: major * 10000 + minor * 100 + patch; cuBLASLt: major * 10000 + minor * 100 + patch.
  const size_t dnn = cuda::cudnn_version(), lt = cuda::cublaslt_version();
  os << "cuda libraries: driver " << (driver ? "supports CUDA " + cuda_version(driver) : "absent")
     << ", cuDNN " << dnn / 10000 << "." << dnn % 10000 / 100 << "." << dnn % 100 << ", cuBLASLt "
     << lt / 10000 << "." << lt % 10000 / 100 << "." << lt % 100 << "\n";
#else
  os << "cuda: off (built without nvcc)\n";
#endif
  os << "onednn: " << v->major << "." << v->minor << "." << v->patch << " (isa "
     << onednn_isa_name() << ")\n";
  CpuBackend cpu;
  os << cpu.describe() << " (" << cpu_features() << ")\n";
  const bool native_allowed = cpu.allows_native_low_precision();  // CAMPO_CPU_BF16
  if (!cpu_has_native_bf16())
    os << "bf16: emulated in f32 (no AVX-512 BF16)\n";
  else if (!native_allowed)
    os << "bf16: emulated in f32 (CAMPO_CPU_BF16=emulate; the CPU has AVX-512 BF16)\n";
  else
    os << "bf16: native (AVX-512 BF16)\n";
  os << "fp16: emulated in f32 on the CPU\n";
  os << "data-parallel: " << (mpi_built_in() ? "Open MPI" : "off (built without MPI)")
     << (nccl_built_in() ? ", NCCL" : "") << "\n";
  return os.str();
}

// A seed is a whole number in 0 .. 2^64-1; CLI11's own conversion would wrap "-1" to
// 2^64-1 and 2^64 to 0.
const CLI::Validator kSeed(
    [](std::string& text) -> std::string {
      uint64_t value = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, value);
      if (text.empty() || ec != std::errc() || ptr != end)
        return "must be a whole number from 0 to 18446744073709551615, got '" + text + "'";
      return "";
    },
    "0..2^64-1");

// CLI11 saturates an int64 option silently ("--batch 99999999999999999999" becomes 2^63-1).
const CLI::Validator kInt64(
    [](std::string& text) -> std::string {
      int64_t value = 0;
      const char* end = text.data() + text.size();
      auto [ptr, ec] = std::from_chars(text.data(), end, value);
      if (text.empty() || ec != std::errc() || ptr != end)
        return "expects a whole number (in its 64-bit range), got '" + text + "'";
      return "";
    },
    "INT64");

// Puts kInt64 on the named options of `cmd`.
void check_int64(CLI::App* cmd, std::initializer_list<const char*> options) {
  for (const char* option : options) cmd->get_option(option)->check(kInt64);
}

// --device, parsed once (parse_device_spec) after the command line is read.
void add_device_option(CLI::App* cmd, std::string& device) {
  cmd->add_option("--device", device,
                  "cpu, cuda or cuda:N (cpu:strict: a debugging device, docs/backends.md)")
      ->capture_default_str();
}

// --cuda-graph of the commands that run untimed steps (train, eval, bench), as given;
// parse_cuda_graph_mode reads it once, below.
void add_cuda_graph_option(CLI::App* cmd, std::string& mode) {
  cmd->add_option("--cuda-graph", mode,
                  "auto (capture each step once and replay it where the device and the step "
                  "allow: CUDA), on (the same; an error where they do not) or off")
      ->capture_default_str();
}

// Whether the user gave `option` on the command line (a default does not count).
bool given(const CLI::App* cmd, const std::string& option) { return cmd->count(option) > 0; }

// campo train's options that are read once the command line is: --lr, --momentum,
// --weight-decay, --dropout and --seed as typed (one value, or with --array N a
// comma-separated list of N values, one per model), and the names of its choices, each
// parsed into its enumeration next to its type (parse_lr_schedule, parse_optimizer, ...).
struct TrainAsTyped {
  std::string lr, momentum, weight_decay, dropout, seed;
  std::string schedule = "cosine", optimizer = "sgd", array_shuffle = "shared", progress = "auto",
              augment = "auto", precision = "cost-aware";
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
  cmd->add_option("--data-dir", o.data_dir, "Directory of the data set's files");
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
                  "step to this JSON file at the end (campo predict reads it)");
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
  cmd->add_option("--vocab", o.vocab_path, "text: a saved vocabulary (--save-vocab) to use");
  cmd->add_option("--save-vocab", o.save_vocab_path, "text: write the vocabulary used here");
  cmd->add_option("--mask-prob", o.mask_prob, "text: fraction of tokens to predict (80/10/10)")
      ->capture_default_str();
  cmd->add_option("--save", o.checkpoint.save_path,
                  "Write a safetensors checkpoint at each epoch end and at the end");
  cmd->add_option("--save-every", o.checkpoint.save_every, "Also checkpoint every N steps");
  cmd->add_option("--resume", o.checkpoint.resume_path, "Continue training from a checkpoint");
  cmd->add_option("--metrics", o.report.metrics_path,
                  "Write the training curve as JSON lines (loss, lr, loss scale, samples/s at "
                  "the progress lines' steps; the test accuracy), flushed as the run goes");
  cmd->add_option("--tensorboard", o.report.tensorboard_dir,
                  "Write the same scalars as a TensorBoard event file into this directory");
  cmd->add_option("--image-size", o.image_size, "Resize images to this square size (0: native)");
  cmd->add_option("--channels", o.channels, "Image channels, 1 or 3 (0: the data set's own)");
  cmd->add_option("--precision", lists.precision,
                  "cost-aware (Campo), amp (TensorFlow's list-based rewrite) or fp32")
      ->capture_default_str();
  cmd->add_option("--calibration", o.calibration,
                  "cost-aware: calibration file (default: this machine's, or a quick automatic "
                  "calibration first; none: time both precisions in the profiling step)");
  cmd->add_option("--search", o.mixed.search,
                  "cost-aware: exact (the four traversals, then the least predicted step time "
                  "found exactly by a minimum cut) or traversals (the paper's four alone)")
      ->capture_default_str();
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
                  "JSON file of list edits: {\"allow\": {\"add\": [...], \"remove\": [...]}}");
  check_int64(cmd, {"--steps", "--batch", "--eval-batch", "--warmup-steps", "--limit-train",
                    "--limit-test", "--save-every"});
}

void add_model_run_options(CLI::App* cmd, ModelRunOptions& o, std::string& device,
                           std::string& optimizer) {
  cmd->add_option("--model", o.model, "Model: " + join(model_names()))->capture_default_str();
  cmd->add_option("--batch", o.batch, "Batch size")->capture_default_str();
  cmd->add_option("--image-size", o.image_size, "Input height and width")->capture_default_str();
  cmd->add_option("--channels", o.channels, "Input channels")->capture_default_str();
  cmd->add_option("--classes", o.classes, "Number of classes (bert: vocabulary size, default 8000)")
      ->capture_default_str();
  cmd->add_option("--bert-config", o.bert_config, "bert: tiny, mini, small, medium or base")
      ->capture_default_str();
  cmd->add_option("--seq-len", o.seq_len, "bert: tokens per sequence")->capture_default_str();
  add_device_option(cmd, device);
  cmd->add_option("--low-precision", o.mixed.low_precision,
                  "bf16, fp16 or auto (cost-aware chooses f32, f16 or bf16 per node) "
                  "(default: bf16 on cpu, fp16 on cuda; dcgan bf16)");
  cmd->add_option("--loss-scale", o.mixed.loss_scale, "auto, dynamic or none")
      ->capture_default_str();
  cmd->add_option("--amp-lists", o.mixed.amp_lists_edit, "List edits: 'allow+=Tanh;clear-=Relu'");
  cmd->add_option("--amp-lists-file", o.mixed.amp_lists_file, "JSON file of list edits");
  optimizer = "sgd";
  cmd->add_option("--optimizer", optimizer, "sgd or adam")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Random seed")->check(kSeed)->capture_default_str();
  cmd->add_option("--calibration", o.calibration,
                  "cost-aware: calibration file (default: this machine's, found or made by a "
                  "quick calibration; 'none': time both precisions instead)");
  cmd->add_option("--search", o.mixed.search, "cost-aware: exact or traversals")
      ->capture_default_str();
  cmd->add_flag("--no-fold-casts{false}", o.mixed.fold_casts,
                "cost-aware: insert weight and weight-gradient casts as Cast nodes, as amp does");
  cmd->add_option("--array", o.array,
                  "N copies of the model as one fused step (a model array, as campo train "
                  "--array); samples/s counts every model's batch")
      ->capture_default_str();
  check_int64(cmd, {"--batch"});
}

// --for DEVICE --profile FILE [--from NAME] [--devices FILE] (plan and bench).
void add_plan_for_options(CLI::App* cmd, PlanForOptions& o) {
  cmd->add_option("--for", o.device,
                  "cost-aware: plan for this device (campo predict --list-devices) from costs "
                  "predicted from --profile");
  cmd->add_option("--profile", o.profile_path,
                  "with --for: a campo train --profile-out file of this model");
  cmd->add_option("--from", o.from,
                  "with --for: the device the profile was measured on (default: its own)");
  cmd->add_option("--devices", o.devices_path,
                  "with --for: a device table to use instead of the built-in one");
}

// plan --for: the plan's device (its lists and default low precision) is the target's kind;
// --device, when given, must agree.
void resolve_plan_for_device(const CLI::App* cmd, const PlanForOptions& f, std::string& device) {
  if (!f.active()) return;
  const Device kind = plan_for_device(f);
  if (!given(cmd, "--device")) {
    device = device_name(kind);
    return;
  }
  CAMPO_CHECK(parse_device_spec(device).type == kind, "--for ", f.device, " is a ",
              device_name(kind), " device, not --device ", device, " (leave --device out)");
}

// cost-aware plan/bench without --calibration: the default calibration of the run's backend
// (default_calibration: on the CPU a quick automatic one when there is none; on a GPU none,
// and the profiling step times both precisions); "none" keeps the profiling of both
// precisions. A named file is checked against the backend's identity when it is loaded.
// `backend`: the run's, or null where the command makes it later (plan), and then one for
// run.device is made here only if a default calibration is looked for.
void resolve_calibration(ModelRunOptions& run, bool cost_aware,
                         std::shared_ptr<Backend> backend = nullptr) {
  if (!cost_aware || run.plan_for.active()) return;
  if (run.calibration == "none") {
    run.calibration.clear();
    return;
  }
  if (!run.calibration.empty()) return;
  // auto: bf16's calibration (f16's low times are then measured, train/profiling.h).
  const DType low = low_type_of(parse_low_precision_mode(run.mixed.low_precision));
  if (!backend) backend = backend_for(run.device, run.cuda_graph);
  default_calibration(*backend, low, std::cerr, &run.calibration);
}

// --low-precision when not given: the device's (bf16 on cpu, fp16 on cuda); bf16 for dcgan,
// whose sessions have no dynamic loss scaling yet (fp16 needs it).
void default_low_precision_of(const CLI::App* cmd, const DeviceSpec& device,
                              const std::string& model, std::string& low) {
  if (given(cmd, "--low-precision")) return;
  const TrainingDefaults d = is_known_model(model) ? training_defaults(model) : TrainingDefaults{};
  low = d.low_precision                                    ? *d.low_precision
        : default_low_precision(device.type) == DType::f16 ? "fp16"
                                                           : "bf16";
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
      {"--samples-dir", kGan, kAllData, "applies to --model dcgan only"},
  };
  return table;
}

unsigned model_kind(const std::string& model) {
  if (!is_known_model(model)) return 0;
  if (is_gan_model(model)) return kGan;
  return model_input(model) == ModelInput::tokens ? kMaskedLm : kClassifier;
}

unsigned data_kind(const std::string& dataset) {
  if (dataset == "fashion-mnist" || dataset == "mnist") return kIdx;
  if (dataset == "synthetic") return kSynthetic;
  if (dataset == "cifar10") return kCifar;
  if (dataset.rfind("folder", 0) == 0) return kFolder;
  return is_text_dataset(dataset) ? kText : 0;
}

namespace {

// Options a user gave that the run would ignore are errors, each naming the option and why.
// --conv-layout picks oneDNN's layouts: on a GPU every activation is NCHW (graph/executor.cc).
void check_conv_layout_applies(const CLI::App* cmd, const DeviceSpec& device) {
  // cpu:strict runs the CPU's kernels, so their layouts too.
  CAMPO_CHECK(!given(cmd, "--conv-layout") || device.type == Device::cpu ||
                  device.type == Device::cpu_strict,
              "--conv-layout applies to --device cpu only (on ", device.str(),
              " activations are always NCHW)");
}

// --data-parallel (its help: `what`), --bucket-mb, --comm-timeout of train and bench.
void add_data_parallel_options(CLI::App* cmd, DataParallelOptions& dp, const std::string& what) {
  cmd->add_flag("--data-parallel", dp.enabled, what);
  cmd->add_option("--bucket-mb", dp.bucket_mb,
                  "--data-parallel: gradients are averaged in buckets of about this many MB, "
                  "each started as soon as its gradients exist")
      ->capture_default_str();
  cmd->add_option("--comm-timeout", dp.timeout_s,
                  "--data-parallel: seconds a rank waits for the others (one died or hangs) "
                  "before the job ends")
      ->capture_default_str();
}

void check_data_parallel_options_apply(const CLI::App* cmd, const DataParallelOptions& dp) {
  for (const char* option : {"--bucket-mb", "--comm-timeout"})
    CAMPO_CHECK(!given(cmd, option) || dp.enabled, option, " applies to --data-parallel runs only");
}

void check_train_options_apply(const CLI::App* cmd, const TrainOptions& o) {
  check_conv_layout_applies(cmd, o.device);
  CAMPO_CHECK(!given(cmd, "--conv-layout") || !is_known_model(o.model) || has_convolutions(o.model),
              "--conv-layout applies to models with convolutions; ", o.model, " has none");
  // The table, for the kinds of this model and data set (unknown names fail later, each
  // with its own line).
  const unsigned model = model_kind(o.model), data = data_kind(o.dataset);
  if (model && data)
    for (const OptionScope& scope : train_option_scopes())
      CAMPO_CHECK(!given(cmd, scope.option) || ((scope.models & model) && (scope.data & data)),
                  scope.option, " ", scope.why);
  check_data_parallel_options_apply(cmd, o.data_parallel);
  CAMPO_CHECK(!given(cmd, "--vocab") || !given(cmd, "--vocab-size"),
              "--vocab-size trains a vocabulary; --vocab loads one: give one of them");
  const Precision policy = o.precision;
  if (policy == Precision::fp32)
    for (const char* option :
         {"--low-precision", "--loss-scale", "--loss-scale-init", "--loss-scale-growth-interval",
          "--amp-lists", "--amp-lists-file", "--calibration", "--search", "--no-fold-casts"})
      CAMPO_CHECK(!given(cmd, option), option,
                  " has no effect with --precision fp32 (it applies to amp and cost-aware)");
  if (policy == Precision::amp)
    for (const char* option : {"--calibration", "--search", "--no-fold-casts"})
      CAMPO_CHECK(!given(cmd, option), option, " applies to --precision cost-aware only, not amp");
  if (policy != Precision::fp32) {
    const PrecisionConfig p = precision_config(o);
    for (const char* option : {"--loss-scale-init", "--loss-scale-growth-interval"})
      CAMPO_CHECK(!given(cmd, option) || p.scaler.enabled, option,
                  " has no effect without dynamic loss scaling (--loss-scale dynamic, or "
                  "--low-precision fp16)");
  }
  for (const char* option : {"--save", "--resume", "--data-dir", "--metrics", "--tensorboard"})
    CAMPO_CHECK(!given(cmd, option) || !cmd->get_option(option)->as<std::string>().empty(), option,
                " needs a path, got an empty one");
  CAMPO_CHECK(!given(cmd, "--save-every") || given(cmd, "--save"),
              "--save-every needs --save (the checkpoint path to write)");
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

// plan/bench: the precision options only the given policies use; what dcgan has no use for.
// The model's optimizer (models.h's training_defaults: bert and dcgan Adam) unless
// --optimizer says otherwise (set here).
void check_run_options_apply(const CLI::App* cmd, ModelRunOptions& run,
                             const std::string& optimizer,
                             const std::vector<std::string>& policies) {
  run.optimizer = parse_optimizer(optimizer);
  CAMPO_CHECK(!given(cmd, "--classes") || !is_gan_model(run.model),
              "--classes does not apply to --model ", run.model);
  if (is_known_model(run.model) && !given(cmd, "--optimizer"))
    if (const TrainingDefaults d = training_defaults(run.model); d.optimizer)
      run.optimizer = *d.optimizer;
  const bool tokens = is_known_model(run.model) && model_input(run.model) == ModelInput::tokens;
  if (tokens) {
    for (const char* option : {"--image-size", "--channels"})
      CAMPO_CHECK(!given(cmd, option), option, " does not apply to --model ", run.model,
                  " (its input is --seq-len tokens)");
    if (!given(cmd, "--classes")) run.classes = 8000;  // campo train's --vocab-size
  } else {
    for (const char* option : {"--bert-config", "--seq-len"})
      CAMPO_CHECK(!given(cmd, option), option, " applies to --model bert only");
  }
  bool mixed = false, cost_aware = false;
  for (const std::string& p : policies) {
    mixed |= parse_precision(p) != Precision::fp32;
    cost_aware |= parse_precision(p) == Precision::cost_aware;
  }
  if (!mixed)
    for (const char* option :
         {"--low-precision", "--loss-scale", "--amp-lists", "--amp-lists-file"})
      CAMPO_CHECK(!given(cmd, option), option,
                  " has no effect with --precision fp32 (it applies to amp and cost-aware)");
  if (!cost_aware)
    for (const char* option : {"--calibration", "--search", "--no-fold-casts"})
      CAMPO_CHECK(!given(cmd, option), option, " applies to --precision cost-aware only");
}

}  // namespace

int run(const std::vector<std::string>& args) {
  CLI::App app{"campo: a cost-aware mixed-precision training runtime", "campo"};
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print the version and what this build supports");

  // --device of each command, as given; parse_device_spec reads it once, below.
  std::string train_device = "cpu", plan_device = "cpu", bench_device = "cpu",
              calibrate_device = "cpu", eval_device = "cpu";
  std::string train_cuda_graph = "auto", eval_cuda_graph = "auto", bench_cuda_graph = "auto";
  // --optimizer of plan and bench, as given; check_run_options_apply parses it.
  std::string plan_optimizer, bench_optimizer;
  TrainOptions train_options;
  CLI::App* train_cmd = app.add_subcommand("train", "Train a model and evaluate it");
  TrainAsTyped train_lists;
  add_train_options(train_cmd, train_options, train_device, train_lists);
  add_cuda_graph_option(train_cmd, train_cuda_graph);
  // --conv-layout of train and bench, as given; parse_conv_layout reads it once, below.
  std::string train_conv_layout = "blocked", bench_conv_layout = "blocked";
  const std::string conv_layout_help =
      "blocked: keep convolution activations in oneDNN's blocked layout (nChw16c with AVX-512, "
      "nChw8c with AVX2) between "
      "kernels; plain: NCHW everywhere, each convolution reordering its operands";
  train_cmd->add_option("--conv-layout", train_conv_layout, conv_layout_help)
      ->capture_default_str();
  add_data_parallel_options(train_cmd, train_options.data_parallel,
                            "Train with every rank of an MPI launch (mpirun -np N campo train "
                            "...): each rank takes --batch samples of every step, the gradients "
                            "are averaged over the ranks; outside mpirun one process");
  train_cmd
      ->add_option("--samples-dir", train_options.samples_dir,
                   "dcgan: where the sample grid of each epoch is written (epoch_NNN.png; "
                   "with --array, epoch_NNN-<i>.png per model)")
      ->capture_default_str();

  TrainOptions graph_options;
  std::string graph_format = "text";
  CLI::App* graph_cmd =
      app.add_subcommand("graph", "Print the compiled training-step graph (text or Graphviz DOT)");
  graph_cmd->add_option("--model", graph_options.model, "Model: " + join(model_names()))
      ->capture_default_str();
  graph_cmd->add_option("--dataset", graph_options.dataset, "Data set (gives the input shape)")
      ->capture_default_str();
  graph_cmd->add_option("--data-dir", graph_options.data_dir, "Directory of the data set's files");
  graph_cmd->add_option("--batch", graph_options.batch, "Batch size")->capture_default_str();
  std::string graph_optimizer = "sgd";
  graph_cmd->add_option("--optimizer", graph_optimizer, "sgd or adam")->capture_default_str();
  graph_cmd->add_option("--format", graph_format, "text or dot")->capture_default_str();
  graph_cmd->add_flag("--no-multi-tensor-updates{false}", graph_options.multi_tensor_updates,
                      "One optimizer update node per parameter (as campo train's option)");

  PredictOptions predict_options;
  CLI::App* predict_cmd = app.add_subcommand(
      "predict", "Predict a profiled training step's time on another device (Habitat's scaling)");
  predict_cmd->add_option("--profile", predict_options.profile_path,
                          "A per-node profile: campo train ... --profile-out FILE");
  predict_cmd->add_option("--device", predict_options.device,
                          "The device to predict for, by its name in the device table");
  predict_cmd->add_option("--from", predict_options.from,
                          "The device the profile was measured on (default: the profile's "
                          "own measurement of its CPU)");
  predict_cmd->add_option("--devices", predict_options.devices_path,
                          "A device table to use instead of the built-in one (train/devices.json)");
  predict_cmd->add_option("--json", predict_options.json_path, "Write the prediction per node");
  bool list_devices = false;
  predict_cmd->add_flag("--list-devices", list_devices, "List the device table and exit");

  EvalOptions eval_options;
  CLI::App* eval_cmd = app.add_subcommand("eval", "Evaluate a checkpoint on a test split");
  eval_cmd->add_option("--checkpoint", eval_options.checkpoint, "safetensors checkpoint")
      ->required();
  eval_cmd->add_option("--model", eval_options.model, "Model (default: from the checkpoint)");
  eval_cmd->add_option("--dataset", eval_options.dataset, "Data set")->capture_default_str();
  eval_cmd->add_option("--data-dir", eval_options.data_dir, "Directory of the data set's files");
  eval_cmd->add_option("--batch", eval_options.batch, "Batch size")->capture_default_str();
  eval_cmd->add_option("--limit", eval_options.limit, "Evaluate on the first N samples");
  check_int64(eval_cmd, {"--batch", "--limit"});
  eval_cmd->add_option("--image-size", eval_options.image_size, "Resize images (0: native)");
  eval_cmd->add_option("--channels", eval_options.channels, "Image channels (0: native)");
  eval_cmd->add_option("--seq-len", eval_options.seq_len, "text: tokens per sequence")
      ->capture_default_str();
  eval_cmd->add_option("--mask-prob", eval_options.mask_prob, "text: fraction of tokens to predict")
      ->capture_default_str();
  eval_cmd->add_option("--seed", eval_options.seed, "Seed of the synthetic data set")
      ->check(kSeed)
      ->capture_default_str();
  add_device_option(eval_cmd, eval_device);
  add_cuda_graph_option(eval_cmd, eval_cuda_graph);

  PlanOptions plan_options;
  CLI::App* plan_cmd = app.add_subcommand(
      "plan", "Show, per node of the training step, the precision a policy chooses");
  add_model_run_options(plan_cmd, plan_options.run, plan_device, plan_optimizer);
  std::string plan_precision = "cost-aware";  // parse_precision reads it once, below
  plan_cmd->add_option("--precision", plan_precision, "cost-aware, amp or fp32")
      ->capture_default_str();
  plan_cmd->add_option("--dot", plan_options.dot_path,
                       "Write a Graphviz DOT file, nodes coloured by precision, casts in red");
  plan_cmd->add_option("--json", plan_options.json_path, "Write the plan as JSON");
  plan_cmd->add_flag("--all-nodes", plan_options.all_nodes,
                     "Also list variables, placeholders and optimizer updates");
  add_plan_for_options(plan_cmd, plan_options.run.plan_for);
  plan_cmd->add_option("--alloc-trace", plan_options.alloc_trace_path,
                       "Write the step's allocations, one buffer per value, as a trace for "
                       "allocator tests");

  BenchOptions bench_options;
  std::string bench_precisions = "fp32,amp,cost-aware";
  CLI::App* bench_cmd =
      app.add_subcommand("bench", "Measure training throughput of precision policies side by side");
  add_model_run_options(bench_cmd, bench_options.run, bench_device, bench_optimizer);
  add_cuda_graph_option(bench_cmd, bench_cuda_graph);
  bench_cmd->add_option("--precision", bench_precisions, "Comma-separated policies")
      ->capture_default_str();
  bench_cmd->add_option("--steps", bench_options.steps, "Timed steps per repetition")
      ->capture_default_str();
  bench_cmd->add_option("--warmup", bench_options.warmup, "Untimed steps first")
      ->capture_default_str();
  bench_cmd->add_option("--repeats", bench_options.repeats, "Interleaved repetitions")
      ->capture_default_str();
  bench_cmd->add_option("--json", bench_options.json_path, "Write the results as JSON");
  bench_cmd->add_flag("--no-peak{false}", bench_options.measure_peak,
                      "Skip measuring the GEMM peak (the roofline's percentages)");
  bool bench_lockstep = false;
  bench_cmd->add_flag("--lockstep", bench_lockstep,
                      "Driven from stdin: a JSON 'ready' line, then one repetition per 'run' "
                      "line, one JSON result line each; the table goes to stderr");
  bench_cmd->add_option("--conv-layout", bench_conv_layout, conv_layout_help)
      ->capture_default_str();
  add_data_parallel_options(bench_cmd, bench_options.data_parallel,
                            "Measure the step on every rank of an MPI launch (mpirun -np N "
                            "campo bench ...), --batch samples each, gradients averaged; adds "
                            "samples/s per rank and the scaling efficiency against one process");
  add_plan_for_options(bench_cmd, bench_options.run.plan_for);

  CalibrateOptions calibrate_options;
  std::string calibrate_models;
  CLI::App* calibrate_cmd = app.add_subcommand(
      "calibrate",
      "Fit the cost models of --device on this machine for --precision cost-aware (offline, once "
      "per machine and device; the file is keyed by the device's identity)");
  add_device_option(calibrate_cmd, calibrate_device);
  calibrate_cmd->add_option("--out", calibrate_options.out,
                            "Calibration file to write (default: this machine's and device's, in "
                            "$XDG_CACHE_HOME/campo or ~/.cache/campo)");
  calibrate_cmd->add_option("--budget-minutes", calibrate_options.budget_minutes,
                            "Time budget: no configuration starts that would overrun it "
                            "(default 10, 1 with --quick)");
  calibrate_cmd->add_option("--low-precision", calibrate_options.low_precision,
                            "bf16 or fp16 (default: the device's, bf16 on cpu, fp16 on cuda)");
  calibrate_cmd->add_flag("--quick", calibrate_options.quick,
                          "About a minute: LeNet, ResNet-18, DCGAN and BERT's attention "
                          "products at small batches");
  calibrate_cmd->add_option("--samples", calibrate_options.samples_out,
                            "Also write the raw measurements (every node sample and cast) as JSON");
  calibrate_cmd->add_option("--counters", calibrate_options.counters_out,
                            "Also write every sample's hardware counters and times as a recorded "
                            "counter table (JSON lines; devices that read counters: cuda)");
  calibrate_cmd->add_option("--models", calibrate_models,
                            "Only these models (comma-separated: lenet, resnet18, resnet50, "
                            "vgg16, dcgan, attention: BERT's batched attention products)");

  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    // CLI11 says "Could not convert: --batch = abc"; only numeric options can fail to convert.
    const std::string text = e.what();
    const std::string prefix = "Could not convert: ";
    const size_t eq = text.find(" = ");
    if (text.rfind(prefix, 0) == 0 && eq != std::string::npos)
      std::cerr << "campo: error: " << text.substr(prefix.size(), eq - prefix.size())
                << " expects a number (in its range), got '" << text.substr(eq + 3) << "'\n";
    else
      std::cerr << "campo: error: " << text << "\n";
    return 2;
  } catch (const CLI::ParseError& e) {
    std::cerr << "campo: error: " << e.what() << "\n";
    return 2;
  }

  try {
    if (show_version) {
      std::cout << version_text();
      return 0;
    }
    if (train_cmd->parsed()) {
      train_options.device = parse_device_spec(train_device);
      train_options.cuda_graph = parse_cuda_graph_mode(train_cuda_graph);
      train_options.conv_layout = parse_conv_layout(train_conv_layout);
      apply_per_model_lists(train_cmd, train_lists, train_options);
      train_options.schedule.kind = parse_lr_schedule(train_lists.schedule);
      train_options.precision = parse_precision(train_lists.precision);
      train_options.optimizer = parse_optimizer(train_lists.optimizer);
      train_options.array.shuffle = parse_array_shuffle(train_lists.array_shuffle);
      train_options.report.progress = parse_progress(train_lists.progress);
      train_options.augment = parse_augment(train_lists.augment);
      apply_training_defaults(train_cmd, train_options);
      default_low_precision_of(train_cmd, train_options.device, train_options.model,
                               train_options.mixed.low_precision);
      check_train_options_apply(train_cmd, train_options);
    }
    if (train_cmd->parsed() && is_gan_model(train_options.model)) {
      train_gan(train_options, std::cout, isatty(STDOUT_FILENO) != 0);
      return 0;
    }
    if (train_cmd->parsed()) {
      train(train_options, std::cout, isatty(STDOUT_FILENO) != 0);
      return 0;
    }
    if (eval_cmd->parsed()) {
      eval_options.device = parse_device_spec(eval_device);
      eval_options.cuda_graph = parse_cuda_graph_mode(eval_cuda_graph);
      evaluate_checkpoint(eval_options, std::cout);
      return 0;
    }
    if (calibrate_cmd->parsed()) {
      calibrate_options.device = parse_device_spec(calibrate_device);
      // By default the low precision that runs on this device use (default_low_precision).
      if (!given(calibrate_cmd, "--low-precision"))
        calibrate_options.low_precision =
            default_low_precision(calibrate_options.device.type) == DType::f16 ? "fp16" : "bf16";
      std::stringstream ss(calibrate_models);
      std::string m;
      while (std::getline(ss, m, ','))
        if (!m.empty()) calibrate_options.models.push_back(m);
      CAMPO_CHECK(!calibrate_cmd->count("--models") || !calibrate_options.models.empty(),
                  "--models needs at least one model name");
      run_calibration(calibrate_options, std::cout);
      return 0;
    }
    if (plan_cmd->parsed()) {
      resolve_plan_for_device(plan_cmd, plan_options.run.plan_for, plan_device);
      plan_options.run.device = parse_device_spec(plan_device);
      default_low_precision_of(plan_cmd, plan_options.run.device, plan_options.run.model,
                               plan_options.run.mixed.low_precision);
      plan_options.precision = parse_precision(plan_precision);
      check_run_options_apply(plan_cmd, plan_options.run, plan_optimizer, {plan_precision});
      check_plan_options(plan_options);
      check_calibration_device(plan_options.run.calibration, plan_options.precision,
                               plan_options.run.device);
      resolve_calibration(plan_options.run, plan_options.precision == Precision::cost_aware);
      attach_predicted_costs(plan_options.run);
      print_plan(plan_options, std::cout);
      return 0;
    }
    if (bench_cmd->parsed()) {
      bench_options.run.device = parse_device_spec(bench_device);
      bench_options.run.cuda_graph = parse_cuda_graph_mode(bench_cuda_graph);
      bench_options.run.conv_layout = parse_conv_layout(bench_conv_layout);
      check_conv_layout_applies(bench_cmd, bench_options.run.device);
      default_low_precision_of(bench_cmd, bench_options.run.device, bench_options.run.model,
                               bench_options.run.mixed.low_precision);
      bench_options.precisions.clear();
      std::stringstream ss(bench_precisions);
      std::string p;
      while (std::getline(ss, p, ','))
        if (!p.empty()) bench_options.precisions.push_back(p);
      check_data_parallel_options_apply(bench_cmd, bench_options.data_parallel);
      CAMPO_CHECK(!bench_lockstep || !bench_options.data_parallel.enabled,
                  "--lockstep is driven by one orchestrator process; it does not take "
                  "--data-parallel");
      CAMPO_CHECK(!bench_lockstep || !given(bench_cmd, "--repeats"),
                  "--repeats does not apply to --lockstep (each 'run' line on stdin runs one "
                  "repetition)");
      check_bench_options(bench_options);
      check_run_options_apply(bench_cmd, bench_options.run, bench_optimizer,
                              bench_options.precisions);
      const bool bench_cost_aware = std::count(bench_options.precisions.begin(),
                                               bench_options.precisions.end(), "cost-aware") > 0;
      if (bench_cost_aware)
        check_calibration_device(bench_options.run.calibration, Precision::cost_aware,
                                 bench_options.run.device);
      // The run's backend, once, after the options and before any work (a calibration): one
      // line for a device this build or machine lacks.
      const std::shared_ptr<Backend> bench_backend =
          backend_for(rank_device(bench_options.run.device, bench_options.data_parallel),
                      bench_options.run.cuda_graph);
      resolve_calibration(bench_options.run, bench_cost_aware, bench_backend);
      attach_predicted_costs(bench_options.run);
      if (bench_lockstep) {
        // stdout carries the protocol only: the table and any banner go to stderr.
        run_bench_lockstep(bench_options, bench_backend, std::cin, std::cout, std::cerr);
      } else {
        run_bench(bench_options, bench_backend, std::cout);
      }
      return 0;
    }
    if (predict_cmd->parsed()) {
      if (list_devices) {
        const std::vector<DeviceModel> table = device_table(predict_options.devices_path);
        for (const DeviceModel& d : table) {
          // %g: the same figures whatever an earlier command left in std::cout's format.
          char figures[96];
          std::snprintf(figures, sizeof figures, "f32 %g GFLOP/s, %g GB/s",
                        d.peak_for(DType::f32, false), d.memory_gbs);
          std::cout << d.name << ": " << d.full_name << "; " << figures << "; " << d.source << "\n";
        }
        return 0;
      }
      run_predict(predict_options, std::cout);
      return 0;
    }
    if (graph_cmd->parsed()) {
      graph_options.optimizer = parse_optimizer(graph_optimizer);
      std::cout << dump_training_graph(graph_options, graph_format);
      return 0;
    }
    std::cout << app.help();
    return 0;
  } catch (const Interrupted& e) {
    std::cout.flush();
    std::cerr << "campo: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    // campo's tensors say how many bytes they wanted; this is a host-side container.
    std::cout.flush();
    std::cerr << "campo: error: out of memory: a buffer sized by the options (--batch, "
                 "--image-size, --limit-train, ...) does not fit in this machine's memory; try "
                 "smaller values\n";
    return 1;
  } catch (const std::length_error& e) {  // a container asked for more than it can hold
    std::cout.flush();
    std::cerr << "campo: error: out of memory: a buffer sized by the options (--batch, "
                 "--image-size, --limit-train, ...) is larger than any machine's memory ("
              << e.what() << "); try smaller values\n";
    return 1;
  } catch (const Error& e) {
    std::cout.flush();
    std::cerr << "campo: error: " << e.what() << "\n";
    if (std::getenv("CAMPO_DEBUG")) std::cerr << "  at " << e.where() << "\n";
    return 1;
  } catch (const dnnl::error& e) {
    std::cerr << "campo: error: oneDNN: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "campo: error: " << e.what() << "\n";
    return 1;
  }
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return run(args);
}

}  // namespace campo::cli
