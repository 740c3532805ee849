// The command line: bad input gives one clear error line and a non-zero exit code.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "graph/checkpoint.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::CliResult;
using testing::expect_error;
using testing::run_cli;

const std::vector<std::string> kQuick = {"--limit-train", "256", "--limit-test", "64",
                                         "--progress",    "none"};

std::vector<std::string> train_args(std::vector<std::string> extra) {
  std::vector<std::string> a = {"train"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(CliTest, VersionSaysWhatTheBuildHas) {
  auto r = run_cli({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("campo "), std::string::npos);
  EXPECT_NE(r.out.find("cuda: "), std::string::npos);
  EXPECT_NE(r.out.find("onednn: "), std::string::npos);
  EXPECT_NE(r.out.find("bf16: "), std::string::npos);
}

TEST(CliTest, HelpOnSubcommand) {
  auto r = run_cli({"train", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--lr"), std::string::npos) << r.out;
}

TEST(CliTest, UnknownModel) {
  expect_error(run_cli(train_args({"--model", "resnet9000"})), "unknown model 'resnet9000'");
}

TEST(CliTest, BatchZero) {
  expect_error(run_cli(train_args({"--batch", "0"})), "--batch must be a positive");
}

TEST(CliTest, NegativeLearningRate) {
  expect_error(run_cli(train_args({"--lr", "-0.1"})), "--lr must be a positive learning rate");
}

TEST(CliTest, CudaDeviceWithoutGpuOrKernels) {
  if (testing::have_cuda_backend()) GTEST_SKIP() << "this build and machine have a CUDA backend";
  auto r = run_cli(train_args({"--device", "cuda"}));
  expect_error(r, "--device cuda");
}

// A step whose memory plan exceeds what the machine has is refused before anything is
// allocated or run (ResNet-50 at 224 px, batch 60000: several TiB), with a batch that fits.
TEST(CliTest, AStepLargerThanMemoryIsRefusedBeforeWork) {
  const auto r = run_cli({"train", "--model", "resnet50", "--dataset", "synthetic", "--image-size",
                          "224", "--channels", "3", "--batch", "60000", "--precision", "fp32",
                          "--steps", "1", "--progress", "none"});
  expect_error(r, "(its memory plan: activations, gradients and inputs), more than the ");
  EXPECT_NE(r.err.find("at --batch 60000; about --batch "), std::string::npos) << r.err;
}

TEST(CliTest, UnknownDevice) { expect_error(run_cli(train_args({"--device", "tpu"})), "tpu"); }

TEST(CliTest, UnknownPrecision) {
  expect_error(run_cli(train_args({"--precision", "fp8"})), "unknown precision policy 'fp8'");
  expect_error(run_cli({"plan", "--model", "mlp", "--precision", "fp8"}),
               "unknown precision policy 'fp8'");
  expect_error(run_cli({"bench", "--model", "mlp", "--precision", "fp32,fp8"}),
               "unknown precision policy 'fp8'");
}

TEST(CliTest, UnknownConvLayout) {
  expect_error(run_cli(train_args({"--conv-layout", "nhwc"})),
               "--conv-layout must be blocked or plain, got 'nhwc'");
  expect_error(run_cli({"bench", "--model", "lenet", "--conv-layout", "nchw"}),
               "--conv-layout must be blocked or plain, got 'nchw'");
}

TEST(CliTest, ConvLayoutIsRefusedOffTheCpu) {
  // Checked with the options, before any backend: the same line with or without a GPU.
  expect_error(run_cli(train_args({"--device", "cuda", "--conv-layout", "plain"})),
               "--conv-layout applies to --device cpu only (on cuda:0");
  expect_error(
      run_cli({"bench", "--model", "lenet", "--device", "cuda:1", "--conv-layout", "blocked"}),
      "--conv-layout applies to --device cpu only (on cuda:1");
}

// Options that would change nothing are refused, not ignored.
TEST(CliTest, OptionsWithoutEffectForTheModelOrDataSetAreOneLine) {
  expect_error(run_cli(train_args({"--model", "mlp", "--conv-layout", "plain"})),
               "--conv-layout applies to models with convolutions; mlp has none");
  expect_error(run_cli(train_args({"--dataset", "synthetic", "--data-dir", "/tmp"})),
               "--data-dir has no effect with --dataset synthetic (it reads no files)");
}

TEST(CliTest, UnknownOption) {
  auto r = run_cli(train_args({"--bogus", "1"}));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--bogus"), std::string::npos) << r.err;
}

TEST(CliTest, UnknownDataset) {
  expect_error(run_cli(train_args({"--dataset", "imagenet22k"})), "imagenet22k");
}

class CliDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("campo_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream f(dir_ / name, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  static std::vector<uint8_t> header(uint32_t magic, std::vector<uint32_t> dims) {
    std::vector<uint8_t> b;
    auto put = [&](uint32_t v) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
    };
    put(magic);
    for (uint32_t d : dims) put(d);
    return b;
  }
  fs::path dir_;
};

TEST_F(CliDataTest, MissingDataFiles) {
  expect_error(run_cli(train_args({"--data-dir", dir_.string()})), dir_.string());
}

TEST_F(CliDataTest, WrongMagicNumber) {
  for (const char* split : {"train", "t10k"}) {
    auto images = header(0x00000999, {10, 28, 28});
    images.resize(images.size() + 10 * 28 * 28);
    write(std::string(split) + "-images-idx3-ubyte", images);
    auto labels = header(0x00000801, {10});
    labels.resize(labels.size() + 10);
    write(std::string(split) + "-labels-idx1-ubyte", labels);
  }
  expect_error(run_cli(train_args({"--data-dir", dir_.string()})), "magic");
}

TEST_F(CliDataTest, TruncatedImageFile) {
  for (const char* split : {"train", "t10k"}) {
    auto images = header(0x00000803, {10, 28, 28});
    images.resize(images.size() + 5 * 28 * 28);  // half the pixels
    write(std::string(split) + "-images-idx3-ubyte", images);
    auto labels = header(0x00000801, {10});
    labels.resize(labels.size() + 10);
    write(std::string(split) + "-labels-idx1-ubyte", labels);
  }
  expect_error(run_cli(train_args({"--data-dir", dir_.string()})), "truncated");
}

TEST(CliTrainTest, TrainsMlpAndPrintsJson) {
  // The default precision is cost-aware; "--calibration none" keeps the test off this
  // machine's calibration cache (the profiling step times both precisions instead);
  // "--no-guard" keeps cost-aware whatever the guard would time on this machine.
  std::vector<std::string> a =
      train_args({"--model", "mlp", "--dataset", "synthetic", "--epochs", "1", "--lr", "0.05",
                  "--calibration", "none", "--no-guard"});
  a.insert(a.end(), kQuick.begin(), kQuick.end());
  auto r = run_cli(a);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json json = testing::json_event(r.out);
  for (const char* key : {"test_accuracy", "samples_per_sec", "final_loss", "wall_seconds"})
    EXPECT_TRUE(json.contains(key)) << key << " missing from " << r.out;
  EXPECT_EQ(json.value("precision", ""), "cost-aware") << r.out;
}

// ---- outputs are checked before any work is spent ----

class CliOutputTest : public CliDataTest {
 protected:
  // A path whose directory does not exist.
  std::string missing_dir_path(const std::string& name) const {
    return (dir_ / "no_such_dir" / name).string();
  }
};

const std::vector<std::string> kQuickFp32 = {"--model",      "mlp",  "--dataset",     "synthetic",
                                             "--precision",  "fp32", "--limit-train", "256",
                                             "--limit-test", "64",   "--progress",    "lines"};

TEST_F(CliOutputTest, TrainSaveToAMissingDirectoryFailsBeforeTraining) {
  std::vector<std::string> a = train_args({"--save", missing_dir_path("a.safetensors")});
  a.insert(a.end(), kQuickFp32.begin(), kQuickFp32.end());
  auto r = run_cli(a);
  expect_error(r, "--save checkpoint " + missing_dir_path("a.safetensors"));
  EXPECT_EQ(r.out.find("campo: training"), std::string::npos) << r.out;
}

// The tensors of a safetensors file: everything after its 8-byte header length and JSON
// header (the metadata may differ between runs; the tensor bytes must not).
std::string checkpoint_tensor_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8) return {};
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | uint8_t(bytes[size_t(i)]);
  return bytes.size() < 8 + header ? std::string() : bytes.substr(size_t(8 + header));
}

// One update node for all parameters (the default) and --no-multi-tensor-updates train the
// same bits: LeNet's saved weights and optimizer state are byte for byte equal after a few
// steps, with SGD in fp32 and with Adam under amp fp16 (loss scaling: the updates read the
// AllFinite flag).
TEST_F(CliOutputTest, MultiTensorUpdatesTrainTheSameBitsAsSeparateOnes) {
  const std::vector<std::vector<std::string>> runs = {
      {"--precision", "fp32", "--optimizer", "sgd", "--nesterov", "--weight-decay", "1e-4"},
      {"--precision", "amp", "--low-precision", "fp16", "--optimizer", "adam"}};
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<std::string> saved;
    for (bool separate : {false, true}) {
      const std::string ckpt =
          (dir_ / (std::to_string(i) + (separate ? "_separate" : "_multi") + ".safetensors"))
              .string();
      std::vector<std::string> a = train_args(
          {"--model", "lenet", "--dataset", "synthetic", "--steps", "4", "--batch", "16",
           "--limit-train", "256", "--limit-test", "64", "--progress", "none", "--save", ckpt});
      a.insert(a.end(), runs[i].begin(), runs[i].end());
      if (separate) a.push_back("--no-multi-tensor-updates");
      const CliResult r = run_cli(a);
      ASSERT_EQ(r.code, 0) << r.err;
      saved.push_back(checkpoint_tensor_bytes(ckpt));
    }
    EXPECT_FALSE(saved[0].empty()) << "run " << i;
    EXPECT_TRUE(saved[0] == saved[1]) << "run " << i << ": the checkpoints' tensors differ";
  }
}

