// Every path option of every subcommand, pairwise: two options naming one file, where one of
// them writes it, are refused before any work with one line naming both, and the file is
// left as it was (runtime/path_check.h). The one pair allowed is --save over --resume (a
// run continued in place).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::CliResult;
using testing::run_cli;
using testing::TempDir;

namespace fs = std::filesystem;

struct PathOption {
  const char* name;
  bool output;
};

// A subcommand's command line in which every option of `options` applies; `defaults`: the
// value an option takes when the pair under test does not name it (an option another one
// needs: bert's text data set, --for's profile).
struct Subcommand {
  const char* what;
  std::vector<std::string> base;
  std::vector<PathOption> options;
  std::vector<std::pair<std::string, std::string>> defaults = {};
};

// `other`: an existing file that is none of the pair's.
std::vector<Subcommand> subcommands(const std::string& other) {
  const std::vector<std::string> lenet = {"--model", "lenet", "--dataset", "synthetic",
                                          "--steps", "1",     "--batch",   "8"};
  auto with = [](std::vector<std::string> a, std::vector<std::string> b) {
    a.insert(a.begin(), b.begin(), b.end());
    return a;
  };
  return {
      {"train (classifier, cost-aware)",
       with(lenet, {"train", "--precision", "cost-aware"}),
       {{"--resume", false},
        {"--amp-lists-file", false},
        {"--precision-policy", false},
        {"--calibration", false},
        {"--save", true},
        {"--profile-out", true},
        {"--metrics", true},
        {"--tensorboard", true}}},
      {"train (bert on a text file)",
       {"train", "--model", "bert", "--bert-config", "tiny", "--steps", "1", "--precision", "fp32"},
       {{"--dataset", false}, {"--vocab", false}, {"--save-vocab", true}, {"--metrics", true}},
       {{"--dataset", "text:" + other}}},
      {"train (dcgan)",
       {"train", "--model", "dcgan", "--dataset", "synthetic", "--steps", "1", "--precision",
        "fp32"},
       {{"--resume", false}, {"--save", true}, {"--samples-dir", true}, {"--metrics", true}}},
      {"plan",
       {"plan", "--model", "lenet", "--precision", "cost-aware"},
       {{"--calibration", false},
        {"--amp-lists-file", false},
        {"--precision-policy", false},
        {"--json", true},
        {"--dot", true},
        {"--alloc-trace", true}}},
      {"plan --for",
       {"plan", "--model", "lenet", "--for", "h100"},
       {{"--profile", false}, {"--devices", false}, {"--json", true}, {"--dot", true}},
       {{"--profile", other}}},
      {"bench",
       {"bench", "--model", "lenet", "--precision", "cost-aware", "--steps", "1"},
       {{"--calibration", false},
        {"--amp-lists-file", false},
        {"--precision-policy", false},
        {"--json", true}}},
      {"train (files of a data set)",
       {"train", "--model", "lenet", "--dataset", "fashion-mnist", "--steps", "1", "--precision",
        "fp32"},
       {{"--data-dir", false}, {"--save", true}, {"--metrics", true}, {"--tensorboard", true}}},
      {"calibrate",
       {"calibrate", "--quick"},
       {{"--out", true}, {"--samples", true}, {"--counters", true}}},
      {"predict",
       {"predict", "--device", "h100"},
       {{"--profile", false}, {"--devices", false}, {"--json", true}}},
  };
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The value an option takes to name `path`: --dataset names a text file as text:PATH.
std::string value_for(const char* option, const std::string& path) {
  return std::string(option) == "--dataset" ? "text:" + path : path;
}

TEST(PathCollisionCliTest, EveryPairOfPathOptionsNamingOneFileIsRefused) {
  int pairs = 0;
  TempDir elsewhere;
  const std::string other = elsewhere.file("other.txt");
  std::ofstream(other) << "another file\n";
  for (const Subcommand& s : subcommands(other))
    for (size_t i = 0; i < s.options.size(); ++i)
      for (size_t j = i + 1; j < s.options.size(); ++j) {
        const PathOption &a = s.options[i], &b = s.options[j];
        if (!a.output && !b.output) continue;  // two inputs may be one file
        TempDir dir;
        const std::string file = dir.file("one");
        const bool input = !a.output || !b.output;
        if (input) std::ofstream(file) << "the user's data\n";  // an input exists
        std::vector<std::string> args = s.base;
        for (const PathOption* o : {&a, &b}) {
          args.push_back(o->name);
          args.push_back(value_for(o->name, file));
        }
        for (const auto& [option, value] : s.defaults)
          if (option != a.name && option != b.name) {
            args.push_back(option);
            args.push_back(value);
          }
        const CliResult r = run_cli(args);
        const std::string pair = std::string(s.what) + ": " + a.name + " and " + b.name;
        const bool continued_in_place =
            std::string(a.name) == "--resume" && std::string(b.name) == "--save";
        if (continued_in_place) {
          EXPECT_EQ(r.err.find("are the same"), std::string::npos) << pair << ": " << r.err;
          continue;
        }
        ++pairs;
        EXPECT_NE(r.code, 0) << pair;
        EXPECT_NE(r.err.find("are the same"), std::string::npos) << pair << ": " << r.err;
        EXPECT_NE(r.err.find(a.name), std::string::npos) << pair << ": " << r.err;
        EXPECT_NE(r.err.find(b.name), std::string::npos) << pair << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << pair << ": " << r.err;
        if (input)
          EXPECT_EQ(read(file), "the user's data\n") << pair << ": the input was written";
        else
          EXPECT_FALSE(fs::exists(file)) << pair << ": an output was written";
      }
  EXPECT_EQ(pairs, 62);  // the table above, less the input pairs and --save over --resume
}

TEST(PathCollisionCliTest, OneFileUnderOtherNamesIsOneFile) {
  TempDir dir;
  const std::string data = dir.file("run.safetensors");
  std::ofstream(data) << "not a checkpoint, but the user's\n";
  fs::create_symlink(data, dir.file("link"));
  fs::create_directory(dir.file("sub"));
  // The same file through "sub/..", "./" and a link, each as an input and as another output.
  for (const std::string& other :
       {dir.file("sub/../run.safetensors"), dir.str() + "/./run.safetensors", dir.file("link")}) {
    const CliResult r = run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps",
                                 "1", "--precision", "fp32", "--resume", data, "--metrics", other});
    testing::expect_error(r, "are the same file");
    EXPECT_EQ(read(data), "not a checkpoint, but the user's\n") << other;
  }
  // Outputs that do not exist yet: the same folder and name.
  const CliResult r = run_cli({"plan", "--model", "lenet", "--precision", "fp32", "--json",
                               dir.file("sub/../p.json"), "--dot", dir.file("p.json")});
  testing::expect_error(r, "--dot");
  EXPECT_FALSE(fs::exists(dir.file("p.json")));
}

TEST(PathCollisionCliTest, AFileNeverReplacesADirectoryAnotherOptionNames) {
  TempDir dir;
  const std::string board = dir.file("board");
  const CliResult r =
      run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "1", "--precision",
               "fp32", "--tensorboard", board, "--save", board});
  testing::expect_error(r, "--save " + board + " and --tensorboard " + board + " are the same");
  EXPECT_FALSE(fs::exists(board));
}

}  // namespace
}  // namespace campo
