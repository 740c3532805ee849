// Text corpora and tokenizer vocabularies (datasets/text.cc, datasets/tokenizer.cc): the
// input is read both as a text file and as a vocabulary file.
//   As text: an accepted file trains a vocabulary; every word of it not longer than
//   kMaxWordChars must then encode without [UNK] and decode to its basic tokenisation, and
//   the encoded text, when long enough, gives MLM sequences.
//   As a vocabulary: an accepted file must save and load back with the same pieces and
//   fingerprint, and encode and decode its own pieces.
#include <algorithm>

#include "datasets/text.h"
#include "datasets/text_file.h"
#include "datasets/tokenizer.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {
namespace {

void as_text(const std::string& path) {
  std::string text;
  reject_or_accept([&] { text = read_text_file(path); });
  if (text.empty()) return;
  std::vector<std::string> words;
  reject_or_accept([&] { words = basic_tokenize(text); });
  if (words.empty()) return;
  // A vocabulary too small for the text's alphabet is refused (a campo::Error).
  reject_or_accept([&] {
    const WordPieceTokenizer tok = WordPieceTokenizer::train(text, 400);
    require(tok.vocab_size() <= 400, "a trained vocabulary is larger than asked");
    const std::vector<int32_t> ids = tok.encode(text);
    const bool has_long_word = std::any_of(words.begin(), words.end(), [](const std::string& w) {
      return int64_t(w.size()) > WordPieceTokenizer::kMaxWordChars;  // bytes >= characters
    });
    if (!has_long_word) {
      require(std::find(ids.begin(), ids.end(), WordPieceTokenizer::kUnkId) == ids.end(),
              "a word of the training text encodes to [UNK]");
      std::string joined;
      for (const std::string& w : words) joined += (joined.empty() ? "" : " ") + w;
      require(tok.decode(ids) == joined, "the training text does not decode to its words");
    }
    MlmOptions options;
    options.seq_len = 8;
    options.vocab_size = tok.vocab_size();
    if (ids.size() < 12) return;
    const MlmDataset mlm(ids, options);
    std::vector<int32_t> input_ids(8), labels(8);
    for (int64_t i = 0; i < std::min<int64_t>(mlm.size(), 4); ++i) {
      mlm.get(i, 1, input_ids.data(), labels.data());
      require(
          input_ids[0] == WordPieceTokenizer::kClsId && input_ids[7] == WordPieceTokenizer::kSepId,
          "an MLM sequence is not wrapped in [CLS] [SEP]");
    }
  });
}

void as_vocabulary(const std::string& path) {
  reject_or_accept([&] {
    const WordPieceTokenizer tok = WordPieceTokenizer::load(path);
    TempInput saved("text-vocabulary-saved", nullptr, 0);
    tok.save(saved.path());
    const WordPieceTokenizer again = WordPieceTokenizer::load(saved.path());
    require(again.vocab_size() == tok.vocab_size(), "a saved vocabulary lost pieces");
    require(again.fingerprint() == tok.fingerprint(), "a saved vocabulary changed its fingerprint");
    std::vector<int32_t> ids;
    for (int id = WordPieceTokenizer::kNumSpecialTokens; id < tok.vocab_size() && id < 64; ++id)
      if (!tok.token(id).starts_with("##")) ids.push_back(id);
    const std::vector<int32_t> encoded = tok.encode(tok.decode(ids));
    require(encoded == ids, "a vocabulary's own word-start pieces do not encode to themselves");
  });
}

}  // namespace

void text(const uint8_t* data, size_t size) {
  TempInput input("text", data, size);
  as_text(input.path());
  as_vocabulary(input.path());
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::text)
