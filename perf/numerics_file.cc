#include "perf/numerics_file.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/check.h"
#include "runtime/escape.h"
#include "runtime/file_check.h"
#include "runtime/json_lines.h"

namespace campo {

namespace {

constexpr const char* kKind = "--numerics file";
constexpr uint64_t kMostCount = uint64_t(1) << 62;

double fraction_field(const nlohmann::json& j, const char* key, const TableWhere& w) {
  const double x = number_field(j, key, w);
  CAMPO_CHECK(x >= 0 && x <= 1, w.str(), ": '", key, "' is ", x, ", not a fraction in [0, 1]");
  return x;
}

// A string field that must be one of `allowed`, or a short name (letters, digits, _).
std::string name_field(const nlohmann::json& j, const char* key, const TableWhere& w,
                       std::initializer_list<const char*> allowed = {}) {
  const std::string v = string_field(j, key, w);
  const bool ok =
      allowed.size() > 0
          ? std::any_of(allowed.begin(), allowed.end(), [&](const char* a) { return v == a; })
          : !v.empty() && v.size() <= 16 && std::all_of(v.begin(), v.end(), [](char c) {
              return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
            });
  CAMPO_CHECK(ok, w.str(), ": '", key, "' is '", escape_untrusted(v, 64), "', not ",
              allowed.size() > 0 ? "one campo writes" : "a format name");
  return v;
}

// sum += n, refused where the sum would pass int64.
void add_count(int64_t& sum, uint64_t n, const TableWhere& w) {
  CAMPO_CHECK(!__builtin_add_overflow(sum, int64_t(n), &sum), w.str(),
              ": the NaN or inf counts add up past 2^63");
}

bool is_numerics_record(const nlohmann::json& j) {
  const auto event = j.find("event");
  return event != j.end() && event->is_string() && event->get<std::string>() == "numerics";
}

// Adds one numerics record to its tensor's sums (underflow and saturated summed over steps).
void add_record(const nlohmann::json& j, const TableWhere& w, NumericsSummary& s,
                std::map<std::pair<std::string, std::string>, TensorLoss>& sums) {
  const int64_t step = int64_t(unsigned_field(j, "step", kMostCount, w));
  const std::string node = string_field(j, "node", w);
  const std::string operand = name_field(j, "operand", w, {"a", "b", "x"});
  TensorLoss& t = sums[{node, operand}];
  t.operand = operand;
  t.pass = name_field(j, "pass", w, {"forward", "backward", "update"});
  t.format = name_field(j, "format", w);
  const uint64_t elements = unsigned_field(j, "elements", kMostCount, w);
  CAMPO_CHECK(elements > 0, w.str(), ": 'elements' is 0");
  const double underflow = fraction_field(j, "underflow", w);
  const double saturated = fraction_field(j, "saturated", w) + fraction_field(j, "overflow", w);
  // An element is counted in one of them at most.
  CAMPO_CHECK(underflow + saturated <= 1.0 + 1e-9, w.str(),
              ": 'underflow', 'saturated' and 'overflow' add up to ", underflow + saturated,
              ", more than all the elements");
  t.underflow += underflow;
  t.saturated += saturated;
  add_count(t.nan, unsigned_field(j, "nan", elements, w), w);
  add_count(t.inf, unsigned_field(j, "inf", elements, w), w);
  ++t.steps;
  s.first_step = s.records == 0 ? step : std::min(s.first_step, step);
  s.last_step = std::max(s.last_step, step);
  ++s.records;
}

}  // namespace

NumericsSummary read_numerics_file(const std::string& path) {
  require_input_file(path, kKind);
  CAMPO_CHECK(std::filesystem::file_size(path) > 0, kKind, " ", path,
              " is empty: no numerics records (campo train --numerics --metrics FILE writes them)");
  NumericsSummary s;
  s.path = path;
  std::map<std::pair<std::string, std::string>, TensorLoss> sums;
  for_each_json_line(path, kKind, "numerics", [&](const nlohmann::json& j, const TableWhere& w) {
    if (is_numerics_record(j)) add_record(j, w, s, sums);
  });
  CAMPO_CHECK(s.records > 0, kKind, " ", path,
              " holds no numerics records (campo train --numerics --metrics FILE writes them)");
  for (auto& [key, t] : sums) {
    t.underflow /= double(t.steps);
    t.saturated /= double(t.steps);
    const auto [it, added] = s.nodes.try_emplace(key.first, t);
    if (!added && t.lost() > it->second.lost()) it->second = t;
  }
  return s;
}

std::vector<std::string> nodes_losing_most(const NumericsSummary& s,
                                           const std::vector<std::string>& nodes, size_t count) {
  std::vector<std::pair<double, std::string>> losing;
  for (const std::string& name : nodes)
    if (const auto it = s.nodes.find(name); it != s.nodes.end() && it->second.lost() > 0)
      losing.emplace_back(-it->second.lost(), name);
  std::sort(losing.begin(), losing.end());
  std::vector<std::string> out;
  for (size_t i = 0; i < losing.size() && i < count; ++i) out.push_back(losing[i].second);
  return out;
}

std::string describe_loss(const TensorLoss& t) {
  char text[160];
  std::snprintf(text, sizeof text, "%s %s %s: underflow %.3g%%, saturated %.3g%%",
                t.operand.c_str(), t.pass == "forward" ? "fwd" : "bwd", t.format.c_str(),
                100.0 * t.underflow, 100.0 * t.saturated);
  std::string s = text;
  if (t.nan > 0 || t.inf > 0)
    s += ", " + std::to_string(t.nan) + " NaN and " + std::to_string(t.inf) + " inf inputs";
  return s;
}

}  // namespace campo
