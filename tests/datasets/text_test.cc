// read_text_file (datasets/text_file.h), MlmDataset (BERT's windows and dynamic masking), and the
// fortunes corpus (Debian package fortunes; its test is skipped, saying why, when it is not
// installed).
#include "datasets/text.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "datasets/text_file.h"
#include "datasets/tokenizer.h"
#include "runtime/check.h"
#include "runtime/rng.h"
#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(ReadTextFile, ReturnsTheTextWithoutAByteOrderMark) {
  TempDir dir;
  write_bytes(dir.file("a.txt"), "Caf\xc3\xa9 au lait.\n");
  EXPECT_EQ(read_text_file(dir.file("a.txt")), "Caf\xc3\xa9 au lait.\n");
  write_bytes(dir.file("bom.txt"), "\xef\xbb\xbfhello");
  EXPECT_EQ(read_text_file(dir.file("bom.txt")), "hello");
}

TEST(ReadTextFile, RefusesWhatIsNotUtf8Text) {
  TempDir dir;
  const auto error_for = [&](const std::string& bytes) {
    write_bytes(dir.file("t.txt"), bytes);
    return error_of([&] { read_text_file(dir.file("t.txt"), "corpus"); });
  };
  const std::string path = dir.file("t.txt");
  EXPECT_EQ(error_for(""), "corpus " + path + " is empty");
  EXPECT_EQ(error_for("\xef\xbb\xbf"), "corpus " + path + " is empty (a byte-order mark only)");
  EXPECT_EQ(error_for(std::string("abc\0def", 7)),
            "corpus " + path + " is not text: a NUL byte at byte offset 3");
  // Latin-1 "café", an overlong "/", a UTF-16 surrogate, a sequence cut off at the end.
  EXPECT_EQ(error_for("caf\xe9"), "corpus " + path + " is not UTF-8 text (byte offset 3)");
  EXPECT_EQ(error_for("ab\xc0\xaf"), "corpus " + path + " is not UTF-8 text (byte offset 2)");
  EXPECT_EQ(error_for("a\xed\xa0\x80"), "corpus " + path + " is not UTF-8 text (byte offset 1)");
  EXPECT_EQ(error_for("ok \xe2\x82"), "corpus " + path + " is not UTF-8 text (byte offset 3)");
  EXPECT_EQ(error_for("\xf4\x90\x80\x80"), "corpus " + path + " is not UTF-8 text (byte offset 0)");
  EXPECT_EQ(error_for("fine \xf0\x9f\x98\x80"), "");  // a 4-byte sequence (U+1F600)
}

TEST(ReadTextFile, RefusesDirectoriesMissingFilesAndHugeFiles) {
  TempDir dir;
  EXPECT_NE(error_of([&] { read_text_file(dir.str()); }).find(dir.str()), std::string::npos);
  EXPECT_NE(error_of([&] { read_text_file(dir.file("absent.txt")); }).find("absent.txt"),
            std::string::npos);
  // A sparse file one byte over the limit: refused before a byte is read.
  const std::string huge = dir.file("huge.txt");
  write_bytes(huge, "x");
  std::filesystem::resize_file(huge, uint64_t(kMaxTextFileBytes) + 1);
  const std::string message = error_of([&] { read_text_file(huge); });
  EXPECT_NE(message.find("more than the 256 MiB campo reads"), std::string::npos) << message;
}

// tokens[i] = 5 + i % (vocab - 5): no special ids, each window distinct.
std::vector<int32_t> counting_tokens(int n, int vocab) {
  std::vector<int32_t> tokens(size_t(n), 0);
  for (int i = 0; i < n; ++i) tokens[size_t(i)] = 5 + i % (vocab - 5);
  return tokens;
}

MlmOptions options_for(int seq_len, const std::string& split, int vocab_size, uint64_t seed = 1) {
  MlmOptions options;
  options.seq_len = seq_len;
  options.split = split;
  options.vocab_size = vocab_size;
  options.seed = seed;
  return options;
}

