// WordPieceTokenizer: basic tokenisation, greedy longest-match WordPiece, the trainer, the
// vocabulary file (JSON) and its fingerprint. The real corpus (Debian's fortunes) is in
// text_test.cc.
#include "datasets/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "runtime/check.h"
#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::TempDir;

// The campo::Error message of f(), or "" when f() does not throw one.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// A made-up text whose words repeat often enough to be merged whole.
std::string small_text() {
  std::string text;
  for (int i = 0; i < 40; ++i)
    text +=
        "The cat sat on the mat. The dog sat on the log! Cats and dogs, mats and logs; "
        "a lower lowest lowly flower flowed slowly.\n";
  return text;
}

std::vector<std::string> special_tokens() { return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}; }

WordPieceTokenizer tokenizer_of(const std::vector<std::string>& pieces) {
  std::vector<std::string> vocab = special_tokens();
  vocab.insert(vocab.end(), pieces.begin(), pieces.end());
  return WordPieceTokenizer(vocab);
}

std::vector<std::string> pieces_of(const WordPieceTokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token(id));
  return out;
}

TEST(BasicTokenize, LowerCasesAndSplitsOnWhitespaceAndPunctuation) {
  EXPECT_EQ(join(basic_tokenize("Hello, World!  Don't\tSTOP\n(now)")),
            "hello , world ! don ' t stop ( now )");
  EXPECT_TRUE(basic_tokenize(" \t\n ").empty());
}

TEST(BasicTokenize, KeepsNonAsciiCharactersAndSplitsUnicodePunctuation) {
  // "Café" keeps its é (only A..Z are lower-cased); ’ and — are punctuation; each CJK
  // ideograph is a word; a no-break space separates words.
  EXPECT_EQ(
      join(basic_tokenize("Caf\xc3\xa9 it\xe2\x80\x99s\xe2\x80\x94\xe4\xb8\xad\xe6\x96\x87"
                          "\xc2\xa0\xc3\x89t\xc3\xa9")),
      "caf\xc3\xa9 it \xe2\x80\x99 s \xe2\x80\x94 \xe4\xb8\xad \xe6\x96\x87 \xc3\x89t\xc3\xa9");
}

TEST(BasicTokenize, DropsControlCharacters) {
  // Backspace overstriking as in old fortune files, a NUL and a zero-width space.
  const char raw[] =
      "_\bb\bbold a\0b c\xe2\x80\x8b"
      "d";
  EXPECT_EQ(join(basic_tokenize(std::string(raw, sizeof(raw) - 1))), "_ bbold ab cd");
}

TEST(BasicTokenize, RefusesInvalidUtf8NamingTheOffset) {
  const std::string message = error_of([] { basic_tokenize("abc \xff def"); });
  EXPECT_NE(message.find("not UTF-8 text (byte offset 4)"), std::string::npos) << message;
}

TEST(WordPieceTokenizer, GreedyLongestMatchFirst) {
  const WordPieceTokenizer tok = tokenizer_of({"u", "un", "una", "##n", "##a", "##f", "##b", "##l",
                                               "##e", "##aff", "##ffable", "##able", ","});
  // "una" is the longest start, then "##ffable" the longest continuation, although
  // "un" "##aff" "##able" would spell the word too.
  EXPECT_EQ(join(pieces_of(tok, tok.encode("unaffable"))), "una ##ffable");
  EXPECT_EQ(join(pieces_of(tok, tok.encode("Unable, una"))), "una ##b ##l ##e , una");
  EXPECT_EQ(tok.decode(tok.encode("UNAFFABLE,unable")), "unaffable , unable");
}

