#include "datasets/text.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "datasets/synthetic.h"
#include "datasets/text_file.h"
#include "datasets/tokenizer.h"
#include "runtime/check.h"
#include "runtime/rng.h"

namespace campo {
namespace {

// Debian 12's fortunes (1:1.99.1-7.3) and fortunes-min: every quotation file but ascii-art.
constexpr const char* kFortuneFiles[] = {
    "art",        "computers", "cookie",       "debian",   "definitions", "disclaimer",
    "drugs",      "education", "ethnic",       "food",     "fortunes",    "goedel",
    "humorists",  "kids",      "knghtbrd",     "law",      "linux",       "linuxcookie",
    "literature", "love",      "magic",        "medicine", "men-women",   "miscellaneous",
    "news",       "paradoxum", "people",       "perl",     "pets",        "platitudes",
    "politics",   "pratchett", "riddles",      "science",  "songs-poems", "sports",
    "startrek",   "tao",       "translate-me", "wisdom",   "work",        "zippy"};

constexpr int kNumSpecialIds = WordPieceTokenizer::kNumSpecialTokens;
constexpr int32_t kClsId = WordPieceTokenizer::kClsId;
constexpr int32_t kSepId = WordPieceTokenizer::kSepId;
constexpr int32_t kMaskId = WordPieceTokenizer::kMaskId;

}  // namespace

std::string read_fortunes_corpus(const std::string& dir) {
  std::string corpus;
  for (const char* name : kFortuneFiles) {
    const std::string path = dir + "/" + name;
    CAMPO_CHECK(std::filesystem::exists(path), "fortunes corpus file ", path,
                " is missing; `apt-get install fortunes` provides it");
    const std::string text = read_text_file(path, "fortunes corpus file");
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string_view line(text.data() + pos, end - pos);
      if (line != "%") {
        corpus.append(line);
        corpus.push_back('\n');
      }
      pos = end + 1;
    }
  }
  return corpus;
}

MlmDataset::MlmDataset(std::span<const int32_t> tokens, const MlmOptions& options)
    : options_(options) {
  const int seq_len = options.seq_len;
  CAMPO_CHECK(seq_len >= 8, "--seq-len must be at least 8 (got ", seq_len, ")");
  CAMPO_CHECK(options.split == "train" || options.split == "test",
              "text data set split must be train or test (got \"", options.split, "\")");
  CAMPO_CHECK(options.mask_prob > 0 && options.mask_prob <= 1,
              "the masking probability must lie in (0, 1] (got ", options.mask_prob, ")");
  CAMPO_CHECK(options.vocab_size > kNumSpecialIds, "vocabulary size ", options.vocab_size,
              " must exceed the ", kNumSpecialIds, " special tokens");
  for (size_t i = 0; i < tokens.size(); ++i)
    CAMPO_CHECK(tokens[i] >= 0 && tokens[i] < options.vocab_size, "token ", i,
                " of the corpus has id ", tokens[i], ", outside the vocabulary of ",
                options.vocab_size, " pieces");
  const int64_t window = seq_len - 2;
  const int64_t num_windows = int64_t(tokens.size()) / window;
  CAMPO_CHECK(num_windows >= 2, "the corpus has ", tokens.size(), " tokens, but --seq-len ",
              seq_len, " needs at least ", 2 * window, " (", window,
              " per sequence, one sequence each for train and test); use more text or a "
              "smaller --seq-len");
  const int64_t num_train = num_windows * 9 / 10;
  const int64_t first = options.split == "train" ? 0 : num_train;
  num_sequences_ = options.split == "train" ? num_train : num_windows - num_train;
  tokens_.assign(tokens.begin() + first * window,
                 tokens.begin() + (first + num_sequences_) * window);
}