// A checkpoint whose weights are finite but huge makes every logit inf or NaN: campo eval
// says so in one line and fails, instead of printing an accuracy computed from garbage.
TEST_F(CliOutputTest, EvalOfWeightsWhoseOutputsAreNotFiniteIsOneLine) {
  const std::string ckpt = (dir_ / "huge.safetensors").string();
  std::vector<std::string> a = train_args({"--save", ckpt, "--steps", "2"});
  a.insert(a.end(), kQuickFp32.begin(), kQuickFp32.end());
  ASSERT_EQ(run_cli(a).code, 0);
  const std::vector<std::string> eval = {"eval",      "--checkpoint", ckpt, "--dataset",
                                         "synthetic", "--limit",      "64"};
  ASSERT_EQ(run_cli(eval).code, 0);  // the trained weights evaluate
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : read_safetensors(ckpt)) {
    if (name.find("weight") != std::string::npos && t.dtype() == DType::f32)
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = 3e38f;
    tensors.emplace_back(name, t);
  }
  write_safetensors(ckpt, tensors, read_safetensors_metadata(ckpt));
  const CliResult r = run_cli(eval);
  expect_error(r, "evaluation: the model's outputs are not finite (inf or NaN)");
  EXPECT_EQ(r.out.find("accuracy"), std::string::npos) << r.out;
}

