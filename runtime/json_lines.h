// The reading side of campo's recorded tables (runtime/kernel_activity.h's CUPTI activity,
// runtime/hardware_counters.h's counters): JSON lines, one object per line, each ended by
// '\n', a header first. Bad input is one error line naming the table kind, the file, the line
// and what is wrong; a file cut inside a record reads as truncated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace campo {

// Where a reader's error points: "<kind> <path>: line <n>" (no line: the file as a whole).
struct TableWhere {
  const char* kind;
  const std::string& path;
  size_t line = 0;
  std::string str() const;
};

// Calls `record` with each line's object and its place (line 1 is the header, of `format`);
// one error line for an unreadable or empty file, an empty line, a line that is not JSON (a
// cut last line: truncated) or not an object.
void for_each_json_line(
    const std::string& path, const char* kind, const char* format,
    const std::function<void(const nlohmann::json&, const TableWhere&)>& record);

// The field `key` of record `j`, one error line naming it when missing or ill-typed:
// an unsigned integer at most `most`; a string; a finite number.
uint64_t unsigned_field(const nlohmann::json& j, const char* key, uint64_t most,
                        const TableWhere& w);
std::string string_field(const nlohmann::json& j, const char* key, const TableWhere& w);
double number_field(const nlohmann::json& j, const char* key, const TableWhere& w);

}  // namespace campo