TEST(MlmDataset, SplitsTheStreamIntoNonOverlappingWindows) {
  const std::vector<int32_t> tokens = counting_tokens(1005, 5000);  // 100 windows of 10, 5 left
  const MlmDataset train(tokens, options_for(12, "train", 5000));
  const MlmDataset test(tokens, options_for(12, "test", 5000));
  EXPECT_EQ(train.size(), 90);
  EXPECT_EQ(test.size(), 10);
  EXPECT_EQ(train.seq_len(), 12);
  EXPECT_EQ(train.name(), "text/train");
  EXPECT_EQ(test.name(), "text/test");
  std::vector<int32_t> ids(12), labels(12);
  const auto expect_window = [&](const MlmDataset& ds, int64_t index, int first_token) {
    ds.get(index, 0, ids.data(), labels.data());
    EXPECT_EQ(ids[0], WordPieceTokenizer::kClsId);
    EXPECT_EQ(ids[11], WordPieceTokenizer::kSepId);
    EXPECT_EQ(labels[0], MlmDataset::kIgnoreLabel);
    EXPECT_EQ(labels[11], MlmDataset::kIgnoreLabel);
    for (int i = 1; i <= 10; ++i) {  // the original token: unmasked, or the label
      const int32_t original =
          labels[size_t(i)] == MlmDataset::kIgnoreLabel ? ids[size_t(i)] : labels[size_t(i)];
      EXPECT_EQ(original, tokens[size_t(first_token + i - 1)]) << index << " " << i;
    }
  };
  expect_window(train, 0, 0);
  expect_window(train, 89, 890);
  expect_window(test, 0, 900);
  expect_window(test, 9, 990);

  // 7 windows: train floor(0.9 * 7) = 6, test 1.
  EXPECT_EQ(MlmDataset(counting_tokens(79, 100), options_for(12, "train", 100)).size(), 6);
  EXPECT_EQ(MlmDataset(counting_tokens(79, 100), options_for(12, "test", 100)).size(), 1);
  // 2 windows: one each.
  EXPECT_EQ(MlmDataset(counting_tokens(20, 100), options_for(12, "test", 100)).size(), 1);
}

TEST(MlmDataset, MasksAboutFifteenPercentEightyTenTen) {
  const int vocab = 1000, seq_len = 64;
  Rng rng(7);
  std::vector<int32_t> tokens(200000);
  for (int32_t& t : tokens) {  // 5% special ids, which are never chosen
    t = rng.uniform() < 0.05f ? int32_t(rng.below(5)) : 5 + int32_t(rng.below(vocab - 5));
  }
  const MlmDataset ds(tokens, options_for(seq_len, "train", vocab));
  ASSERT_GT(ds.size(), 2000);
  int64_t chosen = 0, masked = 0, replaced = 0, kept = 0, candidates = 0;
  std::vector<int32_t> ids(seq_len), labels(seq_len);
  for (int64_t index = 0; index < ds.size(); ++index) {
    ds.get(index, 3, ids.data(), labels.data());
    const int32_t* window = tokens.data() + index * (seq_len - 2);
    int n = 0, k = 0;
    for (int i = 1; i < seq_len - 1; ++i) {
      const int32_t original = window[i - 1];
      if (original >= 5) ++n;
      if (labels[size_t(i)] == MlmDataset::kIgnoreLabel) {
        ASSERT_EQ(ids[size_t(i)], original);
        continue;
      }
      ASSERT_EQ(labels[size_t(i)], original);
      ASSERT_GE(original, 5) << "a special token was chosen";
      ++k;
      if (ids[size_t(i)] == WordPieceTokenizer::kMaskId) {
        ++masked;
      } else if (ids[size_t(i)] != original) {
        ASSERT_GE(ids[size_t(i)], 5) << "replaced by a special token";
        ASSERT_LT(ids[size_t(i)], vocab);
        ++replaced;
      } else {
        ++kept;
      }
    }
    ASSERT_EQ(k, std::max(1, int(std::lround(double(0.15f) * n)))) << index;
    chosen += k;
    candidates += n;
  }
  // The chosen fraction is off 0.15 only by each sequence's rounding (n is about 59).
  EXPECT_NEAR(double(chosen) / double(candidates), 0.15, 0.01);
  // Fixed seeds make these exact numbers; the bounds are about 5 standard deviations
  // (over ~26,000 chosen positions) of what any seed would give. A random replacement is
  // the original token again with probability 1/995, counted as kept.
  EXPECT_NEAR(double(masked) / double(chosen), 0.8, 0.012);
  EXPECT_NEAR(double(replaced) / double(chosen), 0.1, 0.009);
  EXPECT_NEAR(double(kept) / double(chosen), 0.1, 0.009);
}