TEST(WordPieceTokenizer, UnspellableWordsAreOneUnk) {
  const WordPieceTokenizer tok = tokenizer_of({"a", "b", "##a", "##b", "."});
  const int32_t a = tok.id_of("a"), dot = tok.id_of(".");
  // "abc": "a" "##b" spell its start, but nothing spells "c": the whole word is one [UNK].
  EXPECT_EQ(tok.encode("a abc ."), (std::vector<int32_t>{a, WordPieceTokenizer::kUnkId, dot}));
  // "##." is no piece: punctuation is always a word of its own.
  EXPECT_EQ(tok.encode("a.a"), (std::vector<int32_t>{a, dot, a}));
  // A word of more than 100 characters is [UNK], even when spellable.
  EXPECT_EQ(tok.encode(std::string(100, 'a')).size(), 100u);
  EXPECT_EQ(tok.encode(std::string(101, 'a')), (std::vector<int32_t>{WordPieceTokenizer::kUnkId}));
}

TEST(WordPieceTokenizer, SpecialTokensHaveFixedIds) {
  const WordPieceTokenizer tok = tokenizer_of({"a"});
  EXPECT_EQ(tok.token(0), "[PAD]");
  EXPECT_EQ(tok.token(1), "[UNK]");
  EXPECT_EQ(tok.token(2), "[CLS]");
  EXPECT_EQ(tok.token(3), "[SEP]");
  EXPECT_EQ(tok.token(4), "[MASK]");
  EXPECT_EQ(tok.id_of("[MASK]"), WordPieceTokenizer::kMaskId);
  // Text never produces a special token: "[MASK]" in text is punctuation and a word.
  EXPECT_EQ(tok.encode("[mask]").size(), 3u);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{2, 5, 4, 3}), "[CLS] a [MASK] [SEP]");
  EXPECT_NE(error_of([&] {
              tok.decode(std::vector<int32_t>{5, 6});
            }).find("token id 6"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.token(-1); }), "");
}

TEST(WordPieceTokenizerTrain, RoundTripsInVocabularyText) {
  const WordPieceTokenizer tok = WordPieceTokenizer::train(small_text(), 120);
  EXPECT_LE(tok.vocab_size(), 120);
  const std::string text = "The log sat on a cat; slowly, the flower FLOWED!";
  const std::vector<int32_t> ids = tok.encode(text);
  for (int32_t id : ids) EXPECT_NE(id, WordPieceTokenizer::kUnkId);
  EXPECT_EQ(tok.decode(ids), join(basic_tokenize(text)));
  // Frequent words became single pieces.
  EXPECT_EQ(tok.encode("the").size(), 1u);
  EXPECT_EQ(tok.encode("sat").size(), 1u);
  // A word never seen is still spelled, from smaller pieces.
  EXPECT_GT(tok.encode("toads").size(), 1u);
  EXPECT_EQ(tok.decode(tok.encode("toads")), "toads");
  // Characters the text never had are [UNK].
  EXPECT_EQ(tok.encode("zzz"), (std::vector<int32_t>{WordPieceTokenizer::kUnkId}));
}

TEST(WordPieceTokenizerTrain, AlphabetFirstThenMerges) {
  const WordPieceTokenizer tok = WordPieceTokenizer::train("ab ab ab ba, ba", 100);
  // Specials; the characters in code point order; their ## forms (none for ","); then the
  // merges: "a"+"##b" (3 times) and "b"+"##a" (twice). No pair is left to merge.
  const std::vector<std::string> expected = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",",
                                             "a",     "b",     "##a",   "##b",   "ab",     "ba"};
  ASSERT_EQ(tok.vocab_size(), int(expected.size()));
  for (int i = 0; i < tok.vocab_size(); ++i) EXPECT_EQ(tok.token(i), expected[size_t(i)]) << i;
}

