// What the subcommands of the `campo` command line share: option helpers (the checked
// integer and seed validators, --device, --cuda-graph, --data-parallel, --conv-layout) and
// the test of whether the user gave an option. Each subcommand is a file of its own
// (tools/commands.h).
#pragma once

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "tools/paths.h"
#include "train/data_parallel.h"

namespace campo::cli {

// A seed is a whole number in 0 .. 2^64-1; CLI11's own conversion would wrap "-1" to
// 2^64-1 and 2^64 to 0.
extern const CLI::Validator kSeed;
// CLI11 saturates an int64 option silently ("--batch 99999999999999999999" becomes 2^63-1).
extern const CLI::Validator kInt64;
// --conv-layout's help (train and bench).
extern const char* const kConvLayoutHelp;
// --precision-policy's help (train, plan and bench).
extern const char* const kPrecisionPolicyHelp;

std::string join(const std::vector<std::string>& v);
// Puts kInt64 on the named options of `cmd`.
void check_int64(CLI::App* cmd, std::initializer_list<const char*> options);
// --device, parsed once (parse_device_spec) after the command line is read.
void add_device_option(CLI::App* cmd, std::string& device);
// --cuda-graph of the commands that run untimed steps (train, eval, bench), as given;
// parse_cuda_graph_mode reads it once, below.
void add_cuda_graph_option(CLI::App* cmd, std::string& mode);
// --deterministic of train and bench (Backend::set_deterministic), recorded in the JSON.
void add_deterministic_option(CLI::App* cmd, bool& deterministic);
// Whether the user gave `option` on the command line (a default does not count).
bool given(const CLI::App* cmd, const std::string& option);
// The option-applicability table (tools/cli.h's train_option_scopes) for a subcommand other
// than train: each scoped option that `cmd` has and the user gave must apply to a model of
// kind `model` and a data set of kind `data` (bit sets; kAllModels where the model is not
// known yet, as eval's model from its checkpoint). Unknown names (0) are left to later checks.
void check_option_scopes(const CLI::App* cmd, unsigned model, unsigned data);
// --low-precision when not given: the device's (bf16 on cpu, fp16 on cuda); bf16 for dcgan,
// whose sessions have no dynamic loss scaling yet (fp16 needs it).
void default_low_precision_of(const CLI::App* cmd, const DeviceSpec& device,
                              const std::string& model, std::string& low);
// Options a user gave that the run would ignore are errors, each naming the option and why.
// --conv-layout picks oneDNN's layouts of convolution activations: on a GPU every activation
// is NCHW (graph/executor.cc), and a model without convolutions has none (train and bench).
void check_conv_layout_applies(const CLI::App* cmd, const DeviceSpec& device,
                               const std::string& model);
// --data-parallel (its help: `what`), --bucket-mb, --comm-timeout of train and bench.
void add_data_parallel_options(CLI::App* cmd, DataParallelOptions& dp, const std::string& what);
void check_data_parallel_options_apply(const CLI::App* cmd, const DataParallelOptions& dp);

}  // namespace campo::cli
