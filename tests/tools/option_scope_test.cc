// The option-applicability table of campo train (tools/cli.h's train_option_scopes), walked
// whole through the command line: every scoped option, given to a run of every model kind on
// every data-set kind that kind trains on, is refused with the table's reason when the run
// cannot use it, and let through otherwise (the run then stops at --epochs 0, the next check,
// before any work).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/tools/cli_test_util.h"
#include "tools/cli.h"

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
const std::map<std::string, std::string> kValues = {
    {"--eval-batch", "100"},   {"--limit-test", "10"},     {"--data-dir", "/tmp"},
    {"--image-size", "32"},    {"--channels", "3"},        {"--augment", "on"},
    {"--resize", "40"},        {"--padding", "2"},         {"--skip-bad", ""},
    {"--holdout", "0.1"},      {"--seq-len", "64"},        {"--vocab-size", "1000"},
    {"--vocab", "/tmp/v"},     {"--save-vocab", "/tmp/v"}, {"--mask-prob", "0.2"},
    {"--bert-config", "tiny"}, {"--samples-dir", "/tmp/s"}};

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
