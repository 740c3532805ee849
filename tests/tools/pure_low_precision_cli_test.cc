// Pure low-precision training through the command line (--master-weights none,
// --optimizer-state bf16, --weight-rounding; graph/optimizer.h, ops/op.h): LeNet trains on
// bf16 weights without f32 master copies with either rounding, and with bf16 Adam moments; the
// checkpoint stores bf16 (half the parameter bytes), campo eval reads it and the memory report
// counts it; updates below half a bf16 ulp stall with rounding to nearest and not with
// stochastic rounding; a run gives the same bits on one thread or two, and a resumed run
// continues bit for bit; every combination a run cannot do is one error line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "graph/checkpoint.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::CliResult;
using testing::expect_error;
using testing::json_event;
using testing::run_cli;

std::vector<double> train_losses(const std::string& metrics) {
  std::ifstream in(metrics);
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["event"] == "train") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

// LeNet on synthetic data under amp, batch 16 of 960 samples (60 steps an epoch), `steps`
// steps at a constant rate, saved to `save`.
std::vector<std::string> lenet(const testing::TempDir& dir, const std::string& steps,
                               const std::string& save, std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train",
                                "--model",
                                "lenet",
                                "--dataset",
                                "synthetic",
                                "--batch",
                                "16",
                                "--limit-train",
                                "960",
                                "--limit-test",
                                "64",
                                "--steps",
                                steps,
                                "--progress",
                                "none",
                                "--precision",
                                "amp",
                                "--lr-schedule",
                                "constant",
                                "--metrics",
                                dir.file("m.jsonl"),
                                "--save",
                                save};
  // An --precision in `extra` replaces amp.
  if (std::find(extra.begin(), extra.end(), "--precision") != extra.end())
    a.erase(std::find(a.begin(), a.end(), "--precision"),
            std::find(a.begin(), a.end(), "--precision") + 2);
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

bool is_state(const std::string& name) { return name.starts_with(kOptimizerStatePrefix); }

// The bytes of a checkpoint's model tensors (not the optimizer state) of dtype `dtype`, and of
// all its model tensors.
std::pair<size_t, size_t> model_bytes(const std::map<std::string, Tensor>& tensors, DType dtype) {
  size_t of_dtype = 0, all = 0;
  for (const auto& [name, t] : tensors) {
    if (is_state(name)) continue;
    all += t.nbytes();
    if (t.dtype() == dtype) of_dtype += t.nbytes();
  }
  return {of_dtype, all};
}

TEST(PureLowPrecisionCliTest, LeNetTrainsOnBf16WeightsWithoutMasterCopies) {
  testing::TempDir dir;
  const std::string f32 = dir.file("f32.safetensors");
  CliResult r = run_cli(lenet(dir, "60", f32));
  ASSERT_EQ(r.code, 0) << r.err;
  const double f32_weights_mib = json_event(r.out)["memory"]["weights_mib"].get<double>();
  struct Case {
    const char* name;
    std::vector<std::string> options;
    DType state;
  };
  const Case cases[] = {
      {"sgd, stochastic", {"--master-weights", "none"}, DType::f32},
      {"sgd, nearest", {"--master-weights", "none", "--weight-rounding", "nearest"}, DType::f32},
      {"adam, bf16 state",
       {"--master-weights", "none", "--optimizer", "adam", "--lr", "1e-3", "--optimizer-state",
        "bf16"},
       DType::bf16},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir.file("bf16.safetensors");
    r = run_cli(lenet(dir, "60", path, c.options));
    ASSERT_EQ(r.code, 0) << r.err;
    const std::vector<double> losses = train_losses(dir.file("m.jsonl"));
    ASSERT_GE(losses.size(), 5u);
    std::string curve;
    for (double l : losses) curve += std::to_string(l) + " ";
    for (double l : losses) EXPECT_TRUE(std::isfinite(l)) << curve;
    // The logged loss is the mean of the steps so far: it falls as the model learns.
    EXPECT_LT(losses.back(), 0.75 * losses.front()) << curve;
    const nlohmann::json result = json_event(r.out);
    EXPECT_EQ(result["master_weights"], "none");
    EXPECT_EQ(result["weight_rounding"],
              c.options.size() > 2 && c.options[3] == "nearest" ? "nearest" : "stochastic");
    // Half the weight bytes, in the memory report and in the checkpoint: every parameter is
    // BF16 there, the state in its own type.
    EXPECT_DOUBLE_EQ(result["memory"]["weights_mib"].get<double>(), f32_weights_mib / 2);
    const auto tensors = read_safetensors(path);
    const auto [bf16_bytes, all_bytes] = model_bytes(tensors, DType::bf16);
    EXPECT_EQ(bf16_bytes, all_bytes);
    EXPECT_EQ(2 * all_bytes, model_bytes(read_safetensors(f32), DType::f32).second);
    for (const auto& [name, t] : tensors)
      if (is_state(name)) EXPECT_EQ(t.dtype(), c.state) << name;
    // campo eval reads the bf16 checkpoint and scores what the run's own evaluation scored.
    const CliResult e = run_cli({"eval", "--checkpoint", path, "--dataset", "synthetic", "--limit",
                                 "64", "--batch", "500"});
    ASSERT_EQ(e.code, 0) << e.err;
    EXPECT_EQ(json_event(e.out, "eval")["test_accuracy"], result["test_accuracy"]) << e.out;
  }
}