TEST(WordPieceTokenizerTrain, MergesTheMostFrequentPairUntilPairsAreSeenOnce) {
  // Words: lower x3, lowest x2, newer x1. Pair counts: "##w"+"##e" 6 (all three words),
  // "l"+"##o" 5 and "##o"+"##w" 5 (the tie goes to the smaller ids: "l" < "##o"),
  // "##e"+"##r" 4. After "##we", "lo", "lowe": "lowe"+"##r" 3 -> "lower"; then
  // "##s"+"##t" 2 and "lowe"+"##s" 2 tie ("##s" < "lowe") -> "##st"; "lowe"+"##st" 2 ->
  // "lowest". What is left ("n"+"##e", ...) occurs once: training stops short of 1000.
  const WordPieceTokenizer tok =
      WordPieceTokenizer::train("lower lower Lower lowest lowest newer", 1000);
  const std::vector<std::string> merges = {"##we", "lo", "lowe", "lower", "##st", "lowest"};
  const int alphabet_end = 5 + 8 + 8;  // e l n o r s t w, and their ## forms
  ASSERT_EQ(tok.vocab_size(), alphabet_end + int(merges.size()));
  for (size_t i = 0; i < merges.size(); ++i)
    EXPECT_EQ(tok.token(alphabet_end + int(i)), merges[i]) << i;
  EXPECT_EQ(join(pieces_of(tok, tok.encode("lowest newer slower"))),
            "lowest n ##e ##we ##r s ##l ##o ##we ##r");
}

TEST(WordPieceTokenizerTrain, IsDeterministicAndPrefixClosed) {
  const std::string text = small_text();
  const WordPieceTokenizer a = WordPieceTokenizer::train(text, 70);
  const WordPieceTokenizer b = WordPieceTokenizer::train(text, 70);
  ASSERT_EQ(a.vocab_size(), 70);
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  // The merges come in one fixed order, so a smaller vocabulary is a prefix of a larger.
  const WordPieceTokenizer smaller = WordPieceTokenizer::train(text, 55);
  ASSERT_EQ(smaller.vocab_size(), 55);
  for (int i = 0; i < smaller.vocab_size(); ++i) EXPECT_EQ(smaller.token(i), a.token(i)) << i;
}

TEST(WordPieceTokenizerTrain, RefusesAVocabularyTooSmallForTheAlphabet) {
  // 5 specials + "a" "b" "c" + "##a" "##b" "##c" = 11.
  const std::string message = error_of([] { WordPieceTokenizer::train("abc cab", 10); });
  EXPECT_NE(message.find("use at least 11"), std::string::npos) << message;
  EXPECT_EQ(WordPieceTokenizer::train("abc cab", 11).vocab_size(), 11);
  EXPECT_NE(error_of([] { WordPieceTokenizer::train("abc", 5); }), "");
  EXPECT_EQ(WordPieceTokenizer::train(" ,", 100).vocab_size(), 6);  // "," alone: no ## form
  EXPECT_NE(error_of([] { WordPieceTokenizer::train(" \n ", 100); }).find("no words"),
            std::string::npos);
}

TEST(WordPieceTokenizerJson, RoundTrips) {
  const WordPieceTokenizer tok = WordPieceTokenizer::train(small_text() + " caf\xc3\xa9", 100);
  const WordPieceTokenizer back = WordPieceTokenizer::from_json(tok.to_json());
  ASSERT_EQ(back.vocab_size(), tok.vocab_size());
  for (int i = 0; i < tok.vocab_size(); ++i) EXPECT_EQ(back.token(i), tok.token(i));
  EXPECT_EQ(back.fingerprint(), tok.fingerprint());

  TempDir dir;
  const std::string path = dir.file("vocab.json");
  tok.save(path);
  const WordPieceTokenizer loaded = WordPieceTokenizer::load(path);
  EXPECT_EQ(loaded.to_json(), tok.to_json());
  EXPECT_EQ(loaded.encode("the cat"), tok.encode("the cat"));
}

