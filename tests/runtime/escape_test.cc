// escape_untrusted / escape_error_line: text from a file becomes one inert, bounded piece of
// an error line; every campo::Error message passes escape_error_line.
#include "runtime/escape.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/check.h"

namespace campo {
namespace {

// No byte a terminal acts on: no C0 control, no DEL, no ESC.
bool is_inert(const std::string& s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u < 0x20 || u == 0x7F;
  });
}

TEST(EscapeUntrustedTest, ControlsAndBackslashesAreEscaped) {
  EXPECT_EQ(escape_untrusted("conv1.weight"), "conv1.weight");
  EXPECT_EQ(escape_untrusted("a\nb\r\tc"), "a\\x0ab\\x0d\\x09c");
  EXPECT_EQ(escape_untrusted("\x1b[2J\x1b]0;title\x07"), "\\x1b[2J\\x1b]0;title\\x07");
  EXPECT_EQ(escape_untrusted(std::string("nul\0del\x7f", 8)), "nul\\x00del\\x7f");
  EXPECT_EQ(escape_untrusted("C:\\x1b"), "C:\\x5cx1b");  // a literal "\x1b" stays readable
}

TEST(EscapeUntrustedTest, Utf8IsKeptExceptCharactersThatActOrReorder) {
  EXPECT_EQ(escape_untrusted("caf\xc3\xa9 \xe6\x9d\x83\xe9\x87\x8d"),
            "caf\xc3\xa9 \xe6\x9d\x83\xe9\x87\x8d");  // é, 権重
  EXPECT_EQ(escape_untrusted("\xc2\x9b"
                             "31m"),
            "\\u{009b}31m");  // C1 CSI
  EXPECT_EQ(escape_untrusted("a\xe2\x80\xae"
                             "b"),
            "a\\u{202e}b");  // right-to-left override
  EXPECT_EQ(escape_untrusted("a\xe2\x80\xa8"
                             "b"),
            "a\\u{2028}b");  // line separator
  EXPECT_EQ(escape_untrusted("\xff\xc3(\xed\xa0\x80"), "\\xff\\xc3(\\xed\\xa0\\x80");  // not UTF-8
  EXPECT_EQ(escape_untrusted("\xc0\xaf"), "\\xc0\\xaf");  // overlong '/'
}

TEST(EscapeUntrustedTest, LongTextIsCutAtACharacterBoundary) {
  const std::string mb(1 << 20, 'A');
  const std::string shown = escape_untrusted(mb);
  EXPECT_EQ(shown,
            std::string(200, 'A') + "\u2026(" + std::to_string((1 << 20) - 200) + " more bytes)");
  // 199 ASCII bytes and a 2-byte character that would end past byte 200: it is left out.
  EXPECT_EQ(escape_untrusted(std::string(199, 'a') + "\xc3\xa9xyz"),
            std::string(199, 'a') + "\u2026(5 more bytes)");
  // Escapes grow the text; the limit counts the input's bytes.
  const std::string escapes(1000, '\x1b');
  std::string expected;
  for (int i = 0; i < 200; ++i) expected += "\\x1b";
  EXPECT_EQ(escape_untrusted(escapes), expected + "\u2026(800 more bytes)");
  EXPECT_EQ(escape_untrusted("abcdef", 3), "abc\u2026(3 more bytes)");
}

// The net under every error: whatever a caller echoed, the message is one inert line of at
// most kMaxErrorLineBytes (plus the "more bytes" note); an escape made by escape_untrusted
// is not escaped twice.
TEST(EscapeErrorLineTest, EveryErrorMessageIsOneInertBoundedLine) {
  std::string value = "\x1b[31mred\nsecond line";
  value += std::string(1 << 20, 'x');
  try {
    CAMPO_FAIL("unknown model '", value, "'; shown: '", escape_untrusted("\x1b"), "'");
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(is_inert(what)) << what.substr(0, 100);
    EXPECT_TRUE(what.starts_with("unknown model '\\x1b[31mred\\x0asecond line"))
        << what.substr(0, 100);
    EXPECT_LT(what.size(), kMaxErrorLineBytes + 40);
    EXPECT_NE(what.find(" more bytes)"), std::string::npos);
  }
  try {
    CAMPO_FAIL("a path C:\\dir and an escape '", escape_untrusted("\n"), "'");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "a path C:\\dir and an escape '\\x0a'");
  }
}

}  // namespace
}  // namespace campo