// A checkpoint whose metadata holds 1 MB of terminal escapes and newlines: campo eval's
// error is one short line that shows them escaped (before: the whole megabyte, raw).
TEST_F(CliOutputTest, EvalShowsHostileCheckpointMetadataEscapedAndCut) {
  const std::string ckpt = (dir_ / "hostile.safetensors").string();
  std::vector<std::string> a = train_args({"--save", ckpt, "--steps", "1"});
  a.insert(a.end(), kQuickFp32.begin(), kQuickFp32.end());
  ASSERT_EQ(run_cli(a).code, 0);
  std::string hostile = "\x1b[2J\x1b[31m\n";
  while (hostile.size() < (1u << 20)) hostile += "line\r\n\x1b[1A";
  std::map<std::string, std::string> meta = read_safetensors_metadata(ckpt);
  meta["campo.step"] = hostile;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : read_safetensors(ckpt)) tensors.emplace_back(name, t);
  write_safetensors(ckpt, tensors, meta);
  const CliResult r = run_cli({"eval", "--checkpoint", ckpt, "--dataset", "synthetic"});
  expect_error(r, "metadata 'campo.step' is '\\x1b[2J\\x1b[31m\\x0aline\\x0d\\x0a\\x1b[1A");
  EXPECT_NE(r.err.find(" more bytes)', not an integer"), std::string::npos) << r.err.substr(0, 400);
  EXPECT_LT(r.err.size(), 1500u) << r.err.substr(0, 400);
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err.substr(0, 400);
}

// Resuming a checkpoint that is already at the run's last step trains nothing: one line
// saying so, not a "checkpoint" line for a file never written and a final loss of 0.
TEST_F(CliOutputTest, ResumeWithNothingLeftToTrainIsOneLine) {
  const std::string ckpt = (dir_ / "done.safetensors").string();
  const std::string next = (dir_ / "next.safetensors").string();
  std::vector<std::string> a = train_args({"--save", ckpt, "--steps", "3"});
  a.insert(a.end(), kQuickFp32.begin(), kQuickFp32.end());
  ASSERT_EQ(run_cli(a).code, 0);
  std::vector<std::string> again = train_args({"--resume", ckpt, "--save", next, "--steps", "3"});
  again.insert(again.end(), kQuickFp32.begin(), kQuickFp32.end());
  expect_error(run_cli(again), "--resume checkpoint " + ckpt +
                                   " is at step 3, where this run of 3 steps ends: nothing left "
                                   "to train (raise --steps or --epochs)");
  EXPECT_FALSE(std::filesystem::exists(next));
}

