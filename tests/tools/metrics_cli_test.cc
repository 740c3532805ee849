// `campo train --metrics FILE --tensorboard DIR`: the JSON lines and the event file hold the
// losses the progress lines print, at the same steps, and the test accuracy; an array logs
// every model; a resumed run appends; paths that cannot be written, and dcgan, are one error
// line. With PEERS_PY (a python with tensorboard, bench/setup-peers), TensorBoard's own
// reader reads the event file back through scripts/read-tensorboard.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"
#include "tests/train/tfevents_reader.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::DecodedEvent;
using testing::event_files;
using testing::expect_error;
using testing::json_event;
using testing::read_event_file;
using testing::run_cli;
using testing::scalar_of;
using testing::TempDir;

// LeNet on 48 synthetic samples in batches of 16: 3 steps an epoch, so every step has a
// progress line, and a run of 6 steps crosses an epoch. Each test names a --precision or
// gives --calibration none (cost-aware without this machine's calibration cache).
std::vector<std::string> lenet_args(const TempDir& dir, std::vector<std::string> extra,
                                    const std::string& steps = "6") {
  std::vector<std::string> a = {"train",     "--model",       "lenet", "--dataset",
                                "synthetic", "--epochs",      "2",     "--batch",
                                "16",        "--limit-train", "48",    "--limit-test",
                                "64",        "--progress",    "lines"};
  a.insert(a.end(),
           {"--steps", steps, "--metrics", dir.file("m.jsonl"), "--tensorboard", dir.file("tb")});
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::vector<nlohmann::json> with_event(const std::vector<nlohmann::json>& lines,
                                       const std::string& event) {
  std::vector<nlohmann::json> out;
  for (const auto& j : lines)
    if (j.value("event", "") == event) out.push_back(j);
  return out;
}

// The progress lines ("epoch E/N step S/M loss X ...") as their words.
std::vector<std::vector<std::string>> progress_lines(const std::string& out) {
  std::vector<std::vector<std::string>> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("epoch ", 0) != 0) continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    lines.push_back(w);
  }
  return lines;
}

// The word after `key` in a progress line.
std::string word_after(const std::vector<std::string>& words, const std::string& key) {
  auto it = std::find(words.begin(), words.end(), key);
  return it == words.end() || it + 1 == words.end() ? "" : *(it + 1);
}

std::string fixed(double v, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  return text;
}

