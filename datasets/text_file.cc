#include "datasets/text_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "datasets/utf8.h"
#include "runtime/check.h"
#include "runtime/file_check.h"

namespace campo {

std::string read_text_file(const std::string& path, const std::string& kind) {
  require_input_file(path, kind);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  CAMPO_CHECK(!ec, "cannot read ", kind, " ", path, ": ", ec.message());
  CAMPO_CHECK(int64_t(size) <= kMaxTextFileBytes, kind, " ", path, " is ", size,
              " bytes, more than the ", kMaxTextFileBytes >> 20,
              " MiB campo reads; use a part of it");
  std::ifstream in(path, std::ios::binary);
  CAMPO_CHECK(in, "cannot open ", kind, " ", path, ": ", std::strerror(errno));
  std::string text(size, '\0');
  in.read(text.data(), std::streamsize(size));
  CAMPO_CHECK(in.gcount() == std::streamsize(size), "cannot read ", kind, " ", path,
              ": it ended after ", in.gcount(), " of ", size, " bytes");
  CAMPO_CHECK(!text.empty(), kind, " ", path, " is empty");
  if (const void* nul = std::memchr(text.data(), 0, text.size()))
    CAMPO_FAIL(kind, " ", path, " is not text: a NUL byte at byte offset ",
               static_cast<const char*>(nul) - text.data());
  const int64_t bad = find_invalid_utf8(text);
  CAMPO_CHECK(bad < 0, kind, " ", path, " is not UTF-8 text (byte offset ", bad, ")");
  if (text.starts_with("\xef\xbb\xbf")) text.erase(0, 3);
  CAMPO_CHECK(!text.empty(), kind, " ", path, " is empty (a byte-order mark only)");
  return text;
}

}  // namespace campo
