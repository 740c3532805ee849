#include "amp/json_input.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/check.h"
#include "runtime/file_check.h"

namespace campo {

using nlohmann::json;

std::string shown(const std::string& text) {
  constexpr size_t kMax = 60;
  return text.size() <= kMax
             ? text
             : text.substr(0, kMax) + "... (" + std::to_string(text.size()) + " characters)";
}

json parse_json_text(const std::string& text, const std::string& file) {
  std::vector<std::vector<std::string>> keys;  // per open object
  auto on_event = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !keys.empty()) {
      const std::string key = parsed.get<std::string>();
      for (const std::string& k : keys.back())
        CAMPO_CHECK(k != key, file, ": the key \"", shown(key), "\" appears twice in one object");
      keys.back().push_back(key);
    }
    return true;
  };
  try {
    return json::parse(text, on_event);
  } catch (const json::exception& e) {
    std::string what = e.what();  // without nlohmann's "[json.exception.parse_error.101] "
    const size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    CAMPO_FAIL(file, " is not valid JSON: ", what);
  }
}

json read_json_file(const std::string& path, const std::string& kind) {
  require_input_file(path, kind);  // a FIFO would hang the read
  std::ifstream f(path, std::ios::binary);
  CAMPO_CHECK(f.good(), kind, " ", path, ": cannot open: ", std::strerror(errno));
  std::stringstream text;
  text << f.rdbuf();
  return parse_json_text(text.str(), kind + " " + path);
}

OpKind parse_op_in(const std::string& name, const std::string& where) {
  CAMPO_CHECK(!name.empty(), where, ": an empty op name");
  auto op = parse_op_kind(name);
  CAMPO_CHECK(op.has_value(), where, ": unknown op '", shown(name),
              "' (op names are TensorFlow's, e.g. MatMul, Conv2D, Tanh; `campo graph` lists a ",
              "model's)");
  return *op;
}

}  // namespace campo