TEST(MlmDataset, ChoosesAtLeastOnePositionAndNoneAmongSpecialTokens) {
  // seq_len 8: windows of 6. Window 0 has 2 ordinary tokens (round(0.3) = 0, so 1 is
  // chosen); window 1 has only [UNK]s (nothing to choose).
  std::vector<int32_t> tokens = {1, 7, 1, 1, 9, 1, 1, 1, 1, 1, 1, 1};
  for (int i = 0; i < 60; ++i) tokens.push_back(5 + i % 20);
  const MlmDataset ds(tokens, options_for(8, "train", 30));
  std::vector<int32_t> ids(8), labels(8);
  for (int epoch = 0; epoch < 20; ++epoch) {
    ds.get(0, epoch, ids.data(), labels.data());
    int chosen = 0;
    for (int i = 0; i < 8; ++i) {
      if (labels[size_t(i)] == MlmDataset::kIgnoreLabel) continue;
      ++chosen;
      EXPECT_TRUE(i == 2 || i == 5) << i;
    }
    EXPECT_EQ(chosen, 1);
    ds.get(1, epoch, ids.data(), labels.data());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(labels[size_t(i)], MlmDataset::kIgnoreLabel);
    EXPECT_EQ(ids, (std::vector<int32_t>{2, 1, 1, 1, 1, 1, 1, 3}));
  }
}

TEST(MlmDataset, MaskingIsAFunctionOfSeedEpochAndIndex) {
  const std::vector<int32_t> tokens = counting_tokens(20000, 3000);
  const MlmDataset a(tokens, options_for(32, "train", 3000, 11));
  const MlmDataset b(tokens, options_for(32, "train", 3000, 11));
  const MlmDataset other_seed(tokens, options_for(32, "train", 3000, 12));
  const auto sample = [](const MlmDataset& ds, int64_t index, int epoch) {
    std::vector<int32_t> ids(32), labels(32);
    ds.get(index, epoch, ids.data(), labels.data());
    ids.insert(ids.end(), labels.begin(), labels.end());
    return ids;
  };
  int differ_by_epoch = 0, differ_by_seed = 0;
  for (int64_t index = 0; index < 100; ++index) {
    const std::vector<int32_t> first = sample(a, index, 2);
    EXPECT_EQ(first, sample(a, index, 2));  // again
    EXPECT_EQ(first, sample(b, index, 2));  // another object, same options
    differ_by_epoch += first != sample(a, index, 3);
    differ_by_seed += first != sample(other_seed, index, 2);
  }
  EXPECT_GE(differ_by_epoch, 95);
  EXPECT_GE(differ_by_seed, 95);

  // fill_batch is get() row after row, in the order given; and threads see the same.
  const std::vector<int64_t> indices = {5, 0, 77, 5};
  std::vector<int32_t> ids(indices.size() * 32), labels(indices.size() * 32);
  a.fill_batch(indices, 4, ids.data(), labels.data());
  for (size_t row = 0; row < indices.size(); ++row) {
    const std::vector<int32_t> expected = sample(a, indices[row], 4);
    EXPECT_TRUE(std::equal(ids.begin() + ptrdiff_t(row * 32),
                           ids.begin() + ptrdiff_t(row * 32 + 32), expected.begin()));
    EXPECT_TRUE(std::equal(labels.begin() + ptrdiff_t(row * 32),
                           labels.begin() + ptrdiff_t(row * 32 + 32), expected.begin() + 32));
  }
  std::vector<std::vector<int32_t>> serial, threaded(a.size());
  for (int64_t i = 0; i < a.size(); ++i) serial.push_back(sample(a, i, 1));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t i = t; i < a.size(); i += 4) threaded[size_t(i)] = sample(a, i, 1);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(serial, threaded);
}