TEST_F(CliOutputTest, TrainSaveToADirectoryFailsBeforeTraining) {
  std::vector<std::string> a = train_args({"--save", dir_.string()});
  a.insert(a.end(), kQuickFp32.begin(), kQuickFp32.end());
  auto r = run_cli(a);
  expect_error(r, "--save checkpoint " + dir_.string());
  EXPECT_EQ(r.out.find("campo: training"), std::string::npos) << r.out;
}

TEST_F(CliOutputTest, TrainResumeFromAMissingFileFailsBeforeTraining) {
  std::vector<std::string> a = train_args({"--resume", (dir_ / "none.safetensors").string()});
  a.insert(a.end(), kQuickFp32.begin(), kQuickFp32.end());
  auto r = run_cli(a);
  expect_error(r, "--resume checkpoint " + (dir_ / "none.safetensors").string());
  EXPECT_EQ(r.out.find("campo: training"), std::string::npos) << r.out;
}

TEST_F(CliOutputTest, PlanJsonAndDotToAMissingDirectoryFailBeforeThePlan) {
  for (const char* option : {"--json", "--dot"}) {
    auto r = run_cli(
        {"plan", "--model", "lenet", "--precision", "amp", option, missing_dir_path("plan.out")});
    expect_error(r, missing_dir_path("plan.out"));
    EXPECT_EQ(r.out.find("plan: "), std::string::npos) << option << ": " << r.out;
  }
  // dcgan writes one DOT file per step graph.
  auto r = run_cli({"plan", "--model", "dcgan", "--image-size", "32", "--precision", "amp", "--dot",
                    missing_dir_path("g.dot")});
  expect_error(r, missing_dir_path("g_d.dot"));
  EXPECT_EQ(r.out.find("plan: "), std::string::npos) << r.out;
}

TEST_F(CliOutputTest, PlanAllocTraceWritesEveryValueOnce) {
  expect_error(run_cli({"plan", "--model", "lenet", "--precision", "fp32", "--alloc-trace",
                        missing_dir_path("t.txt")}),
               missing_dir_path("t.txt"));
  expect_error(run_cli({"plan", "--model", "dcgan", "--image-size", "32", "--precision", "fp32",
                        "--alloc-trace", (dir_ / "t.txt").string()}),
               "campo plan --alloc-trace does not support --model dcgan");
  const std::string path = (dir_ / "t.txt").string();
  const auto r =
      run_cli({"plan", "--model", "lenet", "--precision", "fp32", "--alloc-trace", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + path), std::string::npos) << r.out;
  std::ifstream in(path);
  std::string line, header;
  std::map<int, int> events_of;  // id -> 1 allocated, 2 allocated and freed
  int allocs = 0, frees = 0;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) {
      header += line + "\n";
      continue;
    }
    std::istringstream words(line);
    std::string op;
    int id = -1;
    words >> op >> id;
    if (op == "a") {
      size_t bytes = 0;
      words >> bytes;
      EXPECT_GT(bytes, 0u) << line;
      EXPECT_EQ(events_of[id]++, 0) << "allocated twice: " << line;
      ++allocs;
    } else {
      EXPECT_EQ(op, "f") << line;
      EXPECT_EQ(events_of[id]++, 1) << "freed unallocated or twice: " << line;
      ++frees;
    }
  }
  EXPECT_NE(header.find("# written by: campo plan --model lenet --batch 64"), std::string::npos)
      << header;
  // The variables and the inputs are never freed; every value of the step is.
  EXPECT_GT(frees, 0);
  EXPECT_LT(frees, allocs);
  EXPECT_EQ(events_of.count(0), 1u);
  EXPECT_EQ(events_of[0], 1);  // the first variable
}

TEST_F(CliOutputTest, BenchJsonToAMissingDirectoryFailsBeforeTheBench) {
  auto r = run_cli({"bench", "--model", "lenet", "--precision", "fp32", "--steps", "1", "--warmup",
                    "0", "--repeats", "1", "--json", missing_dir_path("b.json")});
  expect_error(r, "--json file " + missing_dir_path("b.json"));
  EXPECT_EQ(r.out.find("fp32"), std::string::npos) << r.out;
}

TEST_F(CliOutputTest, CalibrateOutputsThatCannotBeWrittenFailBeforeMeasuring) {
  // The calibration file's folder is created when missing, but not under a regular file.
  write("file", {1, 2, 3});
  const std::string under_file = (dir_ / "file" / "sub" / "c.json").string();
  auto r = run_cli({"calibrate", "--quick", "--models", "lenet", "--out", under_file});
  expect_error(r, "--out calibration file " + under_file);
  EXPECT_EQ(r.out.find("calibrate: "), std::string::npos) << r.out;
  r = run_cli({"calibrate", "--quick", "--models", "lenet", "--out", dir_.string()});
  expect_error(r, "--out calibration file " + dir_.string());
  EXPECT_EQ(r.out.find("calibrate: "), std::string::npos) << r.out;
  r = run_cli({"calibrate", "--quick", "--models", "lenet", "--out", (dir_ / "c.json").string(),
               "--samples", missing_dir_path("s.json")});
  expect_error(r, "--samples file " + missing_dir_path("s.json"));
  EXPECT_EQ(r.out.find("calibrate: "), std::string::npos) << r.out;
}

