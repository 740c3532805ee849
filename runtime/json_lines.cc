#include "runtime/json_lines.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>

#include "runtime/check.h"
#include "runtime/escape.h"
#include "runtime/file_check.h"

namespace campo {

std::string TableWhere::str() const {
  return std::string(kind) + " " + path + (line ? ": line " + std::to_string(line) : "");
}

void for_each_json_line(
    const std::string& path, const char* kind, const char* format,
    const std::function<void(const nlohmann::json&, const TableWhere&)>& record) {
  require_input_file(path, kind);
  std::ifstream in(path, std::ios::binary);
  CAMPO_CHECK(in, "cannot open ", kind, " ", path, ": ", std::strerror(errno));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  CAMPO_CHECK(!in.bad(), "cannot read ", kind, " ", path);
  TableWhere w{kind, path};
  CAMPO_CHECK(!text.empty(), w.str(), " is empty: no '", format, "' header");
  for (size_t begin = 0; begin < text.size();) {
    ++w.line;
    const size_t newline = text.find('\n', begin);
    const bool terminated = newline != std::string::npos;
    std::string_view l(text.data() + begin, (terminated ? newline : text.size()) - begin);
    begin = terminated ? newline + 1 : text.size();
    if (l.ends_with('\r')) l.remove_suffix(1);
    CAMPO_CHECK(!l.empty(), w.str(), ": empty line (one JSON object per line)");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(l);
    } catch (const nlohmann::json::parse_error& e) {
      // The writers end every line; an unended line that does not parse is a cut file.
      CAMPO_CHECK(terminated, w.str(), ": truncated: the file ends inside this record");
      // nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: why":
      // its line is always 1 here, so the column and the why.
      std::string why = e.what();
      if (size_t p = why.find(": "); p != std::string::npos) why = why.substr(p + 2);
      CAMPO_FAIL(w.str(), ": not JSON at column ", e.byte, " (", escape_untrusted(why, 300), ")");
    } catch (const nlohmann::json::exception& e) {  // a number past a double's range
      std::string why = e.what();
      if (size_t p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
      CAMPO_FAIL(w.str(), ": not JSON (", escape_untrusted(why, 300), ")");
    }
    CAMPO_CHECK(j.is_object(), w.str(), ": a JSON ", j.type_name(), ", not an object");
    record(j, w);
  }
}

uint64_t unsigned_field(const nlohmann::json& j, const char* key, uint64_t most,
                        const TableWhere& w) {
  CAMPO_CHECK(j.contains(key), w.str(), ": '", key, "' is missing");
  const nlohmann::json& v = j[key];
  CAMPO_CHECK(v.is_number(), w.str(), ": '", key, "' is ", v.type_name(), ", not a number");
  CAMPO_CHECK(!v.is_number_float(), w.str(), ": '", key, "' is ", v.dump(), ", not an integer");
  CAMPO_CHECK(v.is_number_unsigned(), w.str(), ": '", key, "' is ", v.dump(), ", negative");
  const uint64_t n = v.get<uint64_t>();
  CAMPO_CHECK(n <= most, w.str(), ": '", key, "' is ", n, ", more than ", most);
  return n;
}

std::string string_field(const nlohmann::json& j, const char* key, const TableWhere& w) {
  CAMPO_CHECK(j.contains(key), w.str(), ": '", key, "' is missing");
  CAMPO_CHECK(j[key].is_string(), w.str(), ": '", key, "' is ", j[key].type_name(),
              ", not a string");
  return j[key].get<std::string>();
}

double number_field(const nlohmann::json& j, const char* key, const TableWhere& w) {
  CAMPO_CHECK(j.contains(key), w.str(), ": '", key, "' is missing");
  const nlohmann::json& v = j[key];
  CAMPO_CHECK(v.is_number(), w.str(), ": '", key, "' is ", v.type_name(), ", not a number");
  const double x = v.get<double>();
  CAMPO_CHECK(std::isfinite(x), w.str(), ": '", key, "' is not finite");
  return x;
}

}  // namespace campo
