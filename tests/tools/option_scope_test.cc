// The option-applicability table of campo train (tools/cli.h's train_option_scopes), walked
// whole through the command line: every scoped option, given to a run of every model kind on
// every data-set kind that kind trains on, is refused with the table's reason when the run
// cannot use it, and let through otherwise (the run then stops at --epochs 0, the next check,
// before any work).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/tools/cli_test_util.h"
#include "tools/cli.h"
#include "tools/commands.h"

namespace campo {
namespace {

using testing::expect_error;
using testing::run_cli;

// A model and a data set of each kind, and the pairs campo train accepts at all.
const std::map<unsigned, std::string> kModels = {
    {cli::kClassifier, "lenet"}, {cli::kMaskedLm, "bert"}, {cli::kGan, "dcgan"}};
const std::map<unsigned, std::string> kData = {{cli::kIdx, "fashion-mnist"},
                                               {cli::kSynthetic, "synthetic"},
                                               {cli::kCifar, "cifar10"},
                                               {cli::kFolder, "folder:/nonexistent"},
                                               {cli::kText, "fortunes"}};
const std::map<unsigned, unsigned> kTrainsOn = {
    {cli::kClassifier, cli::kIdx | cli::kSynthetic | cli::kCifar | cli::kFolder},
    {cli::kMaskedLm, cli::kText},
    {cli::kGan, cli::kIdx | cli::kSynthetic}};

// A value each scoped option accepts (none: a flag).
const std::map<std::string, std::string> kValues = {{"--eval-batch", "100"},
                                                    {"--limit-test", "10"},
                                                    {"--data-dir", "/tmp"},
                                                    {"--image-size", "32"},
                                                    {"--channels", "3"},
                                                    {"--augment", "on"},
                                                    {"--resize", "40"},
                                                    {"--padding", "2"},
                                                    {"--skip-bad", ""},
                                                    {"--holdout", "0.1"},
                                                    {"--seq-len", "64"},
                                                    {"--vocab-size", "1000"},
                                                    {"--vocab", "/tmp/v"},
                                                    {"--save-vocab", "/tmp/v"},
                                                    {"--mask-prob", "0.2"},
                                                    {"--bert-config", "tiny"},
                                                    {"--samples-dir", "/tmp/s"},
                                                    {"--no-samples", ""},
                                                    {"--master-weights", "none"},
                                                    {"--optimizer-state", "bf16"},
                                                    {"--weight-rounding", "nearest"}};

TEST(OptionScopeTest, EveryOptionOfTheTableIsRefusedOutsideItsScopeOnly) {
  int refused = 0, accepted = 0;
  for (const cli::OptionScope& scope : cli::train_option_scopes()) {
    ASSERT_TRUE(kValues.count(scope.option)) << scope.option << " has no test value";
    for (const auto& [model_kind, model] : kModels)
      for (const auto& [data_kind, dataset] : kData) {
        if (!(kTrainsOn.at(model_kind) & data_kind)) continue;
        ASSERT_EQ(cli::model_kind(model), model_kind);
        ASSERT_EQ(cli::data_kind(dataset), data_kind);
        std::vector<std::string> args = {"train", "--model",   model, "--dataset",
                                         dataset, "--epochs",  "0",   "--progress",
                                         "none",  scope.option};
        if (!kValues.at(scope.option).empty()) args.push_back(kValues.at(scope.option));
        SCOPED_TRACE(scope.option + std::string(" with --model ") + model + " --dataset " +
                     dataset);
        const bool applies = (scope.models & model_kind) && (scope.data & data_kind);
        expect_error(run_cli(args), applies ? "--epochs must be positive"
                                            : std::string(scope.option) + " " + scope.why);
        ++(applies ? accepted : refused);
      }
  }
  // Both outcomes occur: the table is not vacuous either way.
  EXPECT_GT(refused, 20);
  EXPECT_GT(accepted, 20);
}

// The other subcommands take the table's options they have, and their own options that a
// given run cannot use are refused the same way: one line naming the option and why.
TEST(OptionScopeTest, OtherSubcommandsRefuseOptionsWithoutEffect) {
  expect_error(run_cli({"graph", "--dataset", "synthetic", "--data-dir", "/tmp"}),
               "--data-dir has no effect with --dataset synthetic");
  const std::string text_only = " applies to text data sets only";
  for (const char* option : {"--seq-len", "--mask-prob"}) {
    SCOPED_TRACE(option);
    // With --model, and without (the model is then the checkpoint's: the data set decides).
    expect_error(run_cli({"eval", "--checkpoint", "x", "--model", "lenet", "--dataset", "synthetic",
                          option, "1"}),
                 option + text_only);
    expect_error(run_cli({"eval", "--checkpoint", "x", option, "1"}), option + text_only);
  }
  expect_error(
      run_cli({"eval", "--checkpoint", "x", "--dataset", "synthetic", "--data-dir", "/tmp"}),
      "--data-dir has no effect with --dataset synthetic");
  expect_error(run_cli({"eval", "--checkpoint", "x", "--dataset", "fortunes", "--image-size", "8"}),
               "--image-size applies to image models and data sets");
  expect_error(run_cli({"bench", "--model", "mlp", "--conv-layout", "plain"}),
               "--conv-layout applies to models with convolutions; mlp has none");
  // --for plans from costs predicted from --profile: a calibration would not be read.
  const std::string profile = ::testing::TempDir() + "option_scope_profile.json";
  std::FILE* f = std::fopen(profile.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  expect_error(run_cli({"plan", "--for", "a100", "--profile", profile, "--calibration", "c.json"}),
               "--calibration has no effect with --for");
  expect_error(run_cli({"bench", "--precision", "cost-aware", "--for", "xeon-8480", "--profile",
                        profile, "--calibration", "c.json"}),
               "--calibration has no effect with --for");
  std::remove(profile.c_str());
}

// An empty path is refused everywhere with one line, never read as "not given" (a default):
// every path option of every subcommand (tools/cli.h's path_options), given ''.
TEST(OptionScopeTest, EveryPathOptionOfEverySubcommandRefusesAnEmptyOne) {
  const std::vector<std::pair<std::string, std::string>> paths = cli::path_options();
  const std::set<std::pair<std::string, std::string>> marked(paths.begin(), paths.end());
  // The list is not vacuous: the path options known to have read '' as "not given".
  for (const auto& known :
       std::vector<std::pair<std::string, std::string>>{{"train", "--samples-dir"},
                                                        {"train", "--profile-out"},
                                                        {"train", "--vocab"},
                                                        {"train", "--save"},
                                                        {"train", "--calibration"},
                                                        {"eval", "--checkpoint"},
                                                        {"eval", "--data-dir"},
                                                        {"graph", "--data-dir"},
                                                        {"plan", "--json"},
                                                        {"plan", "--profile"},
                                                        {"bench", "--json"},
                                                        {"predict", "--devices"},
                                                        {"calibrate", "--out"},
                                                        {"calibrate", "--samples"}})
    EXPECT_TRUE(marked.count(known)) << known.first << " " << known.second;
  for (const auto& [command, option] : paths) {
    SCOPED_TRACE(command + " " + option);
    std::vector<std::string> args = {command};
    // eval requires --checkpoint: a path of its own, given once.
    if (command == "eval" && option != "--checkpoint")
      args.insert(args.end(), {"--checkpoint", "x"});
    args.insert(args.end(), {option, ""});
    expect_error(run_cli(args), option + " needs a path, got an empty one");
  }
  EXPECT_GT(paths.size(), 25u);
}

TEST(OptionScopeTest, KindsOfModelsAndDataSets) {
  EXPECT_EQ(cli::model_kind("resnet50"), cli::kClassifier);
  EXPECT_EQ(cli::model_kind("bert"), cli::kMaskedLm);
  EXPECT_EQ(cli::model_kind("dcgan"), cli::kGan);
  EXPECT_EQ(cli::model_kind("nope"), 0u);
  EXPECT_EQ(cli::data_kind("mnist"), cli::kIdx);
  EXPECT_EQ(cli::data_kind("text:/tmp/a.txt"), cli::kText);
  EXPECT_EQ(cli::data_kind("folder:/data/imagenet"), cli::kFolder);
  EXPECT_EQ(cli::data_kind("nope"), 0u);
}

}  // namespace
}  // namespace campo