TEST_F(CliOutputTest, DcganSamplesDirUnderAFileFailsBeforeTraining) {
  write("file", {1, 2, 3});
  auto r = run_cli(train_args({"--model", "dcgan", "--dataset", "synthetic", "--image-size", "32",
                               "--precision", "fp32", "--limit-train", "64", "--batch", "8",
                               "--samples-dir", (dir_ / "file" / "samples").string()}));
  expect_error(r, "--samples-dir");
  EXPECT_EQ(r.out.find("campo: training"), std::string::npos) << r.out;
}

// ---- dcgan: every train option is honoured or refused ----

const std::vector<std::string> kDcgan = {
    "--model",     "dcgan", "--dataset",     "synthetic", "--image-size", "32",
    "--precision", "fp32",  "--limit-train", "16",        "--batch",      "8",
    "--steps",     "1",     "--progress",    "none",      "--no-samples"};

std::vector<std::string> dcgan_args(std::vector<std::string> extra) {
  std::vector<std::string> a = train_args(kDcgan);
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(CliDcganTest, CheckpointOptionsAreHonoured) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("campo_cli_gan_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  auto r = run_cli(dcgan_args({"--save", path, "--save-every", "1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("campo: checkpoint " + path), std::string::npos) << r.out;
  // The run was one step of an epoch of two: resuming trains the second.
  std::vector<std::string> resume = dcgan_args({"--resume", path});
  for (size_t i = 0; i + 1 < resume.size(); ++i)
    if (resume[i] == "--steps") resume[i + 1] = "2";
  r = run_cli(resume);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("resumed from " + path + " at step 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"steps\":2"), std::string::npos) << r.out;
  // A GAN has no accuracy, and two step graphs: eval and graph say so in one line.
  expect_error(run_cli({"eval", "--checkpoint", path, "--dataset", "synthetic"}),
               "dcgan is a GAN: it has no accuracy to evaluate");
  expect_error(run_cli({"graph", "--model", "dcgan"}),
               "dcgan trains two step graphs: see them with campo plan --model dcgan");
  std::filesystem::remove(path);
  // A missing resume file used to start from scratch and exit 0.
  expect_error(run_cli(dcgan_args({"--resume", "/no/such/file.safetensors"})),
               "--resume checkpoint");
  expect_error(run_cli(dcgan_args({"--save-every", "10"})), "--save-every needs --save");
}

// A dcgan checkpoint's position counts steps of its batch: resumed at another --batch it would
// name other samples, so it is refused, as a classifier's checkpoint is.
TEST(CliDcganTest, ResumeAtAnotherBatchIsRefused) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("campo_cli_gan_batch_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  auto r = run_cli(dcgan_args({"--save", path}));  // --batch 8
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_safetensors_metadata(path).at("global_batch"), "8");
  std::vector<std::string> resume = dcgan_args({"--resume", path});
  for (size_t i = 0; i + 1 < resume.size(); ++i) {
    if (resume[i] == "--steps") resume[i + 1] = "2";
    if (resume[i] == "--batch") resume[i + 1] = "4";
  }
  expect_error(run_cli(resume),
               "was written by steps of 8 samples (--batch); this run's take 4: resume it with "
               "--batch 8");
  std::filesystem::remove(path);
}

TEST(CliDcganTest, OptimizerOptionsAreHonoured) {
  auto r = run_cli(dcgan_args({"--optimizer", "sgd", "--momentum", "0.5", "--nesterov"}));
  EXPECT_EQ(r.code, 0) << r.err;
  // dcgan trains with Adam unless told otherwise: momentum would be ignored.
  expect_error(run_cli(dcgan_args({"--momentum", "0.5"})),
               "--momentum applies to --optimizer sgd only, not adam");
  expect_error(run_cli(dcgan_args({"--nesterov"})),
               "--nesterov applies to --optimizer sgd only, not adam");
  expect_error(run_cli(dcgan_args({"--optimizer", "rmsprop"})), "unknown optimizer 'rmsprop'");
}

