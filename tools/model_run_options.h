// The options `campo plan` and `campo bench` share (a model run, perf/model_run.h): the
// model's shapes and precision options, --for, the calibration, and the checks of what the
// given policies use.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "perf/model_run.h"
#include "runtime/backend.h"
#include "runtime/path_check.h"

namespace campo::cli {

void add_model_run_options(CLI::App* cmd, ModelRunOptions& o, std::string& device,
                           std::string& optimizer, std::string& calibration);
// --for DEVICE --profile FILE [--from NAME] [--devices FILE] (plan and bench).
void add_plan_for_options(CLI::App* cmd, PlanForOptions& o);
// plan --for: the plan's device (its lists and default low precision) is the target's kind;
// --device, when given, must agree.
void resolve_plan_for_device(const CLI::App* cmd, const PlanForOptions& f, std::string& device);
// cost-aware plan/bench: run.calibration from --calibration, resolved once on the run's
// backend (perf/calibration_store.h's resolve_calibration, as campo train's): a file, loaded
// and checked against the backend's identity; none (the default: this machine's, on the CPU
// a quick automatic one when there is none; on a GPU none, and the profiling step times both
// precisions); "none" keeps the profiling of both precisions. `backend`: the run's, or null
// where the command makes none (plan), and then one for run.device is made here only if a
// calibration is needed.
void resolve_run_calibration(ModelRunOptions& run, const std::string& calibration, bool cost_aware,
                             std::shared_ptr<Backend> backend = nullptr);
// plan/bench: the precision options only the given policies use; what dcgan has no use for.
// The model's optimizer (models.h's training_defaults: bert and dcgan Adam) unless
// --optimizer says otherwise (set here).
void check_run_options_apply(const CLI::App* cmd, ModelRunOptions& run,
                             const std::string& optimizer,
                             const std::vector<std::string>& policies);
// --precision-policy for the given policies, before any work (a calibration, the profiling
// step): the file read and checked by each mixed policy's configuration, then the rules
// resolved on the model's training graph (check_precision_policy, train/training_graph.h); dcgan
// refuses them. Nothing without the option.
void check_run_precision_policy(const ModelRunOptions& run,
                                const std::vector<std::string>& policies);
// The files a plan or bench run reads (--calibration unless "none", --amp-lists-file,
// --precision-policy, --for's
// --profile and --devices), for check_distinct_paths with the command's outputs.
std::vector<PathUse> model_run_inputs(const ModelRunOptions& run, const std::string& calibration);

}  // namespace campo::cli