// ResNet-18 (batch norm: its scale and offset are bf16 weights read through a cast to f32)
// and BERT (embeddings, layer norms, attention; Adam with bf16 moments) take a few steps on
// bf16 weights, and their checkpoints hold every parameter in BF16.
TEST(PureLowPrecisionCliTest, ResNet18AndBertTakeStepsOnBf16Weights) {
  testing::TempDir dir;
  const std::string resnet = dir.file("resnet.safetensors"), bert = dir.file("bert.safetensors");
  const std::vector<std::vector<std::string>> runs = {
      {"train", "--model",      "resnet18", "--dataset",        "synthetic", "--image-size",
       "32",    "--channels",   "3",        "--batch",          "4",         "--limit-train",
       "64",    "--limit-test", "8",        "--steps",          "3",         "--progress",
       "none",  "--precision",  "amp",      "--master-weights", "none",      "--save",
       resnet},
      {"train",    "--model",     "bert", "--bert-config",    "tiny", "--dataset",
       "fortunes", "--seq-len",   "16",   "--vocab-size",     "200",  "--batch",
       "8",        "--steps",     "3",    "--limit-test",     "8",    "--progress",
       "none",     "--precision", "amp",  "--master-weights", "none", "--optimizer-state",
       "bf16",     "--save",      bert}};
  for (const auto& args : runs) {
    SCOPED_TRACE(args[2]);
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(std::isfinite(json_event(r.out)["final_loss"].get<double>())) << r.out;
    const auto tensors = read_safetensors(args.back());
    const auto [bf16_bytes, all_bytes] = model_bytes(tensors, DType::bf16);
    size_t buffers = 0;  // batch norm's running statistics (f32) and step counts (i64)
    for (const auto& [name, t] : tensors)
      if (!is_state(name) && name.find("running_") == std::string::npos &&
          name.find("num_batches_tracked") == std::string::npos)
        EXPECT_EQ(t.dtype(), DType::bf16) << name;
      else if (!is_state(name))
        buffers += t.nbytes();
    EXPECT_EQ(bf16_bytes + buffers, all_bytes);
  }
}

// The bf16 weights of a LeNet run of `steps` steps of plain SGD at `lr`, by name.
std::map<std::string, Tensor> weights_after(const testing::TempDir& dir, const std::string& lr,
                                            const std::string& steps, const std::string& rounding) {
  const std::string path = dir.file(rounding + steps + ".safetensors");
  const CliResult r = run_cli(lenet(
      dir, steps, path,
      {"--master-weights", "none", "--weight-rounding", rounding, "--lr", lr, "--momentum", "0"}));
  EXPECT_EQ(r.code, 0) << r.err;
  std::map<std::string, Tensor> weights;
  for (auto& [name, t] : read_safetensors(path))
    if (!is_state(name)) weights.emplace(name, t);
  return weights;
}

// Elements that differ between two sets of bf16 weights, and the elements in all.
std::pair<int64_t, int64_t> changed(const std::map<std::string, Tensor>& a,
                                    const std::map<std::string, Tensor>& b) {
  int64_t differ = 0, all = 0;
  for (const auto& [name, t] : a) {
    const Tensor& u = b.at(name);
    for (int64_t i = 0; i < t.numel(); ++i)
      differ += t.data_as<uint16_t>()[i] != u.data_as<uint16_t>()[i];
    all += t.numel();
  }
  return {differ, all};
}

// The point of stochastic rounding: at a learning rate whose updates lie below half a bf16
// ulp of almost every weight, rounding to nearest puts almost every weight back where it was
// after every step (only weights near zero, whose ulp is tiny, or with the largest gradients
// move), while stochastic rounding moves each one with probability |update| / ulp, so the
// weights follow the f32 trajectory on average. Steps 2 to 41 of plain SGD at lr 5e-4.
TEST(PureLowPrecisionCliTest, TinyUpdatesStallWithNearestRoundingButNotStochastic) {
  testing::TempDir dir;
  const std::string lr = "5e-4";
  const auto nearest1 = weights_after(dir, lr, "1", "nearest");
  const auto nearest41 = weights_after(dir, lr, "41", "nearest");
  const auto stochastic1 = weights_after(dir, lr, "1", "stochastic");
  const auto stochastic41 = weights_after(dir, lr, "41", "stochastic");
  const auto [stalled, all] = changed(nearest1, nearest41);
  const auto [moved, all2] = changed(stochastic1, stochastic41);
  ASSERT_EQ(all, all2);
  // Measured (seed 42): 462 of 61,706 weights changed with nearest rounding, 8,020 with
  // stochastic rounding.
  EXPECT_LT(double(stalled), 0.02 * double(all)) << stalled << " of " << all;
  EXPECT_GT(double(moved), 0.05 * double(all)) << moved << " of " << all;
  EXPECT_GT(moved, 10 * stalled) << moved << " vs " << stalled;
}

