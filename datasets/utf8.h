// Strict UTF-8 decoding, shared by the text reader (datasets/text_file.h) and the tokenizer
// (datasets/tokenizer.h). Strict: no overlong forms, no surrogates (U+D800..U+DFFF), nothing
// above U+10FFFF, no truncated sequence; a decoder that guessed would tokenise a Latin-1
// file into nonsense without saying so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace campo {

// Decodes the code point starting at text[pos] into *code_point and returns its length in
// bytes (1..4), or 0 when the bytes there are not valid UTF-8. pos < text.size().
inline int decode_utf8(std::string_view text, size_t pos, char32_t* code_point) {
  const auto byte = [&](size_t i) { return uint8_t(text[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  int length;
  char32_t min_value;
  char32_t value;
  if ((b0 & 0xe0) == 0xc0) {
    length = 2, min_value = 0x80, value = b0 & 0x1f;
  } else if ((b0 & 0xf0) == 0xe0) {
    length = 3, min_value = 0x800, value = b0 & 0x0f;
  } else if ((b0 & 0xf8) == 0xf0) {
    length = 4, min_value = 0x10000, value = b0 & 0x07;
  } else {
    return 0;  // a continuation byte or 0xf8..0xff where a sequence should start
  }
  if (text.size() - pos < size_t(length)) return 0;
  for (int i = 1; i < length; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xc0) != 0x80) return 0;
    value = (value << 6) | (b & 0x3f);
  }
  if (value < min_value || value > 0x10ffff || (value >= 0xd800 && value <= 0xdfff)) return 0;
  *code_point = value;
  return length;
}

// The byte offset of the first invalid UTF-8 sequence in text, or -1 when all of it is valid.
inline int64_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  char32_t code_point;
  while (pos < text.size()) {
    const int length = decode_utf8(text, pos, &code_point);
    if (length == 0) return int64_t(pos);
    pos += size_t(length);
  }
  return -1;
}

// Appends the UTF-8 encoding of code_point (a valid scalar value) to out.
inline void append_utf8(char32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(char(code_point));
  } else if (code_point < 0x800) {
    out->push_back(char(0xc0 | (code_point >> 6)));
    out->push_back(char(0x80 | (code_point & 0x3f)));
  } else if (code_point < 0x10000) {
    out->push_back(char(0xe0 | (code_point >> 12)));
    out->push_back(char(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(char(0x80 | (code_point & 0x3f)));
  } else {
    out->push_back(char(0xf0 | (code_point >> 18)));
    out->push_back(char(0x80 | ((code_point >> 12) & 0x3f)));
    out->push_back(char(0x80 | ((code_point >> 6) & 0x3f)));
    out->push_back(char(0x80 | (code_point & 0x3f)));
  }
}

}  // namespace campo