void MlmDataset::get(int64_t index, int epoch, int32_t* input_ids, int32_t* labels) const {
  CAMPO_CHECK(index >= 0 && index < num_sequences_, name(), ": index ", index,
              " is out of range [0, ", num_sequences_, ")");
  CAMPO_CHECK(epoch >= 0, name(), ": epoch ", epoch, " is negative");
  const int seq_len = options_.seq_len;
  const int32_t* window = tokens_.data() + index * (seq_len - 2);
  input_ids[0] = kClsId;
  std::copy(window, window + seq_len - 2, input_ids + 1);
  input_ids[seq_len - 1] = kSepId;
  std::fill(labels, labels + seq_len, kIgnoreLabel);

  // The candidates: positions of non-special tokens.
  std::vector<int> candidates;
  candidates.reserve(size_t(seq_len));
  for (int i = 1; i < seq_len - 1; ++i)
    if (input_ids[i] >= kNumSpecialIds) candidates.push_back(i);
  const int n = int(candidates.size());
  if (n == 0) return;
  const int num_chosen = std::clamp(int(std::lround(double(options_.mask_prob) * n)), 1, n);

  Rng rng(
      mix_seed(mix_seed(options_.seed ^ 0x6d6c6dull, uint64_t(int64_t(epoch))), uint64_t(index)));
  for (int k = 0; k < num_chosen; ++k) {
    // Partial Fisher-Yates: candidates[0..k] are the chosen ones.
    std::swap(candidates[size_t(k)], candidates[size_t(k) + rng.below(uint64_t(n - k))]);
    const int pos = candidates[size_t(k)];
    labels[pos] = input_ids[pos];
    const uint64_t action = rng.below(10);
    if (action < 8) {
      input_ids[pos] = kMaskId;
    } else if (action == 8) {
      input_ids[pos] =
          kNumSpecialIds + int32_t(rng.below(uint64_t(options_.vocab_size - kNumSpecialIds)));
    }  // else: the token stays
  }
}

void MlmDataset::fill_batch(const std::vector<int64_t>& indices, int epoch, int32_t* input_ids,
                            int32_t* labels) const {
  const size_t seq_len = size_t(options_.seq_len);
  for (size_t row = 0; row < indices.size(); ++row)
    get(indices[row], epoch, input_ids + row * seq_len, labels + row * seq_len);
}

namespace {

class TextDataset final : public Dataset {
 public:
  TextDataset(MlmDataset mlm, std::string name) : mlm_(std::move(mlm)), name_(std::move(name)) {}
  int64_t size() const override { return mlm_.size(); }
  Shape image_shape() const override { return {mlm_.seq_len()}; }
  int num_classes() const override { return mlm_.vocab_size(); }
  std::string name() const override { return name_ + "/" + mlm_.split(); }
  DType input_dtype() const override { return DType::i32; }
  Shape label_shape() const override { return {mlm_.seq_len()}; }
  void get_sample(int64_t index, int epoch, void* input, int32_t* labels) const override {
    check_index(index);
    mlm_.get(index, epoch, static_cast<int32_t*>(input), labels);
  }
  // Token ids are not images: the loader reads get_sample; nothing calls these.
  void get(int64_t index, float* image, int32_t* label) const override {
    CAMPO_FAIL("internal: ", name(), " holds token ids; read it with get_sample");
  }

 private:
  MlmDataset mlm_;
  std::string name_;
};

}  // namespace

std::shared_ptr<Dataset> make_text_dataset(const std::string& text, const std::string& name,
                                           const std::string& split,
                                           const WordPieceTokenizer& tokenizer, int seq_len,
                                           float mask_prob, uint64_t seed) {
  static_assert(MlmDataset::kIgnoreLabel == kIgnoreLabel);
  MlmOptions o;
  o.seq_len = seq_len;
  o.split = split;
  o.mask_prob = mask_prob;
  o.vocab_size = tokenizer.vocab_size();
  o.seed = seed;
  const std::vector<int32_t> tokens = tokenizer.encode(text);
  return std::make_shared<TextDataset>(MlmDataset(tokens, o), name);
}

}  // namespace campo