TEST(MetricsCliTest, LinesAndEventsHoldTheProgressLinesLosses) {
  TempDir dir;
  auto r = run_cli(lenet_args(dir, {"--calibration", "none"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto progress = progress_lines(r.out);
  ASSERT_EQ(progress.size(), 6u) << r.out;
  const std::vector<nlohmann::json> lines = read_json_lines(dir.file("m.jsonl"));
  const std::vector<nlohmann::json> steps = with_event(lines, "train");
  ASSERT_EQ(steps.size(), 6u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["step"], int64_t(i) + 1);
    EXPECT_EQ(steps[i]["epoch"], i < 3 ? 1 : 2);
    EXPECT_EQ(progress[i][1], std::to_string(i < 3 ? 1 : 2) + "/2");
    EXPECT_EQ(fixed(steps[i]["loss"].get<double>(), 4), word_after(progress[i], "loss"));
    EXPECT_EQ(steps[i]["loss_scale"], 1.0);  // cost-aware in bf16: no loss scaling
    EXPECT_EQ(steps[i]["skipped_steps"], 0);
    EXPECT_GT(steps[i]["samples_per_sec"].get<double>(), 0);
  }
  EXPECT_EQ(steps[0]["lr"], 0.05);  // the cosine schedule starts at --lr
  EXPECT_LT(steps[5]["lr"].get<double>(), steps[0]["lr"].get<double>());
  const std::vector<nlohmann::json> evals = with_event(lines, "eval");
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(lines.back(), evals[0]);
  EXPECT_EQ(evals[0]["step"], 6);
  EXPECT_EQ(evals[0]["test_accuracy"], json_event(r.out)["test_accuracy"]);

  const std::vector<std::string> files = event_files(dir.file("tb"));
  ASSERT_EQ(files.size(), 1u);
  const std::vector<DecodedEvent> events = read_event_file(files[0]);
  ASSERT_EQ(events.size(), 8u);  // file_version, 6 steps, the evaluation
  for (size_t i = 0; i < steps.size(); ++i) {
    const DecodedEvent& e = events[i + 1];
    EXPECT_EQ(e.step, steps[i]["step"].get<int64_t>());
    EXPECT_EQ(scalar_of(e, "train/loss"), float(steps[i]["loss"].get<double>()));
    EXPECT_EQ(scalar_of(e, "train/lr"), float(steps[i]["lr"].get<double>()));
    EXPECT_EQ(scalar_of(e, "train/loss_scale"), 1.0f);
    EXPECT_EQ(scalar_of(e, "train/samples_per_sec"),
              float(steps[i]["samples_per_sec"].get<double>()));
  }
  EXPECT_EQ(events[7].step, 6);
  EXPECT_EQ(scalar_of(events[7], "eval/accuracy"), float(evals[0]["test_accuracy"].get<double>()));
}

TEST(MetricsCliTest, DynamicLossScaleIsTheProgressLinesToo) {
  TempDir dir;
  auto r = run_cli(lenet_args(dir, {"--precision", "amp", "--low-precision", "fp16"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto progress = progress_lines(r.out);
  const std::vector<nlohmann::json> steps =
      with_event(read_json_lines(dir.file("m.jsonl")), "train");
  ASSERT_EQ(steps.size(), progress.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(fixed(steps[i]["loss_scale"].get<double>(), 0),
              word_after(progress[i], "loss_scale"));
    EXPECT_EQ(std::to_string(steps[i]["skipped_steps"].get<int64_t>()),
              word_after(progress[i], "skipped"));
    EXPECT_EQ(fixed(steps[i]["loss"].get<double>(), 4), word_after(progress[i], "loss"));
  }
}

TEST(MetricsCliTest, AnArrayLogsEveryModel) {
  TempDir dir;
  auto r = run_cli(lenet_args(
      dir, {"--precision", "fp32", "--array", "2", "--lr", "0.05,0.02", "--seed", "1,2"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto progress = progress_lines(r.out);
  ASSERT_EQ(progress.size(), 6u) << r.out;
  const std::vector<nlohmann::json> lines = read_json_lines(dir.file("m.jsonl"));
  const std::vector<nlohmann::json> steps = with_event(lines, "train");
  ASSERT_EQ(steps.size(), 6u);
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_EQ(steps[i]["losses"].size(), 2u);
    const double a = steps[i]["losses"][0], b = steps[i]["losses"][1];
    // The progress line prints the models' range, lowest..highest.
    EXPECT_EQ(fixed(std::min(a, b), 4) + ".." + fixed(std::max(a, b), 4),
              word_after(progress[i], "loss"));
    ASSERT_EQ(steps[i]["lrs"].size(), 2u);
  }
  EXPECT_EQ(steps[0]["lrs"], (nlohmann::json{0.05, 0.02}));
  const std::vector<nlohmann::json> evals = with_event(lines, "eval");
  ASSERT_EQ(evals.size(), 1u);
  const nlohmann::json result = json_event(r.out);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_EQ(evals[0]["test_accuracies"][i], result["models"][i]["test_accuracy"]);

  const std::vector<DecodedEvent> events = read_event_file(event_files(dir.file("tb")).at(0));
  ASSERT_EQ(events.size(), 8u);
  for (size_t i = 0; i < steps.size(); ++i)
    for (int m = 0; m < 2; ++m) {
      const std::string suffix = "/model_" + std::to_string(m);
      EXPECT_EQ(scalar_of(events[i + 1], "train/loss" + suffix),
                float(steps[i]["losses"][size_t(m)].get<double>()));
      EXPECT_EQ(scalar_of(events[i + 1], "train/lr" + suffix),
                float(steps[i]["lrs"][size_t(m)].get<double>()));
    }
  EXPECT_EQ(scalar_of(events[7], "eval/accuracy/model_1"),
            float(evals[0]["test_accuracies"][1].get<double>()));
}

TEST(MetricsCliTest, AResumedRunAppendsItsSteps) {
  TempDir dir;
  const std::string ckpt = dir.file("run.safetensors");
  auto first = run_cli(lenet_args(dir, {"--precision", "fp32", "--save", ckpt}, "3"));
  ASSERT_EQ(first.code, 0) << first.err << first.out;
  auto resumed = run_cli(lenet_args(dir, {"--precision", "fp32", "--resume", ckpt}));
  ASSERT_EQ(resumed.code, 0) << resumed.err << resumed.out;
  std::vector<int64_t> steps;
  std::vector<std::string> events;
  for (const auto& j : read_json_lines(dir.file("m.jsonl"))) {
    events.push_back(j["event"]);
    steps.push_back(j["step"]);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"train", "train", "train", "eval", "resume", "train",
                                              "train", "train", "eval"}));
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 3, 3, 4, 5, 6, 6}));
  const std::vector<std::string> files = event_files(dir.file("tb"));
  ASSERT_EQ(files.size(), 2u);
  const std::vector<DecodedEvent> second = read_event_file(files[1]);
  ASSERT_GE(second.size(), 2u);
  EXPECT_TRUE(second[1].session_start);
  EXPECT_EQ(second[1].step, 4);
}

TEST(MetricsCliTest, PathsThatCannotBeWrittenFailBeforeTraining) {
  TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  const std::string missing = dir.file("no_such_dir/m.jsonl");
  auto r = run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--precision", "fp32",
                    "--metrics", missing});
  expect_error(r, "--metrics file " + missing + ": directory " + dir.file("no_such_dir") +
                      " does not exist");
  EXPECT_EQ(r.out.find("campo: training"), std::string::npos) << r.out;
  r = run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--precision", "fp32",
               "--tensorboard", dir.file("file")});
  expect_error(r, "--tensorboard directory " + dir.file("file"));
  EXPECT_EQ(r.out.find("campo: training"), std::string::npos) << r.out;
  r = run_cli({"train", "--model", "lenet", "--array", "2", "--dataset", "synthetic", "--precision",
               "fp32", "--tensorboard", dir.file("file/tb")});
  expect_error(r, "--tensorboard directory " + dir.file("file/tb"));
  expect_error(run_cli({"train", "--metrics", ""}), "--metrics needs a path, got an empty one");
  expect_error(run_cli({"train", "--tensorboard", ""}),
               "--tensorboard needs a path, got an empty one");
  // DCGAN (its own options' checks) likewise, before its data or graphs are made.
  r = run_cli({"train", "--model", "dcgan", "--dataset", "synthetic", "--metrics", missing});
  expect_error(r, "--metrics file " + missing + ": directory ");
  EXPECT_EQ(r.out.find("campo: training"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir.file("m.jsonl")));
  EXPECT_FALSE(fs::exists(dir.file("tb")));
}

