// WordPieceTokenizer: BERT's uncased tokenizer (basic tokenisation, then WordPiece) and a
// deterministic trainer for its vocabulary.
//
// Basic tokenisation (basic_tokenize), as BERT's BasicTokenizer for an uncased model:
//   - NUL, U+FFFD, control characters (C0 and C1 other than whitespace) and the invisible
//     format characters U+00AD, U+200B..U+200F, U+2060..U+2064, U+FEFF are dropped;
//   - whitespace (ASCII whitespace, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
//     U+202F, U+205F, U+3000) separates words;
//   - punctuation (every ASCII character that is not a letter, digit or space; the Latin-1
//     punctuation marks U+00A1 U+00A7 U+00AB U+00B6 U+00B7 U+00BB U+00BF; General
//     Punctuation U+2010..U+2027, U+2030..U+205E) and CJK ideographs are words of one
//     character each;
//   - A..Z are lower-cased; every other code point is kept as it is (no accent stripping,
//     no Unicode case folding: the text's own characters are the alphabet).
// WordPiece (encode): each word becomes the longest vocabulary piece that starts it, then the
// longest "##" piece that continues it, and so on (greedy longest match first); a word that
// cannot be spelled this way, or one longer than kMaxWordChars characters, is one [UNK].
//
// The vocabulary: ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]; every other piece is a
// non-empty string of non-special characters, either a word start ("th") or a continuation
// ("##e"). A piece that encode could never produce (upper case, whitespace, punctuation
// inside a longer piece, more than kMaxWordChars characters) makes the vocabulary
// inconsistent and is refused.
//
// Invariants: immutable once built; every method is const and thread-safe. Input text must
// be UTF-8 (an error names the byte offset otherwise).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace campo {

// The words of text after basic tokenisation (above), in order.
std::vector<std::string> basic_tokenize(std::string_view text);

class WordPieceTokenizer {
 public:
  static constexpr int32_t kPadId = 0;
  static constexpr int32_t kUnkId = 1;
  static constexpr int32_t kClsId = 2;
  static constexpr int32_t kSepId = 3;
  static constexpr int32_t kMaskId = 4;
  static constexpr int kNumSpecialTokens = 5;
  // BERT's max_input_chars_per_word: a longer word is one [UNK].
  static constexpr int kMaxWordChars = 100;
  // The largest vocabulary train() builds and a file may hold.
  static constexpr int kMaxVocabSize = 1 << 20;

  // Validates `vocab` (the header's rules) and builds the tokenizer; `source` names it in
  // error messages ("tokenizer vocabulary vocab.json").
  explicit WordPieceTokenizer(std::vector<std::string> vocab,
                              const std::string& source = "tokenizer vocabulary");

  // Trains a vocabulary of at most vocab_size pieces on text:
  //   1. basic tokenisation and word counts (words longer than kMaxWordChars skipped);
  //   2. the alphabet: every character seen, and its "##" form for each character that is
  //      not punctuation or a CJK ideograph (those are always whole words), in byte order;
  //   3. byte-pair merges (as HuggingFace's WordPiece trainer does): each word starts as
  //      its characters ("w" "##o" "##r" "##d"); repeatedly, the adjacent pair of pieces
  //      with the largest count over the corpus is merged into one piece ("w" "##o" ->
  //      "wo"), ties broken by the smaller piece ids, until the vocabulary holds vocab_size
  //      pieces or no pair occurs twice (a pair seen once only memorises one word).
  // The vocabulary may therefore be smaller than vocab_size on a small text (vocab_size()
  // says). The result is a function of (text, vocab_size) alone. Throws when vocab_size
  // cannot hold the special tokens and the alphabet, naming the size needed.
  static WordPieceTokenizer train(std::string_view text, int vocab_size);

  std::vector<int32_t> encode(std::string_view text) const;
  // The pieces of ids joined by spaces, a "##" piece glued to the one before it without its
  // "##" ("play" "##ing" -> "playing"); special tokens appear as written ("[MASK]").
  // decode(encode(t)) is the basic tokenisation of t joined by spaces when every word of t
  // can be spelled with the vocabulary. Throws on an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;

  int vocab_size() const { return int(vocab_.size()); }
  const std::string& token(int id) const;
  // The id of piece `token`, or -1 when the vocabulary has no such piece.
  int32_t id_of(std::string_view token) const;

  // {"format": "campo-wordpiece", "version": 1, "vocab_size": N, "vocab": [...]}.
  std::string to_json() const;
  // Parses and validates to_json()'s output; a malformed or inconsistent vocabulary throws
  // a one-line error starting with `source`.
  static WordPieceTokenizer from_json(std::string_view json,
                                      const std::string& source = "tokenizer vocabulary");
  // Writes to_json() to path atomically (runtime/atomic_file.h).
  void save(const std::string& path) const;
  static WordPieceTokenizer load(const std::string& path);

  // 64-bit FNV-1a hash of the format version and the pieces in id order: equal for equal
  // vocabularies, so a checkpoint can record it and refuse a different vocabulary file.
  uint64_t fingerprint() const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // Appends the pieces of one word (already basic-tokenised) to ids.
  void encode_word(const std::string& word, std::vector<int32_t>* ids) const;

  std::vector<std::string> vocab_;
  size_t max_piece_bytes_ = 0;  // encode tries no longer piece
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
};

}  // namespace campo
