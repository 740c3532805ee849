#include "datasets/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>

#include "datasets/text_file.h"
#include "datasets/utf8.h"
#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/escape.h"

namespace campo {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kFormat = "campo-wordpiece";
constexpr int kFormatVersion = 1;
constexpr const char* kSpecialTokens[WordPieceTokenizer::kNumSpecialTokens] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

// Characters basic tokenisation drops: NUL, U+FFFD, control characters that are not
// whitespace, invisible format characters.
bool is_dropped(char32_t c) {
  if (c == 0 || c == 0xfffd) return true;
  if (c < 0x20) return !(c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f');
  if (c == 0x7f || (c >= 0x80 && c <= 0x9f)) return true;
  return c == 0xad || (c >= 0x200b && c <= 0x200f) || (c >= 0x2060 && c <= 0x2064) || c == 0xfeff;
}

bool is_whitespace(char32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
           (c >= 123 && c <= 126);
  return c == 0xa1 || c == 0xa7 || c == 0xab || c == 0xb6 || c == 0xb7 || c == 0xbb || c == 0xbf ||
         (c >= 0x2010 && c <= 0x2027) || (c >= 0x2030 && c <= 0x205e);
}

// CJK ideographs (BERT's _is_chinese_char ranges).
bool is_cjk_ideograph(char32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
         (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
         (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b820 && c <= 0x2ceaf) ||
         (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

// A character that is always a word of its own.
bool is_isolated(char32_t c) { return is_punctuation(c) || is_cjk_ideograph(c); }

// Calls on_word(word, number_of_characters) for each word of basic tokenisation.
template <typename OnWord>
void for_each_word(std::string_view text, OnWord&& on_word) {
  std::string word;
  int64_t chars = 0;
  const auto flush = [&] {
    if (word.empty()) return;
    on_word(word, chars);
    word.clear();
    chars = 0;
  };
  size_t pos = 0;
  while (pos < text.size()) {
    char32_t c;
    const int length = decode_utf8(text, pos, &c);
    CAMPO_CHECK(length > 0, "tokenizer input is not UTF-8 text (byte offset ", pos, ")");
    pos += size_t(length);
    if (is_dropped(c)) continue;
    if (is_whitespace(c)) {
      flush();
    } else if (is_isolated(c)) {
      flush();
      append_utf8(c, &word);
      chars = 1;
      flush();
    } else {
      if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
      append_utf8(c, &word);
      ++chars;
    }
  }
  flush();
}

// The code points of s (valid UTF-8).
std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    char32_t c;
    const int length = decode_utf8(s, pos, &c);
    if (length == 0) return {};
    out.push_back(c);
    pos += size_t(length);
  }
  return out;
}

// A piece as messages show it: quoted, escaped and cut at 60 bytes (runtime/escape.h).
std::string quote(std::string_view s) { return "\"" + escape_untrusted(s, 60) + "\""; }

// Why a non-special piece could never come out of encode, or "" when it can.
std::string piece_problem(std::string_view piece) {
  if (piece.empty()) return "is empty";
  if (find_invalid_utf8(piece) >= 0) return "is not UTF-8";
  const bool is_continuation = piece.starts_with("##") && piece.size() > 2;
  const std::vector<char32_t> body = code_points(is_continuation ? piece.substr(2) : piece);
  if (body.size() > size_t(WordPieceTokenizer::kMaxWordChars))
    return "is longer than the longest word the tokenizer spells (100 characters)";
  for (char32_t c : body) {
    if (is_dropped(c) || is_whitespace(c))
      return "holds whitespace or a control character, which the tokenizer removes";
    if (c >= 'A' && c <= 'Z')
      return "holds an upper-case letter, but the tokenizer lower-cases its input";
    if (is_isolated(c) && (is_continuation || body.size() > 1))
      return "holds punctuation or a CJK ideograph inside a longer piece, but those are "
             "always pieces of their own";
  }
  return "";
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

// A candidate merge in the trainer's heap: the larger count first, then the smaller ids.
struct PairEntry {
  int64_t count;
  int32_t a, b;
  bool operator<(const PairEntry& o) const {  // "lower priority than o"
    if (count != o.count) return count < o.count;
    if (a != o.a) return a > o.a;
    return b > o.b;
  }
};

}  // namespace

std::vector<std::string> basic_tokenize(std::string_view text) {
  std::vector<std::string> words;
  for_each_word(text, [&](const std::string& word, int64_t) { words.push_back(word); });
  return words;
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, const std::string& source)
    : vocab_(std::move(vocab)) {
  const int64_t n = int64_t(vocab_.size());
  CAMPO_CHECK(n > kNumSpecialTokens, source, ": the vocabulary has ", n,
              " pieces; it needs the 5 special tokens and at least one more");
  CAMPO_CHECK(n <= kMaxVocabSize, source, ": the vocabulary has ", n, " pieces, more than ",
              kMaxVocabSize);
  for (int i = 0; i < kNumSpecialTokens; ++i)
    CAMPO_CHECK(vocab_[i] == kSpecialTokens[i], source, ": piece ", i, " is ", quote(vocab_[i]),
                " but ids 0..4 must be [PAD] [UNK] [CLS] [SEP] [MASK]");
  ids_.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    if (i >= kNumSpecialTokens) {
      const std::string problem = piece_problem(vocab_[i]);
      CAMPO_CHECK(problem.empty(), source, ": piece ", i, " ", quote(vocab_[i]), " ", problem);
    }
    const auto [it, inserted] = ids_.emplace(vocab_[i], int32_t(i));
    CAMPO_CHECK(inserted, source, ": piece ", i, " ", quote(vocab_[i]), " repeats piece ",
                it->second);
    max_piece_bytes_ = std::max(max_piece_bytes_, vocab_[i].size());
  }
}

const std::string& WordPieceTokenizer::token(int id) const {
  CAMPO_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary of ",
              vocab_size(), " pieces");
  return vocab_[size_t(id)];
}

int32_t WordPieceTokenizer::id_of(std::string_view token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

void WordPieceTokenizer::encode_word(const std::string& word, std::vector<int32_t>* ids) const {
  // Byte offsets of the word's characters, and its end.
  std::vector<size_t> bounds;
  for (size_t i = 0; i < word.size(); ++i)
    if ((uint8_t(word[i]) & 0xc0) != 0x80) bounds.push_back(i);
  bounds.push_back(word.size());
  const size_t num_chars = bounds.size() - 1;
  if (num_chars > size_t(kMaxWordChars)) {
    ids->push_back(kUnkId);
    return;
  }
  const size_t first = ids->size();
  std::string piece;
  size_t start = 0;
  while (start < num_chars) {
    const size_t prefix = start > 0 ? 2 : 0;
    size_t end = num_chars;
    while (end > start && bounds[end] - bounds[start] + prefix > max_piece_bytes_) --end;
    int32_t found = -1;
    for (; end > start; --end) {
      piece.assign(prefix ? "##" : "");
      piece.append(word, bounds[start], bounds[end] - bounds[start]);
      const auto it = ids_.find(piece);
      if (it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // the word cannot be spelled: one [UNK] for all of it
      ids->resize(first);
      ids->push_back(kUnkId);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  // Words repeat (Zipf): each distinct word is spelled once per call.
  std::unordered_map<std::string, std::pair<size_t, size_t>, StringHash, std::equal_to<>> spelled;
  std::vector<int32_t> pieces;  // the spellings, back to back
  for_each_word(text, [&](const std::string& word, int64_t) {
    auto it = spelled.find(word);
    if (it == spelled.end()) {
      const size_t begin = pieces.size();
      encode_word(word, &pieces);
      it = spelled.emplace(word, std::make_pair(begin, pieces.size() - begin)).first;
    }
    ids.insert(ids.end(), pieces.begin() + ptrdiff_t(it->second.first),
               pieces.begin() + ptrdiff_t(it->second.first + it->second.second));
  });
  return ids;
}

std::string WordPieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    CAMPO_CHECK(id >= 0 && id < vocab_size(), "cannot decode token id ", id, " at position ", i,
                ": the vocabulary has ", vocab_size(), " pieces");
    const std::string& piece = vocab_[size_t(id)];
    if (id >= kNumSpecialTokens && piece.starts_with("##")) {
      out.append(piece, 2);
    } else {
      if (i > 0) out.push_back(' ');
      out += piece;
    }
  }
  return out;
}

WordPieceTokenizer WordPieceTokenizer::train(std::string_view text, int vocab_size) {
  CAMPO_CHECK(vocab_size > kNumSpecialTokens && vocab_size <= kMaxVocabSize, "vocabulary size ",
              vocab_size, " is out of range: use ", kNumSpecialTokens + 1, "..", kMaxVocabSize);

  // 1. Word counts, then the distinct words in byte order (what follows is deterministic).
  std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>> counts;
  for_each_word(text, [&](const std::string& word, int64_t chars) {
    if (chars <= kMaxWordChars) ++counts[word];
  });
  CAMPO_CHECK(!counts.empty(), "the text has no words to train a tokenizer vocabulary on");
  std::vector<std::pair<std::string, int64_t>> words(counts.begin(), counts.end());
  counts.clear();
  std::sort(words.begin(), words.end());

  // 2. The alphabet: every character, then the "##" forms, each in code point order.
  std::set<char32_t> characters;
  std::vector<std::vector<char32_t>> word_chars(words.size());
  for (size_t w = 0; w < words.size(); ++w) {
    word_chars[w] = code_points(words[w].first);
    characters.insert(word_chars[w].begin(), word_chars[w].end());
  }
  std::vector<std::string> vocab(kSpecialTokens, kSpecialTokens + kNumSpecialTokens);
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids;
  const auto add_piece = [&](std::string piece) {
    const auto [it, inserted] = ids.emplace(piece, int32_t(vocab.size()));
    if (inserted) vocab.push_back(std::move(piece));
    return it->second;
  };
  std::unordered_map<char32_t, int32_t> start_id, continuation_id;
  for (char32_t c : characters) {
    std::string piece;
    append_utf8(c, &piece);
    start_id[c] = add_piece(piece);
  }
  for (char32_t c : characters) {
    if (is_isolated(c)) continue;
    std::string piece = "##";
    append_utf8(c, &piece);
    continuation_id[c] = add_piece(piece);
  }
  CAMPO_CHECK(int64_t(vocab.size()) <= vocab_size, "vocabulary size ", vocab_size,
              " cannot hold the ", kNumSpecialTokens, " special tokens and the text's ",
              characters.size(), " characters with their ## forms: use at least ", vocab.size());

  // 3. Byte-pair merges. Each word is a sequence of piece ids; a pair's count is the
  // number of times it is adjacent in the corpus (word count times occurrences).
  std::vector<std::vector<int32_t>> sequences(words.size());
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may hold stale entries
  for (size_t w = 0; w < words.size(); ++w) {
    const std::vector<char32_t>& chars = word_chars[w];
    std::vector<int32_t>& seq = sequences[w];
    seq.push_back(start_id.at(chars[0]));
    for (size_t i = 1; i < chars.size(); ++i) seq.push_back(continuation_id.at(chars[i]));
    for (size_t i = 0; i + 1 < seq.size(); ++i) {
      const uint64_t key = pair_key(seq[i], seq[i + 1]);
      pair_counts[key] += words[w].second;
      pair_words[key].push_back(int32_t(w));
    }
  }
  word_chars.clear();
  std::priority_queue<PairEntry> heap;
  for (const auto& [key, count] : pair_counts)
    heap.push({count, int32_t(key >> 32), int32_t(uint32_t(key))});

  std::vector<int32_t> merged_seq;
  std::vector<uint64_t> touched;
  while (int64_t(vocab.size()) < vocab_size && !heap.empty()) {
    const PairEntry top = heap.top();
    heap.pop();
    const uint64_t key = pair_key(top.a, top.b);
    const auto count_it = pair_counts.find(key);
    const int64_t count = count_it == pair_counts.end() ? 0 : count_it->second;
    if (count != top.count) {  // stale: the count changed since this entry was pushed
      if (count > 0) heap.push({count, top.a, top.b});
      continue;
    }
    if (count < 2) break;
    // b is never a word start, so it is a "##" piece; a + b keeps a's form.
    const int32_t merged = add_piece(vocab[size_t(top.a)] + vocab[size_t(top.b)].substr(2));

    std::vector<int32_t> affected = std::move(pair_words[key]);
    pair_words.erase(key);
    pair_counts.erase(count_it);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    touched.clear();
    for (int32_t w : affected) {
      std::vector<int32_t>& seq = sequences[size_t(w)];
      merged_seq.clear();
      for (size_t i = 0; i < seq.size(); ++i) {
        if (i + 1 < seq.size() && seq[i] == top.a && seq[i + 1] == top.b) {
          merged_seq.push_back(merged);
          ++i;
        } else {
          merged_seq.push_back(seq[i]);
        }
      }
      if (merged_seq.size() == seq.size()) continue;  // a stale entry of pair_words
      const int64_t word_count = words[size_t(w)].second;
      for (size_t i = 0; i + 1 < seq.size(); ++i) {
        const uint64_t k = pair_key(seq[i], seq[i + 1]);
        if (k != key) pair_counts[k] -= word_count;
      }
      for (size_t i = 0; i + 1 < merged_seq.size(); ++i) {
        const uint64_t k = pair_key(merged_seq[i], merged_seq[i + 1]);
        pair_counts[k] += word_count;
        if (merged_seq[i] == merged || merged_seq[i + 1] == merged) {
          touched.push_back(k);
          pair_words[k].push_back(w);
        }
      }
      seq.swap(merged_seq);
    }
    // Pairs with the new piece are the only ones whose counts grew: push their new counts
    // (those that shrank are corrected when their old entries come up).
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t k : touched) {
      const int64_t c = pair_counts[k];
      if (c > 0) heap.push({c, int32_t(k >> 32), int32_t(uint32_t(k))});
    }
  }
  return WordPieceTokenizer(std::move(vocab), "trained tokenizer vocabulary");
}

std::string WordPieceTokenizer::to_json() const {
  Json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["vocab_size"] = vocab_size();
  j["vocab"] = vocab_;
  return j.dump(1);
}

WordPieceTokenizer WordPieceTokenizer::from_json(std::string_view json, const std::string& source) {
  Json j;
  try {
    j = Json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    CAMPO_FAIL(source, ": not valid JSON (", escape_untrusted(e.what(), 300), ")");
  }
  CAMPO_CHECK(j.is_object(), source,
              ": expected a JSON object with \"format\", \"version\", "
              "\"vocab_size\" and \"vocab\"");
  for (const auto& item : j.items())
    CAMPO_CHECK(item.key() == "format" || item.key() == "version" || item.key() == "vocab_size" ||
                    item.key() == "vocab",
                source, ": unknown field ", quote(item.key()));
  for (const char* field : {"format", "version", "vocab_size", "vocab"})
    CAMPO_CHECK(j.contains(field), source, ": field \"", field, "\" is missing");
  CAMPO_CHECK(j["format"].is_string() && j["format"].get<std::string>() == kFormat, source,
              ": field \"format\" must be \"", kFormat, "\"; this is not a campo vocabulary");
  CAMPO_CHECK(j["version"].is_number_integer() && j["version"].get<int64_t>() == kFormatVersion,
              source, ": version ", j["version"].dump(), " is not supported (this campo reads ",
              kFormatVersion, ")");
  const Json& pieces = j["vocab"];
  CAMPO_CHECK(pieces.is_array(), source, ": field \"vocab\" must be an array of strings");
  std::vector<std::string> vocab;
  vocab.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    CAMPO_CHECK(pieces[i].is_string(), source, ": piece ", i, " of \"vocab\" is ",
                pieces[i].type_name(), ", not a string");
    vocab.push_back(pieces[i].get<std::string>());
  }
  CAMPO_CHECK(j["vocab_size"].is_number_integer() &&
                  j["vocab_size"].get<int64_t>() == int64_t(vocab.size()),
              source, ": \"vocab_size\" is ", j["vocab_size"].dump(), " but \"vocab\" holds ",
              vocab.size(), " pieces");
  return WordPieceTokenizer(std::move(vocab), source);
}

void WordPieceTokenizer::save(const std::string& path) const {
  write_file_atomically(path, to_json() + "\n", "tokenizer vocabulary");
}

WordPieceTokenizer WordPieceTokenizer::load(const std::string& path) {
  const std::string kind = "tokenizer vocabulary";
  return from_json(read_text_file(path, kind), kind + " " + path);
}

uint64_t WordPieceTokenizer::fingerprint() const {
  uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a 64
  const auto add = [&](std::string_view bytes) {
    for (char b : bytes) {
      hash ^= uint8_t(b);
      hash *= 0x100000001b3ull;
    }
    hash ^= 0xff;  // a separator no UTF-8 piece contains
    hash *= 0x100000001b3ull;
  };
  add(kFormat);
  add(std::to_string(kFormatVersion));
  for (const std::string& piece : vocab_) add(piece);
  return hash;
}

}  // namespace campo
