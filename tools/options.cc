#include "tools/options.h"

#include <charconv>
#include <cstdint>

#include "amp/policy.h"
#include "models/models.h"
#include "runtime/check.h"
#include "tools/cli.h"

namespace campo::cli {

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

const char* const kConvLayoutHelp =
    "blocked: keep convolution activations in oneDNN's blocked layout (nChw16c with AVX-512, "
    "nChw8c with AVX2) between "
    "kernels; plain: NCHW everywhere, each convolution reordering its operands";

const char* const kPrecisionPolicyHelp =
    "amp and cost-aware: JSON rules that set the format (f32, bf16, f16, or for GEMMs an FP8 "
    "or MX operand format with a scaling recipe, emulated on the CPU: fp8, mxfp8, mxfp4, ...) "
    "of the nodes they select by op, node-name glob or first/last layers, a later rule "
    "overriding an earlier one; amp: over the lists' choice, cost-aware: pinned, the search "
    "decides the rest (docs/mixed-precision.md, docs/formats.md, "
    "examples/precision-policy.json)";

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

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

void add_deterministic_option(CLI::App* cmd, bool& deterministic) {
  cmd->add_flag("--deterministic", deterministic,
                "Kernels that give the same bits on every run: on cuda, only the cuDNN "
                "convolution algorithms cuDNN reports deterministic (no atomics; maybe "
                "slower). On cpu the kernels already are (oneDNN and campo's own, for one "
                "machine and thread count): accepted, changes nothing. The same plan: "
                "cost-aware's follows measured times, so runs may differ in plan. Recorded in "
                "the JSON as \"deterministic\"");
}

// Whether the user gave `option` on the command line (a default does not count).
bool given(const CLI::App* cmd, const std::string& option) { return cmd->count(option) > 0; }

void check_option_scopes(const CLI::App* cmd, unsigned model, unsigned data) {
  if (!model || !data) return;
  for (const OptionScope& scope : train_option_scopes())
    if (cmd->get_option_no_throw(scope.option))
      CAMPO_CHECK(!given(cmd, scope.option) || ((scope.models & model) && (scope.data & data)),
                  scope.option, " ", scope.why);
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

// Options a user gave that the run would ignore are errors, each naming the option and why.
// --conv-layout picks oneDNN's layouts: on a GPU every activation is NCHW (graph/executor.cc).
void check_conv_layout_applies(const CLI::App* cmd, const DeviceSpec& device,
                               const std::string& model) {
  if (!given(cmd, "--conv-layout")) return;
  // cpu:strict runs the CPU's kernels, so their layouts too.
  CAMPO_CHECK(device.type == Device::cpu || device.type == Device::cpu_strict,
              "--conv-layout applies to --device cpu only (on ", device.str(),
              " activations are always NCHW)");
  // Unknown names fail later, with their own line.
  CAMPO_CHECK(!is_known_model(model) || has_convolutions(model),
              "--conv-layout applies to models with convolutions; ", model, " has none");
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

}  // namespace campo::cli