bool same_tensors(const std::string& a_path, const std::string& b_path) {
  const auto a = read_safetensors(a_path), b = read_safetensors(b_path);
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    if (!b.count(name)) return false;
    const Tensor& u = b.at(name);
    if (t.dtype() != u.dtype() || t.nbytes() != u.nbytes() ||
        std::memcmp(t.data(), u.data(), t.nbytes()) != 0) {
      ADD_FAILURE() << name << " differs";
      return false;
    }
  }
  return true;
}

// Stochastic rounding draws from Philox streams keyed by the seed, the update and the step:
// a run on one thread and one on two store the same bits (so do their bf16 steps).
TEST(PureLowPrecisionCliTest, SameBitsOnOneThreadOrTwo) {
  testing::TempDir dir;
  const std::vector<std::string> pure = {"--master-weights", "none", "--optimizer-state", "bf16"};
  auto with_threads = [&](const char* threads) {
    std::vector<std::string> a = pure;
    a.insert(a.end(), {"--threads", threads});
    return a;
  };
  const std::string one = dir.file("one.safetensors"), two = dir.file("two.safetensors");
  ASSERT_EQ(run_cli(lenet(dir, "6", one, with_threads("1"))).code, 0);
  ASSERT_EQ(run_cli(lenet(dir, "6", two, with_threads("2"))).code, 0);
  EXPECT_TRUE(same_tensors(one, two));
}

// 8 steps straight and 4 + --resume + 4 end with the same bf16 weights and state, bit for bit
// (the stochastic rounding's streams follow the executor step the checkpoint keeps), for SGD
// and for Adam with bf16 moments.
TEST(PureLowPrecisionCliTest, AResumedRunContinuesBitForBit) {
  for (const std::vector<std::string>& options :
       {std::vector<std::string>{"--master-weights", "none"},
        std::vector<std::string>{"--master-weights", "none", "--optimizer", "adam", "--lr", "1e-3",
                                 "--optimizer-state", "bf16"}}) {
    SCOPED_TRACE(options.size() > 2 ? "adam" : "sgd");
    testing::TempDir dir;
    const std::string straight = dir.file("straight.safetensors");
    const std::string half = dir.file("half.safetensors"),
                      resumed = dir.file("resumed.safetensors");
    ASSERT_EQ(run_cli(lenet(dir, "8", straight, options)).code, 0);
    ASSERT_EQ(run_cli(lenet(dir, "4", half, options)).code, 0);
    std::vector<std::string> resume = options;
    resume.insert(resume.end(), {"--resume", half});
    const CliResult r = run_cli(lenet(dir, "8", resumed, resume));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(same_tensors(straight, resumed));
  }
}

TEST(PureLowPrecisionCliTest, CombinationsARunCannotDoAreOneLine) {
  testing::TempDir dir;
  const std::string save = dir.file("x.safetensors");
  auto refused = [&](std::vector<std::string> options, const std::string& needle) {
    SCOPED_TRACE(needle);
    expect_error(run_cli(lenet(dir, "2", save, std::move(options))), needle);
  };
  refused({"--master-weights", "bf16"}, "--master-weights must be f32 or none, got 'bf16'");
  refused({"--optimizer-state", "fp16"}, "--optimizer-state must be f32 or bf16, got 'fp16'");
  refused({"--optimizer-state", "fp8"}, "--optimizer-state fp8 (MS-AMP O2");
  refused({"--master-weights", "none", "--weight-rounding", "up"},
          "--weight-rounding must be nearest or stochastic, got 'up'");
  refused({"--weight-rounding", "nearest"},
          "--weight-rounding rounds what the optimizer stores in bf16");
  refused({"--master-weights", "none", "--precision", "fp32"},
          "--master-weights none trains on bf16 weights, which --precision fp32 would cast");
  refused({"--master-weights", "none", "--low-precision", "fp16"},
          "--master-weights none stores the weights in bf16: use --low-precision bf16");
  refused({"--master-weights", "none", "--device", "cuda"},
          "--master-weights none is not built for cuda yet");
  refused({"--optimizer-state", "bf16", "--device", "cuda"},
          "--optimizer-state bf16 is not built for cuda yet");
  refused({"--master-weights", "none", "--array", "2"},
          "--master-weights none does not support model arrays yet");
  expect_error(run_cli({"train", "--model", "dcgan", "--dataset", "synthetic", "--steps", "1",
                        "--master-weights", "none"}),
               "--master-weights does not support dcgan yet");
}

}  // namespace
}  // namespace campo