TEST(CliDcganTest, ScheduleOptionsAreHonoured) {
  auto r = run_cli(dcgan_args({"--lr-schedule", "step", "--lr-step-epochs", "2", "--lr-gamma",
                               "0.5", "--warmup-steps", "5"}));
  EXPECT_EQ(r.code, 0) << r.err;
  r = run_cli(dcgan_args({"--lr-schedule", "cosine"}));
  EXPECT_EQ(r.code, 0) << r.err;
  // dcgan trains at a constant rate unless told otherwise: the step options would be ignored.
  expect_error(run_cli(dcgan_args({"--lr-gamma", "0.5"})),
               "--lr-gamma applies to --lr-schedule step only, not constant");
  expect_error(run_cli(dcgan_args({"--lr-schedule", "linear"})), "--lr-schedule must be");
}

TEST(CliDcganTest, EvaluationAndDataOptionsAreRefused) {
  // The option table's lines (tests/tools/option_scope_test.cc walks all of it).
  expect_error(run_cli(dcgan_args({"--eval-batch", "10"})),
               "--eval-batch applies to models with an evaluation (dcgan has none)");
  expect_error(run_cli(dcgan_args({"--limit-test", "10"})), "--limit-test applies to models");
  expect_error(run_cli(dcgan_args({"--dropout", "0.1"})),
               "--dropout applies to --model mlp and bert only (dcgan has no configurable");
  expect_error(run_cli(dcgan_args({"--augment", "on"})),
               "--augment applies to cifar10 and folder data sets");
  expect_error(run_cli(dcgan_args({"--holdout", "0.1"})),
               "--holdout applies to folder data sets only");
}

TEST(CliDcganTest, UnknownDeviceIsAnError) {
  expect_error(run_cli(dcgan_args({"--device", "tpu"})), "tpu");
}

TEST(CliDcganTest, DeviceCudaWithoutGpuIsAnError) {
  if (testing::have_cuda_backend()) GTEST_SKIP() << "this build and machine have a CUDA backend";
  expect_error(run_cli(dcgan_args({"--device", "cuda"})), "--device cuda");
}