// DCGAN runs the same loop: its values (loss_D, loss_G, D(x), D(G(z)) before and after D's
// update) are the progress lines' and go to --metrics and --tensorboard by name.
TEST(MetricsCliTest, DcganLogsItsValuesByName) {
  TempDir dir;
  auto r =
      run_cli({"train", "--model", "dcgan", "--dataset", "synthetic", "--image-size", "32",
               "--batch", "8", "--limit-train", "32", "--progress", "lines", "--samples-dir",
               dir.file("s"), "--metrics", dir.file("m.jsonl"), "--tensorboard", dir.file("tb")});
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto progress = progress_lines(r.out);
  const std::vector<nlohmann::json> steps =
      with_event(read_json_lines(dir.file("m.jsonl")), "train");
  ASSERT_EQ(progress.size(), 4u) << r.out;  // every step of a 4-batch epoch
  ASSERT_EQ(steps.size(), 4u);
  const std::vector<std::string> files = event_files(dir.file("tb"));
  ASSERT_EQ(files.size(), 1u);
  const std::vector<DecodedEvent> events = read_event_file(files[0]);
  ASSERT_EQ(events.size(), 5u);  // file_version, 4 steps; no evaluation
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_FALSE(steps[i].contains("loss"));
    EXPECT_EQ(fixed(steps[i]["loss_d"].get<double>(), 4), word_after(progress[i], "loss_D"));
    EXPECT_EQ(fixed(steps[i]["loss_g"].get<double>(), 4), word_after(progress[i], "loss_G"));
    EXPECT_EQ(fixed(steps[i]["d_x"].get<double>(), 4), word_after(progress[i], "D(x)"));
    EXPECT_EQ(fixed(steps[i]["d_g_z1"].get<double>(), 4) + "/" +
                  fixed(steps[i]["d_g_z2"].get<double>(), 4),
              word_after(progress[i], "D(G(z))"));
    EXPECT_EQ(steps[i]["lr"], 2e-4);  // the DCGAN paper's rate, constant
    EXPECT_EQ(scalar_of(events[i + 1], "train/loss_d"), float(steps[i]["loss_d"].get<double>()));
    EXPECT_EQ(scalar_of(events[i + 1], "train/loss_g"), float(steps[i]["loss_g"].get<double>()));
  }
}

