#include "runtime/escape.h"

#include <cstdint>
#include <cstdio>

namespace campo {

namespace {

// The length of the valid UTF-8 sequence at s[i] (2 to 4 bytes) and its code point, or 0
// when the bytes there are not one (a stray continuation byte, an overlong form, a
// surrogate, a code point above U+10FFFF, a cut sequence).
size_t utf8_sequence(std::string_view s, size_t i, char32_t* code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char lead = byte(0);
  size_t n;
  char32_t cp, min;
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2, cp = lead & 0x1F, min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3, cp = lead & 0x0F, min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4, cp = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  *code_point = cp;
  return n;
}

// Characters a terminal acts on or that reorder the line around them.
bool is_unsafe_code_point(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

void append_byte_escape(std::string& out, unsigned char c) {
  char buf[5];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

std::string escape(std::string_view text, size_t max_bytes, bool escape_backslash) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    char32_t cp = 0;
    const size_t n = c < 0x80 ? 1 : utf8_sequence(text, i, &cp);
    const size_t take = n == 0 ? 1 : n;
    if (i + take > max_bytes) break;
    if (n == 1) {
      if (c < 0x20 || c == 0x7F || (c == '\\' && escape_backslash))
        append_byte_escape(out, c);
      else
        out += char(c);
    } else if (n == 0) {
      append_byte_escape(out, c);
    } else if (is_unsafe_code_point(cp)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u{%04x}", unsigned(cp));
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
    i += take;
  }
  if (i < text.size()) out += "\u2026(" + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

}  // namespace

std::string escape_untrusted(std::string_view text, size_t max_bytes) {
  return escape(text, max_bytes, true);
}

std::string escape_error_line(std::string_view line, size_t max_bytes) {
  return escape(line, max_bytes, false);
}

}  // namespace campo
