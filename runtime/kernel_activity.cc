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
#include "runtime/escape.h"
#include "runtime/json_lines.h"

namespace campo {

namespace {

constexpr const char* kFormat = "campo-cupti-activity";
constexpr uint64_t kVersion = 1;
constexpr const char* kKind = "CUPTI activity table";

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
  RecordedActivity r;
  uint64_t announced_kernels = 0, announced_correlations = 0;
  std::unordered_map<uint32_t, size_t> correlation_line;  // correlation id -> its line
  constexpr uint64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
  constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();
  for_each_json_line(path, kKind, kFormat, [&](const nlohmann::json& j, const TableWhere& w) {
    if (w.line == 1) {
      CAMPO_CHECK(j.contains("format") && j["format"] == kFormat, w.str(),
                  ": not a table header: the first line must have \"format\":\"", kFormat, "\"");
      const uint64_t version = unsigned_field(j, "version", kMaxU64, w);
      CAMPO_CHECK(version == kVersion, w.str(), ": version ", version,
                  " is not one this campo reads (", kVersion, ")");
      r.device = string_field(j, "device", w);
      announced_kernels = unsigned_field(j, "kernels", kMaxU64, w);
      announced_correlations = unsigned_field(j, "external_correlations", kMaxU64, w);
      return;
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
      CAMPO_FAIL(w.str(), ": unknown kind '", escape_untrusted(kind),
                 "' (kernel or external_correlation)");
    }
  });
  const TableWhere w{kKind, path};
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