// Runs `command` in a shell; its stdout and exit status.
std::pair<std::string, int> run_command(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {"", -1};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  return {out, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// TensorBoard's own reader (scripts/read-tensorboard: EventAccumulator, or TensorFlow's
// summary_iterator where tensorboard is not installed) reads the event file campo wrote: the
// losses it returns are the progress lines'.
TEST(MetricsCliTest, TensorBoardReadsTheEventFile) {
  const char* python = std::getenv("PEERS_PY");
  if (!python || !*python)
    GTEST_SKIP() << "PEERS_PY is not set (a python with tensorboard or tensorflow: bash "
                    "bench/setup-peers, then PEERS_PY=~/.cache/campo/peers/bin/python)";
  const std::string py = "'" + std::string(python) + "'";
  if (run_command(py +
                  " -c 'import importlib.util as u, sys; sys.exit(not (u.find_spec(\"tensorboard\")"
                  " or u.find_spec(\"tensorflow\")))' 2>/dev/null")
          .second != 0)
    GTEST_SKIP() << "PEERS_PY=" << python << " has neither tensorboard nor tensorflow";
  TempDir dir;
  auto r = run_cli(lenet_args(dir, {"--precision", "fp32"}));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const auto [out, status] = run_command(py + " " CAMPO_SOURCE_DIR "/scripts/read-tensorboard '" +
                                         dir.file("tb") + "' 2>'" + dir.file("stderr.txt") + "'");
  std::ifstream err_file(dir.file("stderr.txt"));
  const std::string err((std::istreambuf_iterator<char>(err_file)),
                        std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << out << err;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> by_tag;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    by_tag[j["tag"]].emplace_back(j["step"], j["value"]);
  }
  const auto progress = progress_lines(r.out);
  const auto& losses = by_tag["train/loss"];
  ASSERT_EQ(losses.size(), progress.size()) << out;
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_EQ(losses[i].first, int64_t(i) + 1);
    EXPECT_EQ(fixed(losses[i].second, 4), word_after(progress[i], "loss"));
  }
  for (const char* tag : {"train/lr", "train/loss_scale", "train/samples_per_sec"})
    EXPECT_EQ(by_tag[tag].size(), progress.size()) << tag;
  ASSERT_EQ(by_tag["eval/accuracy"].size(), 1u);
  EXPECT_EQ(float(by_tag["eval/accuracy"][0].second),
            float(json_event(r.out)["test_accuracy"].get<double>()));
}

}  // namespace
}  // namespace campo
