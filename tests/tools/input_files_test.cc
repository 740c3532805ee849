// `campo train` on untrusted input: a test split whose images differ in size from the train
// split is refused before training; a malformed --amp-lists edit, and a FIFO given as a
// list or calibration file, are one error line, not a hang or a parser's raw text.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "tests/datasets/idx_file_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::CliResult;
using testing::expect_error;
using testing::run_cli;

// MNIST-format files: 8 train images of 4x4, 4 test images of `test_side` squared.
void write_mnist(const testing::TempDir& dir, uint32_t test_side) {
  std::vector<uint8_t> labels = {0, 1, 2, 3, 0, 1, 2, 3};
  testing::write_idx_split(dir, "train", 8, 4, 4, std::vector<uint8_t>(8 * 16, 100), labels, true);
  testing::write_idx_split(dir, "t10k", 4, test_side, test_side,
                           std::vector<uint8_t>(4 * test_side * test_side, 100), {0, 1, 2, 3},
                           true);
}

std::vector<std::string> quick_train(const std::string& data_dir,
                                     std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {"train",   "--dataset",  "mnist",   "--data-dir", data_dir,
                                "--model", "mlp",        "--batch", "4",          "--steps",
                                "1",       "--progress", "none"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(InputFilesTest, ATestSplitOfAnotherImageSizeIsRefusedBeforeTraining) {
  testing::TempDir dir;
  write_mnist(dir, 5);
  const CliResult r = run_cli(quick_train(dir.str()));
  expect_error(r,
               "the test split mnist/test has images of 1x5x5 (CxHxW) but the train split "
               "mnist/train has 1x4x4");
  EXPECT_NE(r.err.find("pass --image-size N"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("copy_from"), std::string::npos) << r.err;
  // (With --image-size both splits agree: DatasetRegistry.SplitsOfDifferentImageSizes...)
}

TEST(InputFilesTest, MalformedAmpListEditsAreOneErrorLine) {
  testing::TempDir dir;
  write_mnist(dir, 4);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"allow+=", "names no op"},
      {"=Tanh", "must look like allow+=Op1,Op2"},
      {"allow+=Nope", "unknown op 'Nope'"},
      {";;", "hold no edit"},
      {"allow*=Tanh", "must look like allow+=Op1,Op2"},
      {"allow+=" + std::string(5000, 'A'), "(5007 characters)"},
  };
  for (const auto& [spec, needle] : cases)
    expect_error(run_cli(quick_train(dir.str(), {"--precision", "amp", "--amp-lists", spec})),
                 needle);
}

TEST(InputFilesTest, AFifoAsAListOrCalibrationFileIsRefusedNotWaitedOn) {
  testing::TempDir dir;
  write_mnist(dir, 4);
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_error(run_cli(quick_train(dir.str(), {"--precision", "amp", "--amp-lists-file", fifo})),
               "mixed-precision list file " + fifo + " is a FIFO");
  expect_error(
      run_cli(quick_train(dir.str(), {"--precision", "cost-aware", "--calibration", fifo})),
      "calibration file " + fifo + " is a FIFO");
}

}  // namespace
}  // namespace campo