TEST(MlmDataset, RefusesBadOptionsAndShortCorpora) {
  const std::vector<int32_t> tokens = counting_tokens(100, 50);
  EXPECT_EQ(error_of([&] { MlmDataset(tokens, options_for(7, "train", 50)); }),
            "--seq-len must be at least 8 (got 7)");
  EXPECT_EQ(error_of([&] { MlmDataset(counting_tokens(15, 50), options_for(10, "train", 50)); }),
            "the corpus has 15 tokens, but --seq-len 10 needs at least 16 (8 per sequence, one "
            "sequence each for train and test); use more text or a smaller --seq-len");
  EXPECT_EQ(error_of([&] { MlmDataset(counting_tokens(16, 50), options_for(10, "test", 50)); }),
            "");
  EXPECT_NE(error_of([&] {
              MlmDataset(tokens, options_for(8, "valid", 50));
            }).find("split must be train or test"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              MlmDataset(tokens, options_for(8, "train", 40));
            }).find("token 35 of the corpus has id 40"),
            std::string::npos);
  EXPECT_NE(error_of([&] { MlmDataset(tokens, options_for(8, "train", 5)); }), "");
  MlmOptions no_masking = options_for(8, "train", 50);
  no_masking.mask_prob = 0;
  EXPECT_NE(error_of([&] { MlmDataset(tokens, no_masking); }).find("(0, 1]"), std::string::npos);

  const MlmDataset ds(tokens, options_for(8, "train", 50));
  std::vector<int32_t> ids(8), labels(8);
  EXPECT_NE(error_of([&] { ds.get(ds.size(), 0, ids.data(), labels.data()); }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { ds.get(0, -1, ids.data(), labels.data()); }), "");
}

// The real corpus: a vocabulary of 8000 trained on the first 90% of the fortunes, applied
// to the last 10%.
TEST(FortunesCorpus, TrainsAVocabularyThatCoversHeldOutText) {
  if (!std::filesystem::exists(std::string(kFortunesDir) + "/zippy"))
    GTEST_SKIP() << kFortunesDir << " is absent; `apt-get install fortunes` provides it";
  const std::string corpus = read_fortunes_corpus();
  EXPECT_GT(corpus.size(), 2000000u);
  const size_t cut = corpus.rfind('\n', corpus.size() * 9 / 10) + 1;
  const std::string_view seen(corpus.data(), cut),
      held_out(corpus.data() + cut, corpus.size() - cut);

  const auto start = std::chrono::steady_clock::now();
  const WordPieceTokenizer tok = WordPieceTokenizer::train(seen, 8000);
  const double train_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tok.vocab_size(), 8000);

  const std::vector<int32_t> ids = tok.encode(held_out);
  const int64_t unknown = std::count(ids.begin(), ids.end(), WordPieceTokenizer::kUnkId);
  const double unknown_fraction = double(unknown) / double(ids.size());
  const size_t words = basic_tokenize(held_out).size();
  std::printf(
      "[ fortunes ] %zu bytes; vocabulary of 8000 trained on %zu bytes in %.2f s; "
      "held-out %zu bytes: %zu words, %zu tokens (%.3f per word), [UNK] %.4f%%\n",
      corpus.size(), seen.size(), train_s, held_out.size(), words, ids.size(),
      double(ids.size()) / double(words), 100 * unknown_fraction);
  EXPECT_LT(unknown_fraction, 0.002);
  EXPECT_LT(double(ids.size()) / double(words), 1.5);  // mostly whole words at 8000 pieces

  // The encoded corpus as MLM sequences of 128.
  MlmOptions options;
  options.vocab_size = tok.vocab_size();
  const std::vector<int32_t> all = tok.encode(corpus);
  const MlmDataset train(all, options);
  options.split = "test";
  const MlmDataset test(all, options);
  EXPECT_EQ(train.size() + test.size(), int64_t(all.size()) / 126);
  EXPECT_GT(test.size(), 400);
}

}  // namespace
}  // namespace campo
