// Text for masked-language-model (MLM) training: the corpus that Debian's fortunes packages
// ship, and MlmDataset, BERT's masked sequences over a token stream. Reading a UTF-8 text
// file is datasets/text_file.h's (read_text_file), which the tokenizer's files share.
//
// The corpus: the quotation files of Debian's `fortunes` and `fortunes-min` packages
// (1:1.99.1, BSD licence; /usr/share/games/fortunes), chosen because they are the largest
// body of ordinary English text in Debian main that installs in seconds: 2.5 MB, 442,000
// words (575,000 with punctuation counted as words) of quotations, jokes, definitions and
// verse in 42 files (2.7 MB installed, 0.9 MB to download), plain UTF-8. Larger prose in Debian is
// either packed in a binary format (bible-kjv-text), compressed jargon (jargon-text, 1.7 MB) or
// tens of MB of dictionary entries (wordnet-base).
//
// MlmDataset invariants: sequence `index` is [CLS] w_0 .. w_{L-3} [SEP] with w the
// index-th run of seq_len - 2 consecutive tokens of the split (non-overlapping windows);
// its masking is a pure function of (seed, epoch, index), so get() is const, thread-safe and
// the same again when a run resumes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/tokenizer.h"

namespace campo {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
// The fortunes corpus: the 42 text files of Debian's fortunes and fortunes-min packages
// (every file but the ascii-art pictures and the strfile indexes *.dat), in name order, with
// the "%" lines that separate quotations removed. The list of files is fixed, so the corpus
// is the same on every machine; a missing file is an error naming the package to install.
std::string read_fortunes_corpus(const std::string& dir = kFortunesDir);

struct MlmOptions {
  int seq_len = 128;            // tokens per sequence, [CLS] and [SEP] included; >= 8
  std::string split = "train";  // "train": the first 90% of the stream; "test": the rest
  float mask_prob = 0.15f;      // the fraction of positions chosen for prediction, (0, 1]
  int vocab_size = 0;           // every token id lies in [0, vocab_size); > 5
  uint64_t seed = 0;
};

class MlmDataset {
 public:
  // The label of a position the loss ignores (PyTorch's CrossEntropyLoss ignore_index).
  static constexpr int32_t kIgnoreLabel = -100;

  // tokens: the encoded corpus, ids from WordPieceTokenizer (special ids 0..4 as there).
  // The stream is cut into W = tokens / (seq_len - 2) windows (a last partial one dropped);
  // train holds the first floor(0.9 W), test the other W - floor(0.9 W), so both splits need
  // W >= 2. Throws, naming the option, on a bad seq_len, split, mask_prob or vocab_size, a
  // token id outside [0, vocab_size), or a corpus too short for one sequence per split.
  MlmDataset(std::span<const int32_t> tokens, const MlmOptions& options);

  // Number of sequences.
  int64_t size() const { return num_sequences_; }
  int seq_len() const { return options_.seq_len; }
  int vocab_size() const { return options_.vocab_size; }
  const std::string& split() const { return options_.split; }
  // "text/train" or "text/test", for logs.
  std::string name() const { return "text/" + options_.split; }

  // Sequence `index` as epoch `epoch` (>= 0) masks it, BERT's dynamic masking: of the n
  // positions holding a non-special token (id >= 5: never [CLS], [SEP], [PAD], [UNK] or
  // [MASK]), round(mask_prob * n) are chosen (at least 1 when n > 0), uniformly without
  // replacement; each chosen one becomes [MASK] with probability 0.8, a uniform random
  // non-special token (id in [5, vocab_size)) with probability 0.1, and stays as it is
  // otherwise. labels[i] is the original id at chosen positions, kIgnoreLabel elsewhere.
  // input_ids and labels each receive seq_len() values.
  void get(int64_t index, int epoch, int32_t* input_ids, int32_t* labels) const;
  // get() for each of indices, row after row: input_ids and labels receive
  // indices.size() * seq_len() values each.
  void fill_batch(const std::vector<int64_t>& indices, int epoch, int32_t* input_ids,
                  int32_t* labels) const;

 private:
  MlmOptions options_;
  std::vector<int32_t> tokens_;  // this split's windows, back to back
  int64_t num_sequences_ = 0;
};

// MlmDataset as a Dataset (the loader's interface): input [seq_len] i32 token ids, labels
// [seq_len] (kIgnoreLabel where nothing is predicted), num_classes the vocabulary size.
// `text` is encoded with `tokenizer`; `name` prefixes the split in logs ("fortunes/train").
std::shared_ptr<Dataset> make_text_dataset(const std::string& text, const std::string& name,
                                           const std::string& split,
                                           const WordPieceTokenizer& tokenizer, int seq_len,
                                           float mask_prob, uint64_t seed);

}  // namespace campo
