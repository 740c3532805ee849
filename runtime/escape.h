// Text from a file (a checkpoint's tensor names and metadata, a data file's fields) shown in
// an error line: escape_untrusted() makes it one inert, bounded piece of a line.
//
// Escaped as "\xNN": C0 control bytes (newline, carriage return, ESC of an ANSI sequence,
// NUL, ...), DEL, the backslash itself (so an escape in the output always means one), and
// any byte that is not part of valid UTF-8. Escaped as "\u{XXXX}": the C1 controls
// U+0080..U+009F (U+009B acts as ESC [ on some terminals), the line and paragraph
// separators U+2028/U+2029 and the bidirectional overrides and isolates (U+202A..U+202E,
// U+2066..U+2069), which reorder what a terminal shows. Everything else (printable ASCII
// and other valid UTF-8) is kept as it is. At most `max_bytes` bytes of the input are
// shown, cut at a character boundary, followed by "…(N more bytes)".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace campo {

inline constexpr size_t kMaxEscapedBytes = 200;
inline constexpr size_t kMaxErrorLineBytes = 4096;

std::string escape_untrusted(std::string_view text, size_t max_bytes = kMaxEscapedBytes);

// The net under every campo::Error message (runtime/check.cc), for values a caller echoed
// without escape_untrusted: the same escapes, except that a backslash stays as it is (it
// may begin an escape escape_untrusted made), and cut at `max_bytes`.
std::string escape_error_line(std::string_view line, size_t max_bytes = kMaxErrorLineBytes);

}  // namespace campo
