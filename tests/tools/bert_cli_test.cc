// `campo train --model bert --dataset text:PATH`: masked-language-model training on a text
// file end to end (vocabulary, sequences, loss, checkpoint with its vocabulary, campo eval,
// resume), and its bad inputs, each one error line before any training.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

using testing::expect_error;
using testing::json_event;
using testing::run_cli;
using testing::TempDir;

// A small corpus a masked-language model can learn from: runs of number words, each word
// following from the one before it.
std::string corpus() {
  const char* words[] = {"zero", "one", "two",   "three", "four",
                         "five", "six", "seven", "eight", "nine"};
  std::string text;
  for (int i = 0; i < 1500; ++i) {
    for (int k = 0; k < 6; ++k) text += std::string(k ? " " : "") + words[(i * 7 + k) % 10];
    text += i % 5 == 0 ? ".\n" : ". ";
  }
  return text;
}

std::string write(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

TEST(BertCliTest, TrainsOnATextFileSavesEvaluatesAndResumes) {
  TempDir dir;
  const std::string text = write(dir.str() + "/corpus.txt", corpus());
  const std::string ckpt = dir.str() + "/bert.safetensors";
  const std::string vocab = dir.str() + "/vocab.json";
  const std::vector<std::string> common = {"train", "--model",    "bert",         "--bert-config",
                                           "tiny",  "--dataset",  "text:" + text, "--seq-len",
                                           "16",    "--batch",    "16",           "--precision",
                                           "fp32",  "--progress", "lines"};
  std::vector<std::string> args = common;
  for (const char* a : {"--vocab-size", "120", "--epochs", "3", "--warmup-steps", "20", "--lr",
                        "3e-3", "--save", ckpt.c_str(), "--save-vocab", vocab.c_str()})
    args.push_back(a);
  const auto r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  // The text has fewer pairs worth merging than 120 pieces: the trainer stops at 64.
  EXPECT_NE(r.out.find("campo: vocabulary of 64 pieces trained on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("masked-token accuracy"), std::string::npos) << r.out;
  const nlohmann::json j = json_event(r.out);
  EXPECT_EQ(j["steps"], 3 * 42);
  // Chance is 1/64 (loss log 64 = 4.16); Hugging Face's BertForMaskedLM of this size and
  // recipe reaches a loss of about 1.4 on such text.
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.2);
  EXPECT_LT(j["final_loss"].get<double>(), 2.0);

  // campo eval reads the vocabulary and the size from the checkpoint.
  const auto e =
      run_cli({"eval", "--checkpoint", ckpt, "--dataset", "text:" + text, "--seq-len", "16"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("masked-token accuracy"), std::string::npos) << e.out;

  // Resuming takes the checkpoint's vocabulary; --vocab must then be the same one.
  std::vector<std::string> resume = common;
  for (const char* a : {"--epochs", "4", "--resume", ckpt.c_str(), "--vocab", vocab.c_str()})
    resume.push_back(a);
  const auto rr = run_cli(resume);
  ASSERT_EQ(rr.code, 0) << rr.err;
  EXPECT_NE(rr.out.find("campo: resumed from"), std::string::npos) << rr.out;
  EXPECT_EQ(rr.out.find("campo: vocabulary of"), std::string::npos) << rr.out;  // not retrained
  EXPECT_EQ(json_event(rr.out)["steps"], 4 * 42);

  std::vector<std::string> other = common;
  const std::string other_vocab = dir.str() + "/other.json";
  for (const char* a : {"--vocab-size", "64", "--steps", "1", "--save-vocab", other_vocab.c_str()})
    other.push_back(a);
  other[6] = "text:" + write(dir.str() + "/other.txt", "an other text, " + corpus());
  ASSERT_EQ(run_cli(other).code, 0);
  std::vector<std::string> mismatch = common;
  for (const char* a : {"--epochs", "5", "--resume", ckpt.c_str(), "--vocab", other_vocab.c_str()})
    mismatch.push_back(a);
  expect_error(run_cli(mismatch), "is not the vocabulary of --resume checkpoint");
}

TEST(BertCliTest, BadInputsAreOneErrorLine) {
  TempDir dir;
  const std::string text = write(dir.str() + "/corpus.txt", corpus());
  const std::string empty = write(dir.str() + "/empty.txt", "");
  const std::string binary = write(dir.str() + "/binary.txt", std::string("ab\0cd\x01\xff", 7));
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"train",   "--model", "bert",        "--progress", "none",
                                  "--steps", "1",       "--precision", "fp32"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  expect_error(train({"--dataset", "fashion-mnist"}), "--model bert trains on text");
  expect_error(train({"--dataset", "text:" + empty}), "empty");
  expect_error(train({"--dataset", "text:" + binary}), "binary.txt");
  expect_error(train({"--dataset", "text:" + text, "--seq-len", "0"}),
               "--seq-len must be in 8..512");
  expect_error(train({"--dataset", "text:" + text, "--bert-config", "huge"}),
               "unknown --bert-config 'huge'");
  expect_error(train({"--dataset", "text:" + dir.str() + "/missing.txt"}), "missing.txt");
  expect_error(train({"--dataset", "text:" + text, "--vocab", text}), "corpus.txt");
  expect_error(run_cli({"train", "--model", "lenet", "--dataset", "text:" + text, "--steps", "1"}),
               "needs --model bert");
  expect_error(run_cli({"train", "--model", "lenet", "--seq-len", "16", "--steps", "1"}),
               "--seq-len applies to text data sets only");
}

// plan and bench take bert with token inputs.
TEST(BertCliTest, PlanAndBenchTakeBert) {
  const auto p = run_cli({"plan", "--model", "bert", "--bert-config", "tiny", "--seq-len", "16",
                          "--batch", "4", "--classes", "200", "--precision", "amp"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("BatchMatMulV2"), std::string::npos) << p.out;
  const auto b = run_cli({"bench", "--model", "bert", "--bert-config", "tiny", "--seq-len", "16",
                          "--batch", "4", "--classes", "200", "--precision", "fp32,amp", "--steps",
                          "2", "--repeats", "1", "--warmup", "1"});
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.out.find("bench: bert, batch 4, input [16] tokens"), std::string::npos) << b.out;
  expect_error(run_cli({"plan", "--model", "bert", "--image-size", "32"}),
               "--image-size does not apply to --model bert");
}

}  // namespace
}  // namespace campo
