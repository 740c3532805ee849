// The command line: bad input gives one clear error line and a non-zero exit code.
#include "tools/lib/cli.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace campo {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  int code;
  std::string out, err;
};

CliResult run_cli(std::vector<std::string> args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = cli::run(args);
  CliResult r{code, ::testing::internal::GetCapturedStdout(),
              ::testing::internal::GetCapturedStderr()};
  return r;
}

void expect_error(const CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("campo: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  // One line, no crash dump.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

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
  auto r = run_cli(train_args({"--device", "cuda"}));
  expect_error(r, "--device cuda");
}

TEST(CliTest, UnknownDevice) { expect_error(run_cli(train_args({"--device", "tpu"})), "tpu"); }

TEST(CliTest, UnknownPrecision) {
  expect_error(run_cli(train_args({"--precision", "fp8"})), "unknown precision policy 'fp8'");
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
  // machine's calibration cache (the profiling step times both precisions instead).
  std::vector<std::string> a = train_args({"--model", "mlp", "--dataset", "synthetic", "--epochs",
                                           "1", "--lr", "0.05", "--calibration", "none"});
  a.insert(a.end(), kQuick.begin(), kQuick.end());
  auto r = run_cli(a);
  ASSERT_EQ(r.code, 0) << r.err;
  auto pos = r.out.rfind("{\"");
  ASSERT_NE(pos, std::string::npos) << r.out;
  std::string json = r.out.substr(pos);
  EXPECT_NE(json.find("\"test_accuracy\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"samples_per_sec\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"final_loss\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"wall_seconds\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"precision\":\"cost-aware\""), std::string::npos) << json;
}

}  // namespace
}  // namespace campo