TEST(CliDcganTest, ProfileAndAdamOptionsAreHonoured) {
  auto r = run_cli(dcgan_args({"--profile", "--optimizer", "adam", "--weight-decay", "0.01"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("time per op over 1 steps"), std::string::npos) << r.out;
  expect_error(run_cli(dcgan_args({"--weight-decay", "-1"})), "--weight-decay");
}

// ---- options that would not apply are errors ----

TEST(CliOptionTest, MomentumAndNesterovNeedSgd) {
  expect_error(run_cli(train_args({"--optimizer", "adam", "--momentum", "0.5"})),
               "--momentum applies to --optimizer sgd only");
  expect_error(run_cli(train_args({"--optimizer", "adam", "--nesterov"})),
               "--nesterov applies to --optimizer sgd only");
}

TEST(CliOptionTest, DropoutNeedsAModelWithDropout) {
  expect_error(run_cli(train_args({"--model", "lenet", "--dropout", "0.3"})),
               "--dropout applies to --model mlp and bert only");
}

TEST(CliOptionTest, MixedPrecisionOptionsWithFp32) {
  for (auto option : {std::vector<std::string>{"--amp-lists", "allow+=Tanh"},
                      {"--amp-lists-file", "lists.json"},
                      {"--calibration", "none"},
                      {"--search", "traversals"},
                      {"--no-fold-casts"},
                      {"--loss-scale", "dynamic"},
                      {"--loss-scale-init", "1024"},
                      {"--loss-scale-growth-interval", "100"},
                      {"--low-precision", "fp16"}}) {
    std::vector<std::string> a = train_args({"--precision", "fp32"});
    a.insert(a.end(), option.begin(), option.end());
    expect_error(run_cli(a), option[0] + " has no effect with --precision fp32");
  }
}

TEST(CliOptionTest, CostAwareOptionsWithAmp) {
  for (auto option : {std::vector<std::string>{"--calibration", "none"},
                      {"--search", "traversals"},
                      {"--no-fold-casts"}}) {
    std::vector<std::string> a = train_args({"--precision", "amp"});
    a.insert(a.end(), option.begin(), option.end());
    expect_error(run_cli(a), option[0] + " applies to --precision cost-aware only");
  }
  expect_error(run_cli({"plan", "--precision", "amp", "--search", "traversals"}),
               "--search applies to --precision cost-aware only");
  expect_error(run_cli({"bench", "--precision", "fp32", "--amp-lists", "allow+=Tanh"}),
               "--amp-lists has no effect with --precision fp32");
}

TEST(CliOptionTest, LossScaleSettingsNeedDynamicScaling) {
  expect_error(run_cli(train_args(
                   {"--precision", "amp", "--low-precision", "bf16", "--loss-scale-init", "1024"})),
               "--loss-scale-init has no effect without dynamic loss scaling");
}

TEST(CliOptionTest, SaveEveryNeedsSave) {
  expect_error(run_cli(train_args({"--save-every", "10"})), "--save-every needs --save");
}

TEST(CliOptionTest, StepScheduleOptionsNeedTheStepSchedule) {
  expect_error(run_cli(train_args({"--lr-gamma", "0.5"})),
               "--lr-gamma applies to --lr-schedule step only, not cosine");
  expect_error(run_cli(train_args({"--lr-schedule", "constant", "--lr-step-epochs", "3"})),
               "--lr-step-epochs applies to --lr-schedule step only");
}

// Every named choice is parsed once, before any work, into its enumeration: one line naming
// the option and what it got.
TEST(CliOptionTest, UnknownChoicesNameTheirOption) {
  expect_error(run_cli(train_args({"--progress", "loud"})),
               "--progress must be auto, bar, lines or none, got 'loud'");
  expect_error(run_cli(train_args({"--dataset", "cifar10", "--augment", "yes"})),
               "--augment must be auto, on or off, got 'yes'");
  expect_error(run_cli(train_args({"--optimizer", "rmsprop"})),
               "unknown optimizer 'rmsprop' (expected sgd or adam)");
  expect_error(run_cli({"graph", "--model", "mlp", "--optimizer", "lamb"}),
               "unknown optimizer 'lamb' (expected sgd or adam)");
  expect_error(run_cli({"plan", "--model", "mlp", "--optimizer", "lamb"}),
               "unknown optimizer 'lamb' (expected sgd or adam)");
}

TEST(CliOptionTest, NegativePaddingIsAnError) {
  expect_error(run_cli(train_args({"--dataset", "cifar10", "--padding", "-4"})),
               "--padding must be zero or positive, got -4");
}

TEST(CliOptionTest, SamplesDirNeedsDcgan) {
  expect_error(run_cli(train_args({"--samples-dir", "x"})),
               "--samples-dir applies to --model dcgan only");
}

TEST(CliOptionTest, SeedsOutsideUint64AreErrors) {
  for (const char* seed : {"-1", "18446744073709551616", "1.5", "abc"}) {
    expect_error(run_cli(train_args({"--seed", seed})), "--seed");
    expect_error(run_cli(train_args({"--seed", seed})), std::string("'") + seed + "'");
    expect_error(run_cli({"plan", "--seed", seed}), "--seed");
    expect_error(run_cli({"eval", "--checkpoint", "x", "--seed", seed}), "--seed");
  }
}

TEST(CliOptionTest, NotANumberSaysWhichOptionAndWhatItGot) {
  auto r = run_cli(train_args({"--epochs", "abc"}));
  expect_error(r, "--epochs expects a number (in its range), got 'abc'");
  EXPECT_EQ(r.err.find("Could not convert"), std::string::npos) << r.err;
  r = run_cli(train_args({"--batch", "abc"}));
  expect_error(r, "--batch: expects a whole number (in its 64-bit range), got 'abc'");
  EXPECT_EQ(r.err.find("Could not convert"), std::string::npos) << r.err;
  expect_error(run_cli({"bench", "--repeats", "1.5"}), "--repeats expects a number");
  expect_error(run_cli({"bench", "--steps", "999999999999"}), "--steps expects a number");
}

TEST(CliOptionTest, EmptyPathsAreErrors) {
  for (const char* option : {"--save", "--resume", "--data-dir"})
    expect_error(run_cli(train_args({option, ""})),
                 std::string(option) + " needs a path, got an empty one");
}

TEST(CliOptionTest, LossScaleNumbersNameTheirOption) {
  expect_error(run_cli(train_args(
                   {"--precision", "amp", "--loss-scale", "dynamic", "--loss-scale-init", "-5"})),
               "--loss-scale-init must be positive");
  expect_error(run_cli(train_args({"--precision", "amp", "--loss-scale", "dynamic",
                                   "--loss-scale-growth-interval", "0"})),
               "--loss-scale-growth-interval must be positive");
}

// A scale the dynamic scaling cannot recover from is refused: 1e-45 used to halve to 0, after
// which every step was skipped (1/0 makes every gradient inf) and the run still exited 0.
TEST(CliOptionTest, LossScaleInitOutsideItsRangeIsRefused) {
  for (const char* init : {"1e-45", "1e-5", "1e20", "3e38"}) {
    SCOPED_TRACE(init);
    expect_error(run_cli(train_args(
                     {"--precision", "amp", "--loss-scale", "dynamic", "--loss-scale-init", init})),
                 "--loss-scale-init must be in [2^-14, 2^64]");
  }
}

// A run whose every step of 100 in a row is skipped (inf or NaN gradients at every scale)
// fails with one line instead of exiting 0 with weights that no longer change. Made here by
// a checkpoint whose scale (2^126, the most a checkpoint may hold) overflows fp16 for more
// than 100 halvings.
TEST(CliOptionTest, HundredSkippedStepsInARowFailTheRun) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("campo_cli_skipped_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  std::vector<std::string> args = {
      "train", "--model",         "mlp",  "--dataset", "synthetic", "--precision",
      "amp",   "--low-precision", "fp16", "--batch",   "8",         "--limit-train",
      "2000",  "--limit-test",    "64",   "--threads", "1",         "--progress",
      "none",  "--steps",         "1",    "--save",    path};
  auto r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, std::string> metadata = read_safetensors_metadata(path);
  ASSERT_TRUE(metadata.count("loss_scale"));
  metadata["loss_scale"] = "8.5e37";
  const std::map<std::string, Tensor> tensors = read_safetensors(path);
  write_safetensors(path, {tensors.begin(), tensors.end()}, metadata);
  args.back() = path + ".next";
  args.insert(args.end(), {"--resume", path});
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == "--steps") args[i + 1] = "120";
  expect_error(run_cli(args), "the last 100 steps (to step 101) were all skipped");
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".next");
}

