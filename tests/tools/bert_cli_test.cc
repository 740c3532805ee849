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
using testing::run_cli;
using testing::TempDir;

// A small corpus with structure a model can learn: sentences from a few templates.
std::string corpus() {
  const char* subjects[] = {"the cat", "a dog", "my friend", "the old man", "her sister"};
  const char* verbs[] = {"sees", "likes", "finds", "follows", "remembers"};
  const char* objects[] = {"the river", "a small house", "the red ball", "an open door", "the moon"};
  std::string text;
  for (int i = 0; i < 1500; ++i)
    text += std::string(subjects[i % 5]) + " " + verbs[(i / 5) % 5] + " " + objects[(i / 25) % 5] +
            (i % 7 == 0 ? ".\n" : ". ");
  return text;
}

std::string write(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

nlohmann::json result_line(const std::string& out) {
  const size_t at = out.rfind("{\"event\":\"result\"");
  EXPECT_NE(at, std::string::npos) << out;
  return nlohmann::json::parse(out.substr(at, out.find('\n', at) - at));
}

TEST(BertCliTest, TrainsOnATextFileSavesEvaluatesAndResumes) {
  TempDir dir;
  const std::string text = write(dir.path() + "/corpus.txt", corpus());
  const std::string ckpt = dir.path() + "/bert.safetensors";
  const std::string vocab = dir.path() + "/vocab.json";
  const std::vector<std::string> common = {
      "train", "--model", "bert", "--bert-config", "tiny", "--dataset", "text:" + text,
      "--seq-len", "16", "--batch", "8", "--precision", "fp32", "--progress", "none"};
  std::vector<std::string> args = common;
  for (const char* a : {"--vocab-size", "120", "--steps", "60", "--lr", "2e-3", "--save",
                        ckpt.c_str(), "--save-vocab", vocab.c_str()})
    args.push_back(a);
  const auto r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("campo: vocabulary of 120 pieces trained on"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("masked-token accuracy"), std::string::npos) << r.out;
  const nlohmann::json j = result_line(r.out);
  EXPECT_EQ(j["steps"], 60);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.2);  // chance is about 1/120
  EXPECT_LT(j["final_loss"].get<double>(), std::log(120.0) - 1.0);

  // campo eval reads the vocabulary and the size from the checkpoint.
  const auto e = run_cli({"eval", "--checkpoint", ckpt, "--dataset", "text:" + text, "--seq-len", "16"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("masked-token accuracy"), std::string::npos) << e.out;

  // Resuming takes the checkpoint's vocabulary; --vocab must then be the same one.
  std::vector<std::string> resume = common;
  for (const char* a : {"--steps", "70", "--resume", ckpt.c_str(), "--vocab", vocab.c_str()})
    resume.push_back(a);
  const auto rr = run_cli(resume);
  ASSERT_EQ(rr.code, 0) << rr.err;
  EXPECT_EQ(result_line(rr.out)["steps"], 70);

  std::vector<std::string> other = common;
  const std::string other_vocab = dir.path() + "/other.json";
  for (const char* a : {"--vocab-size", "100", "--steps", "1", "--save-vocab", other_vocab.c_str()})
    other.push_back(a);
  ASSERT_EQ(run_cli(other).code, 0);
  std::vector<std::string> mismatch = common;
  for (const char* a : {"--steps", "80", "--resume", ckpt.c_str(), "--vocab", other_vocab.c_str()})
    mismatch.push_back(a);
  expect_error(run_cli(mismatch), "is not the vocabulary of --resume checkpoint");
}

TEST(BertCliTest, BadInputsAreOneErrorLine) {
  TempDir dir;
  const std::string text = write(dir.path() + "/corpus.txt", corpus());
  const std::string empty = write(dir.path() + "/empty.txt", "");
  const std::string binary = write(dir.path() + "/binary.txt", std::string("ab\0cd\x01\xff", 7));
  auto train = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"train", "--model", "bert", "--bert-config", "tiny",
                                  "--progress", "none", "--steps", "1", "--precision", "fp32"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_cli(a);
  };
  expect_error(train({"--dataset", "fashion-mnist"}), "--model bert trains on text");
  expect_error(train({"--dataset", "text:" + empty}), "empty");
  expect_error(train({"--dataset", "text:" + binary}), "binary.txt");
  expect_error(train({"--dataset", "text:" + text, "--seq-len", "0"}), "--seq-len must be in 8..512");
  expect_error(train({"--dataset", "text:" + text, "--bert-config", "huge"}),
               "unknown --bert-config 'huge'");
  expect_error(train({"--dataset", "text:" + dir.path() + "/missing.txt"}), "missing.txt");
  expect_error(train({"--dataset", "text:" + text, "--vocab", text}), "");
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
                          "--batch", "4", "--classes", "200", "--precision", "fp32,amp",
                          "--steps", "2", "--repeats", "1", "--warmup", "1"});
  ASSERT_EQ(b.code, 0) << b.err;
  expect_error(run_cli({"plan", "--model", "bert", "--image-size", "32"}),
               "--image-size does not apply to --model bert");
}

}  // namespace
}  // namespace campo
