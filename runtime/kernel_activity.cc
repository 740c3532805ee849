#include "runtime/kernel_activity.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/file_check.h"

namespace campo {

namespace {

constexpr const char* kFormat = "campo-cupti-activity";
constexpr uint64_t kVersion = 1;
constexpr const char* kKind = "CUPTI activity table";

// Where a reader's error points: "CUPTI activity table <path>: line <n>".
struct Where {
  const std::string& path;
  size_t line = 0;
  std::string str() const {
    return std::string(kKind) + " " + path + (line ? ": line " + std::to_string(line) : "");
  }
};

// The unsigned integer at `key` of record `j`, at most `most`; one error line otherwise.
uint64_t unsigned_field(const nlohmann::json& j, const char* key, uint64_t most, const Where& w) {
  CAMPO_CHECK(j.contains(key), w.str(), ": '", key, "' is missing");
  const nlohmann::json& v = j[key];
  CAMPO_CHECK(v.is_number(), w.str(), ": '", key, "' is ", v.type_name(), ", not a number");
  CAMPO_CHECK(!v.is_number_float(), w.str(), ": '", key, "' is ", v.dump(), ", not an integer");
  CAMPO_CHECK(v.is_number_unsigned(), w.str(), ": '", key, "' is ", v.dump(), ", negative");
  const uint64_t n = v.get<uint64_t>();
  CAMPO_CHECK(n <= most, w.str(), ": '", key, "' is ", n, ", more than ", most);
  return n;
}

std::string string_field(const nlohmann::json& j, const char* key, const Where& w) {
  CAMPO_CHECK(j.contains(key), w.str(), ": '", key, "' is missing");
  CAMPO_CHECK(j[key].is_string(), w.str(), ": '", key, "' is ", j[key].type_name(),
              ", not a string");
  return j[key].get<std::string>();
}

std::string read_bytes(const std::string& path) {
  require_input_file(path, kKind);
  std::ifstream in(path, std::ios::binary);
  CAMPO_CHECK(in, "cannot open ", kKind, " ", path, ": ", std::strerror(errno));
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  CAMPO_CHECK(!in.bad(), "cannot read ", kKind, " ", path);
  return text;
}

}  // namespace

NodeAttribution attribute_kernels(const ActivityTable& table, size_t slots) {
  std::unordered_map<uint32_t, uint64_t> external;  // correlation id -> external id
  for (const ExternalCorrelation& c : table.correlations) {
    CAMPO_CHECK(c.external_id <= slots, "kernel activity: external id ", c.external_id,
                " (of correlation ", c.correlation_id, ") names node slot ", c.external_id - 1,
                ", but the step has ", slots, " slots");
    const auto [it, inserted] = external.try_emplace(c.correlation_id, c.external_id);
    CAMPO_CHECK(inserted, "kernel activity: correlation ", c.correlation_id,
                " has two external ids, ", it->second, " and ", c.external_id);
  }
  // Sums in integer nanoseconds, one rounding to ms each: the same times in any order.
  std::vector<uint64_t> ns(slots + 1, 0);  // ns[slots]: unattributed
  NodeAttribution a;
  a.kernels.assign(slots, 0);
  for (const KernelActivity& k : table.kernels) {
    CAMPO_CHECK(k.end_ns >= k.start_ns, "kernel activity: '", k.name, "' (correlation ",
                k.correlation_id, ") ends at ", k.end_ns, " ns, before it starts at ", k.start_ns,
                " ns");
    const auto it = external.find(k.correlation_id);
    const bool attributed = it != external.end() && it->second != 0;
    const size_t slot = attributed ? size_t(it->second - 1) : slots;
    ns[slot] += k.end_ns - k.start_ns;
    ++(attributed ? a.kernels[slot] : a.unattributed_kernels);
  }
  a.ms.resize(slots);
  for (size_t i = 0; i < slots; ++i) a.ms[i] = double(ns[i]) * 1e-6;
  a.unattributed_ms = double(ns[slots]) * 1e-6;
  return a;
}

void write_activity_table(const std::string& path, const ActivityTable& table,
                          const std::string& device) {
  // ordered_json: fields in the order the format shows them, which a reader scans by eye.
  using json = nlohmann::ordered_json;
  // Kernel names come from the driver; a byte that is not UTF-8 is written as U+FFFD
  // rather than refused.
  auto line = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  };
  std::string text = line({{"format", kFormat},
                           {"version", kVersion},
                           {"device", device},
                           {"kernels", table.kernels.size()},
                           {"external_correlations", table.correlations.size()}});
  for (const KernelActivity& k : table.kernels)
    text += line({{"kind", "kernel"},
                  {"name", k.name},
                  {"start_ns", k.start_ns},
                  {"end_ns", k.end_ns},
                  {"correlation_id", k.correlation_id}});
  for (const ExternalCorrelation& c : table.correlations)
    text += line({{"kind", "external_correlation"},
                  {"correlation_id", c.correlation_id},
                  {"external_id", c.external_id}});
  write_file_atomically(path, text, kKind);
}