TEST(WordPieceTokenizerJson, MalformedOrInconsistentVocabulariesAreOneLineErrors) {
  const auto vocab_json = [](const std::string& pieces, const std::string& size = "7") {
    return R"({"format": "campo-wordpiece", "version": 1, "vocab_size": )" + size +
           R"(, "vocab": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", )" + pieces + "]}";
  };
  ASSERT_EQ(WordPieceTokenizer::from_json(vocab_json(R"("a", "##b")")).vocab_size(), 7);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"format\": ", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {R"({"format": "campo-wordpiece", "version": 1, "vocab_size": 0})", "\"vocab\" is missing"},
      {R"({"format": "bert", "version": 1, "vocab_size": 6, "vocab": []})", "\"format\" must be"},
      {R"({"format": "campo-wordpiece", "version": 2, "vocab_size": 6, "vocab": []})",
       "version 2 is not supported"},
      {R"({"format": "campo-wordpiece", "version": 1, "vocab_size": 6, "vocab": [], "x": 1})",
       "unknown field \"x\""},
      {R"({"format": "campo-wordpiece", "version": 1, "vocab_size": 6, "vocab": "a"})",
       "must be an array"},
      {vocab_json(R"("a", 7)"), "piece 6 of \"vocab\" is number"},
      {vocab_json(R"("a", "b")", "8"), "\"vocab_size\" is 8 but \"vocab\" holds 7"},
      {vocab_json(R"("a", "a")"), "piece 6 \"a\" repeats piece 5"},
      {vocab_json(R"("a", "B")"), "upper-case"},
      {vocab_json(R"("a", "##")"), "punctuation"},
      {vocab_json(R"("a", "a,")"), "punctuation"},
      {vocab_json(R"("a", "##,")"), "punctuation"},
      {vocab_json(R"("a", "a b")"), "whitespace"},
      {vocab_json(R"("a", "")"), "is empty"},
      {vocab_json("\"a\", \"" + std::string(101, 'a') + "\""), "longer than the longest word"},
      {R"({"format": "campo-wordpiece", "version": 1, "vocab_size": 6,)"
       R"( "vocab": ["[PAD]", "[CLS]", "[UNK]", "[SEP]", "[MASK]", "a"]})",
       "ids 0..4 must be [PAD] [UNK] [CLS] [SEP] [MASK]"},
      {R"({"format": "campo-wordpiece", "version": 1, "vocab_size": 5,)"
       R"( "vocab": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]})",
       "at least one more"},
  };
  for (const auto& [json, expected] : cases) {
    // Captured through a reference: clang 14 (the sanitizer build's) cannot capture a
    // structured binding.
    const auto& text = json;
    const std::string message =
        error_of([&] { WordPieceTokenizer::from_json(text, "tokenizer vocabulary v.json"); });
    EXPECT_NE(message.find(expected), std::string::npos) << json << "\n -> " << message;
    EXPECT_EQ(message.rfind("tokenizer vocabulary v.json: ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(WordPieceTokenizerJson, LoadNamesTheFile) {
  TempDir dir;
  const std::string path = dir.file("bad.json");
  std::ofstream(path) << R"({"format": "campo-wordpiece"})";
  EXPECT_NE(error_of([&] {
              WordPieceTokenizer::load(path);
            }).find("tokenizer vocabulary " + path + ": field \"version\" is missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              WordPieceTokenizer::load(dir.file("absent.json"));
            }).find(dir.file("absent.json")),
            std::string::npos);
  EXPECT_NE(error_of([&] { WordPieceTokenizer::load(dir.str()); }), "");
}

TEST(WordPieceTokenizer, FingerprintFollowsTheVocabulary) {
  const WordPieceTokenizer ab = tokenizer_of({"a", "b"});
  EXPECT_EQ(ab.fingerprint(), tokenizer_of({"a", "b"}).fingerprint());
  EXPECT_NE(ab.fingerprint(), tokenizer_of({"b", "a"}).fingerprint());  // same pieces, other ids
  EXPECT_NE(ab.fingerprint(), tokenizer_of({"a", "b", "c"}).fingerprint());
  EXPECT_NE(ab.fingerprint(), tokenizer_of({"ab"}).fingerprint());  // no concatenation clash
  EXPECT_NE(tokenizer_of({"ab", "c"}).fingerprint(), tokenizer_of({"a", "bc"}).fingerprint());
}

}  // namespace
}  // namespace campo
