#include "runtime/hardware_counters.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/escape.h"
#include "runtime/json_lines.h"

namespace campo {

namespace {

constexpr const char* kFormat = "campo-hardware-counters";
constexpr uint64_t kVersion = 1;
constexpr const char* kKind = "hardware counter table";

}  // namespace

const char* counter_name(Counter c) {
  switch (c) {
    case Counter::dram_bytes:
      return "dram_bytes";
    case Counter::achieved_occupancy:
      return "achieved_occupancy";
    case Counter::tensor_pipe:
      return "tensor_pipe";
    case Counter::l2_hit_rate:
      return "l2_hit_rate";
    case Counter::instructions:
      return "instructions";
    case Counter::kCount:
      break;
  }
  return "?";
}

CounterValues unread_counters() {
  CounterValues v;
  v.fill(std::numeric_limits<double>::quiet_NaN());
  return v;
}

bool all_read(const CounterValues& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

void write_counter_table(const std::string& path, const CounterTable& table) {
  using json = nlohmann::ordered_json;  // fields in the order the format shows them
  auto line = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  };
  std::string text = line({{"format", kFormat},
                           {"version", kVersion},
                           {"device", table.device},
                           {"nodes", table.nodes.size()}});
  for (const NodeCounters& n : table.nodes) {
    json j = {{"node", n.node}};
    for (int c = 0; c < kNumCounters; ++c)
      if (std::isfinite(n.values[size_t(c)])) j[counter_name(Counter(c))] = n.values[size_t(c)];
    if (n.fp32_ms >= 0) j["fp32_ms"] = n.fp32_ms;
    if (n.low_ms >= 0) j["low_ms"] = n.low_ms;
    text += line(j);
  }
  write_file_atomically(path, text, kKind);
}

CounterTable read_counter_table(const std::string& path) {
  CounterTable t;
  uint64_t announced = 0;
  std::set<std::string> named;
  for_each_json_line(path, kKind, kFormat, [&](const nlohmann::json& j, const TableWhere& w) {
    if (w.line == 1) {
      CAMPO_CHECK(j.contains("format") && j["format"] == kFormat, w.str(),
                  ": not a table header: the first line must have \"format\":\"", kFormat, "\"");
      const uint64_t version =
          unsigned_field(j, "version", std::numeric_limits<uint64_t>::max(), w);
      CAMPO_CHECK(version == kVersion, w.str(), ": version ", version,
                  " is not one this campo reads (", kVersion, ")");
      t.device = string_field(j, "device", w);
      announced = unsigned_field(j, "nodes", std::numeric_limits<uint32_t>::max(), w);
      return;
    }
    NodeCounters n;
    n.node = string_field(j, "node", w);
    CAMPO_CHECK(named.insert(n.node).second, w.str(), ": node '", escape_untrusted(n.node),
                "' is listed twice");
    for (int c = 0; c < kNumCounters; ++c) {
      const char* name = counter_name(Counter(c));
      if (!j.contains(name)) continue;
      const double x = number_field(j, name, w);
      CAMPO_CHECK(x >= 0, w.str(), ": '", name, "' is ", x, ", negative");
      n.values[size_t(c)] = x;
    }
    for (auto [key, field] : {std::pair{"fp32_ms", &n.fp32_ms}, std::pair{"low_ms", &n.low_ms}}) {
      if (!j.contains(key)) continue;
      *field = number_field(j, key, w);
      CAMPO_CHECK(*field > 0, w.str(), ": '", key, "' is ", *field, ", not a positive time");
    }
    t.nodes.push_back(std::move(n));
  });
  const TableWhere w{kKind, path};
  CAMPO_CHECK(t.nodes.size() >= announced, w.str(), ": truncated: the header announces ", announced,
              " nodes, the file has ", t.nodes.size());
  CAMPO_CHECK(t.nodes.size() == announced, w.str(), ": ", t.nodes.size(),
              " nodes, more than the header announces (", announced, ")");
  return t;
}

}  // namespace campo