RecordedActivity read_activity_table(const std::string& path) {
  const std::string text = read_bytes(path);
  Where w{path};
  CAMPO_CHECK(!text.empty(), w.str(), " is empty: no '", kFormat, "' header");
  RecordedActivity r;
  uint64_t announced_kernels = 0, announced_correlations = 0;
  std::unordered_map<uint32_t, size_t> correlation_line;  // correlation id -> its line
  constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
  constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
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
      // The writer ends every line; an unended line that does not parse is a cut file.
      CAMPO_CHECK(terminated, w.str(), ": truncated: the file ends inside this record");
      // nlohmann's "[json.exception.parse_error.101] parse error at line 1, column 2: why":
      // its line is always 1 here, so the column and the why.
      std::string why = e.what();
      if (size_t p = why.find(": "); p != std::string::npos) why = why.substr(p + 2);
      CAMPO_FAIL(w.str(), ": not JSON at column ", e.byte, " (", why, ")");
    } catch (const nlohmann::json::exception& e) {  // a number past a double's range
      std::string why = e.what();
      if (size_t p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
      CAMPO_FAIL(w.str(), ": not JSON (", why, ")");
    }
    CAMPO_CHECK(j.is_object(), w.str(), ": a JSON ", j.type_name(), ", not an object");
    if (w.line == 1) {
      CAMPO_CHECK(j.contains("format") && j["format"] == kFormat, w.str(),
                  ": not a table header: the first line must have \"format\":\"", kFormat, "\"");
      const uint64_t version = unsigned_field(j, "version", kMaxU64, w);
      CAMPO_CHECK(version == kVersion, w.str(), ": version ", version,
                  " is not one this campo reads (", kVersion, ")");
      r.device = string_field(j, "device", w);
      announced_kernels = unsigned_field(j, "kernels", kMaxU64, w);
      announced_correlations = unsigned_field(j, "external_correlations", kMaxU64, w);
      continue;
    }
    const std::string kind = string_field(j, "kind", w);
    if (kind == "kernel") {
      KernelActivity k;
      k.name = string_field(j, "name", w);
      k.start_ns = unsigned_field(j, "start_ns", kMaxU64, w);
      k.end_ns = unsigned_field(j, "end_ns", kMaxU64, w);
      k.correlation_id = uint32_t(unsigned_field(j, "correlation_id", kMaxU32, w));
      CAMPO_CHECK(k.end_ns >= k.start_ns, w.str(), ": 'end_ns' ", k.end_ns,
                  " is before 'start_ns' ", k.start_ns);
      r.table.kernels.push_back(std::move(k));
    } else if (kind == "external_correlation") {
      ExternalCorrelation c;
      c.correlation_id = uint32_t(unsigned_field(j, "correlation_id", kMaxU32, w));
      c.external_id = unsigned_field(j, "external_id", kMaxU64, w);
      const auto [it, inserted] = correlation_line.try_emplace(c.correlation_id, w.line);
      CAMPO_CHECK(inserted, w.str(), ": correlation ", c.correlation_id,
                  " already has an external id (line ", it->second, ")");
      r.table.correlations.push_back(c);
    } else {
      CAMPO_FAIL(w.str(), ": unknown kind '", kind, "' (kernel or external_correlation)");
    }
  }
  w.line = 0;
  const size_t kernels = r.table.kernels.size(), correlations = r.table.correlations.size();
  auto counts = [](uint64_t k, uint64_t c) {
    return std::to_string(k) + " + " + std::to_string(c);
  };
  CAMPO_CHECK(
      kernels >= announced_kernels && correlations >= announced_correlations, w.str(),
      ": truncated: the header announces ", counts(announced_kernels, announced_correlations),
      " records (kernels + external correlations), the file has ", counts(kernels, correlations));
  CAMPO_CHECK(kernels == announced_kernels && correlations == announced_correlations, w.str(), ": ",
              counts(kernels, correlations),
              " records (kernels + external correlations), more than the header announces (",
              counts(announced_kernels, announced_correlations), ")");
  return r;
}

}  // namespace campo