TEST(CliOptionTest, Int64OptionsDoNotSaturate) {
  expect_error(run_cli(train_args({"--batch", "99999999999999999999"})),
               "--batch: expects a whole number (in its 64-bit range), got '99999999999999999999'");
  expect_error(run_cli({"plan", "--batch", "99999999999999999999"}), "--batch");
  expect_error(run_cli({"eval", "--checkpoint", "x", "--limit", "99999999999999999999"}),
               "--limit");
}

TEST(CliOptionTest, ChannelsMustBeOneOrThree) {
  expect_error(run_cli(train_args({"--dataset", "synthetic", "--channels", "7"})),
               "--channels must be 1 or 3");
}

TEST(CliOptionTest, UnknownLowPrecisionNamesTheOption) {
  expect_error(run_cli({"plan", "--precision", "amp", "--low-precision", "fp8"}),
               "--low-precision must be bf16, fp16 or auto, got 'fp8'");
}

// A synthetic DCGAN data set of 2e18 samples: its shuffled order cannot be allocated. The
// message says out of memory and which options size buffers, not the library's text alone.
TEST(CliOptionTest, AbsurdSizesSayOutOfMemory) {
  auto r = run_cli(train_args({"--model", "dcgan", "--dataset", "synthetic", "--image-size", "32",
                               "--precision", "fp32", "--limit-train", "2000000000000000000",
                               "--steps", "1", "--progress", "none", "--no-samples"}));
  expect_error(r, "out of memory: a buffer sized by the options");
}

TEST(CliOptionTest, PlanAndBenchRefuseWhatDcganIgnoresAndHonourItsOptimizer) {
  expect_error(run_cli({"plan", "--model", "dcgan", "--classes", "5"}),
               "--classes does not apply to --model dcgan");
  expect_error(run_cli({"bench", "--model", "dcgan", "--optimizer", "rmsprop"}),
               "unknown optimizer 'rmsprop'");
  // dcgan plans and benchmarks SGD as it trains it: the update nodes are ApplyMomentum.
  auto r = run_cli({"plan", "--model", "dcgan", "--image-size", "32", "--precision", "fp32",
                    "--optimizer", "sgd", "--all-nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ApplyMomentum"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ApplyAdam"), std::string::npos) << r.out;
  r = run_cli(
      {"plan", "--model", "dcgan", "--image-size", "32", "--precision", "fp32", "--all-nodes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("ApplyAdam"), std::string::npos) << r.out;
}

TEST(CliOptionTest, AbsurdThreadCountsAreRefused) {
  // 100000 OpenMP threads used to crash the process.
  expect_error(run_cli(train_args({"--threads", "100000"})), "--threads 100000 is more than");
  expect_error(run_cli(dcgan_args({"--threads", "100000"})), "--threads 100000 is more than");
  expect_error(run_cli(train_args({"--threads", "-1"})), "--threads must be >= 0");
}

TEST(CliOptionTest, BenchAndPlanNumbers) {
  expect_error(run_cli({"bench", "--model", "dcgan", "--steps", "0"}), "--steps must be");
  expect_error(run_cli({"bench", "--repeats", "-1"}), "--repeats must be positive");
  expect_error(run_cli({"bench", "--warmup", "-1"}), "--warmup must be");
  expect_error(run_cli({"plan", "--image-size", "0"}), "--image-size must be positive");
  expect_error(run_cli({"plan", "--batch", "-3"}), "--batch must be a positive");
}

}  // namespace
}  // namespace campo
