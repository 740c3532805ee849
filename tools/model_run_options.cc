#include "tools/model_run_options.h"

#include <iostream>
#include <optional>

#include "models/models.h"
#include "perf/calibration_store.h"
#include "runtime/check.h"
#include "tools/options.h"
#include "train/options.h"

namespace campo::cli {

void add_model_run_options(CLI::App* cmd, ModelRunOptions& o, std::string& device,
                           std::string& optimizer, std::string& calibration) {
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
  cmd->add_option("--amp-lists-file", o.mixed.amp_lists_file, "JSON file of list edits")
      ->check(kPath);
  cmd->add_option("--precision-policy", o.mixed.precision_policy_file, kPrecisionPolicyHelp)
      ->check(kPath);
  optimizer = "sgd";
  cmd->add_option("--optimizer", optimizer, "sgd or adam")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Random seed")->check(kSeed)->capture_default_str();
  cmd->add_option("--calibration", calibration,
                  "cost-aware: calibration file (default: this machine's, found or made by a "
                  "quick calibration; 'none': time both precisions instead)")
      ->check(kPath);
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
                  "with --for: a campo train --profile-out file of this model")
      ->check(kPath);
  cmd->add_option("--from", o.from,
                  "with --for: the device the profile was measured on (default: its own)");
  cmd->add_option("--devices", o.devices_path,
                  "with --for: a device table to use instead of the built-in one")
      ->check(kPath);
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

// cost-aware plan/bench: run.calibration from --calibration, resolved once on the run's
// backend (perf/calibration_store.h's resolve_calibration, as campo train's): a file, loaded
// and checked against the backend's identity; none (the default: this machine's, on the CPU
// a quick automatic one when there is none; on a GPU none, and the profiling step times both
// precisions); "none" keeps the profiling of both precisions. `backend`: the run's, or null
// where the command makes none (plan), and then one for run.device is made here only if a
// calibration is needed.
void resolve_run_calibration(ModelRunOptions& run, const std::string& calibration, bool cost_aware,
                             std::shared_ptr<Backend> backend) {
  if (!cost_aware || run.plan_for.active() || calibration == "none") return;
  // auto: bf16's calibration (f16's low times are then measured, train/profiling.h).
  const DType low = low_type_of(parse_low_precision_mode(run.mixed.low_precision));
  if (!backend) backend = backend_for(run.device, run.cuda_graph, run.deterministic);
  run.calibration = resolve_calibration(calibration, *backend, low, std::cerr);
}

// plan/bench: the precision options only the given policies use; what dcgan has no use for.
// The model's optimizer (models.h's training_defaults: bert and dcgan Adam) unless
// --optimizer says otherwise (set here).
void check_run_options_apply(const CLI::App* cmd, ModelRunOptions& run,
                             const std::string& optimizer,
                             const std::vector<std::string>& policies) {
  run.optimizer = parse_optimizer(optimizer);
  CAMPO_CHECK(!given(cmd, "--classes") || has_accuracy(run.model),
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
    for (const char* option : {"--low-precision", "--loss-scale", "--amp-lists", "--amp-lists-file",
                               "--precision-policy"})
      CAMPO_CHECK(!given(cmd, option), option,
                  " has no effect with --precision fp32 (it applies to amp and cost-aware)");
  if (!cost_aware)
    for (const char* option : {"--calibration", "--search", "--no-fold-casts"})
      CAMPO_CHECK(!given(cmd, option), option, " applies to --precision cost-aware only");
  // --for plans from costs predicted from --profile; no calibration is read
  // (resolve_run_calibration).
  CAMPO_CHECK(!given(cmd, "--calibration") || !run.plan_for.active(),
              "--calibration has no effect with --for (its costs are predicted from --profile)");
}

void check_run_precision_policy(const ModelRunOptions& run,
                                const std::vector<std::string>& policies) {
  if (run.mixed.precision_policy_file.empty()) return;
  std::optional<TrainingGraphSpec> spec;
  for (const std::string& p : policies) {
    const Precision policy = parse_precision(p);
    if (policy == Precision::fp32) continue;            // bench's baseline reads no rules
    TrainingGraphSpec s = model_run_spec(run, policy);  // reads and checks the file
    if (!spec) spec = std::move(s);
  }
  if (!spec) return;  // check_run_options_apply refuses the file for fp32 alone
  if (step_graph_count(run.model) > 1)
    check_gan_precision(spec->precision);
  else
    check_precision_policy(*spec, run.device.type);
}

std::vector<PathUse> model_run_inputs(const ModelRunOptions& run, const std::string& calibration) {
  using K = PathUse::Kind;
  std::vector<PathUse> p = {{"--amp-lists-file", run.mixed.amp_lists_file, K::input_file},
                            {"--precision-policy", run.mixed.precision_policy_file, K::input_file},
                            {"--profile", run.plan_for.profile_path, K::input_file},
                            {"--devices", run.plan_for.devices_path, K::input_file}};
  if (calibration != "none") p.push_back({"--calibration", calibration, K::input_file});
  return p;
}

}  // namespace campo::cli
