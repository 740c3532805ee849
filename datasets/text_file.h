// Reading a UTF-8 text file whole, for every file campo reads as text: a corpus
// (datasets/text.h), a tokenizer vocabulary (datasets/tokenizer.h), a device table or a
// profile. Below the text data set and the tokenizer, which both include it.
#pragma once

#include <cstdint>
#include <string>

namespace campo {

// The largest text file read_text_file accepts.
inline constexpr int64_t kMaxTextFileBytes = int64_t(256) << 20;

// The whole of a UTF-8 text file (a leading byte-order mark removed). Throws, naming `kind`
// and path, when the path is not a readable regular file (require_input_file), the file is
// empty, larger than kMaxTextFileBytes, holds a NUL byte, or is not valid UTF-8 (with the
// byte offset of the first bad sequence).
std::string read_text_file(const std::string& path, const std::string& kind = "text file");

}  // namespace campo
