// Helpers of the minifloat and MX tests: readers of the ml_dtypes reference tables in
// tests/runtime/data/minifloat/ (written by its make_tables.py, whose docstring gives the
// layouts and how each reference was computed), and a scoped OpenMP team size.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "runtime/minifloat.h"

namespace campo::testing {

// Sets the OpenMP team size for one scope, restoring the one before.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n) : old_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedOmpThreads() { omp_set_num_threads(old_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int old_;
};

inline std::string minifloat_table_path(const std::string& name) {
  return std::string(CAMPO_SOURCE_DIR) + "/tests/runtime/data/minifloat/" + name;
}

inline std::vector<uint8_t> read_minifloat_table(const std::string& name, const char magic[8]) {
  const std::string path = minifloat_table_path(name);
  std::ifstream in(path, std::ios::binary);
  CAMPO_CHECK(in, "cannot open ", path);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  CAMPO_CHECK(bytes.size() >= 12 && std::memcmp(bytes.data(), magic, 8) == 0, path,
              ": not a table of this kind (expected magic ", std::string(magic, 8), ")");
  return bytes;
}

// Little-endian reads with bounds checks.
class TableCursor {
 public:
  TableCursor(const std::vector<uint8_t>& bytes, size_t offset) : bytes_(bytes), at_(offset) {}
  uint8_t u8() {
    need(1);
    return bytes_[at_++];
  }
  uint32_t u32() {
    need(4);
    uint32_t v = uint32_t(bytes_[at_]) | uint32_t(bytes_[at_ + 1]) << 8 |
                 uint32_t(bytes_[at_ + 2]) << 16 | uint32_t(bytes_[at_ + 3]) << 24;
    at_ += 4;
    return v;
  }
  bool at_end() const { return at_ == bytes_.size(); }

 private:
  void need(size_t n) const {
    CAMPO_CHECK(at_ + n <= bytes_.size(), "reference table truncated at byte ", at_);
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_;
};

// The code columns of encode_f32.bin and encode_bf16.bin (make_tables.py's COLUMNS).
struct EncodeColumn {
  ElementFormat format;
  Saturation saturation;
};
inline constexpr std::array<EncodeColumn, 7> kEncodeColumns{{
    {ElementFormat::e4m3, Saturation::saturating},
    {ElementFormat::e4m3, Saturation::non_saturating},
    {ElementFormat::e5m2, Saturation::saturating},
    {ElementFormat::e5m2, Saturation::non_saturating},
    {ElementFormat::e2m3, Saturation::saturating},
    {ElementFormat::e3m2, Saturation::saturating},
    {ElementFormat::e2m1, Saturation::saturating},
}};

struct EncodeRecord {
  uint32_t input_bits;
  std::array<uint8_t, kEncodeColumns.size()> codes;
};

inline std::vector<EncodeRecord> read_encode_f32_table() {
  const auto bytes = read_minifloat_table("encode_f32.bin", "CMFENC32");
  TableCursor cursor(bytes, 8);
  std::vector<EncodeRecord> records(cursor.u32());
  for (auto& r : records) {
    r.input_bits = cursor.u32();
    for (auto& c : r.codes) c = cursor.u8();
  }
  CAMPO_CHECK(cursor.at_end(), "encode_f32.bin: bytes after the last record");
  return records;
}

// Record i is the bf16 value with bits i.
inline std::vector<EncodeRecord> read_encode_bf16_table() {
  const auto bytes = read_minifloat_table("encode_bf16.bin", "CMFENC16");
  TableCursor cursor(bytes, 8);
  std::vector<EncodeRecord> records(cursor.u32());
  CAMPO_CHECK(records.size() == 65536, "encode_bf16.bin: ", records.size(), " records");
  for (size_t i = 0; i < records.size(); ++i) {
    records[i].input_bits = uint32_t(i);
    for (auto& c : records[i].codes) c = cursor.u8();
  }
  CAMPO_CHECK(cursor.at_end(), "encode_bf16.bin: bytes after the last record");
  return records;
}

struct MxReference {
  ElementFormat format;
  std::vector<float> inputs;
  std::vector<uint8_t> scales;
  std::vector<uint8_t> codes;
  std::vector<uint32_t> dequantized_bits;
};

inline std::vector<MxReference> read_mx_table() {
  const auto bytes = read_minifloat_table("mx.bin", "CMFMX001");
  TableCursor cursor(bytes, 8);
  std::vector<MxReference> tensors(cursor.u32());
  for (auto& t : tensors) {
    const uint8_t format = cursor.u8();
    CAMPO_CHECK(format < kElementFormatCount, "mx.bin: format ", int(format));
    t.format = ElementFormat(format);
    const size_t n = cursor.u32();
    t.inputs.resize(n);
    for (auto& v : t.inputs) {
      const uint32_t bits = cursor.u32();
      std::memcpy(&v, &bits, 4);
    }
    t.scales.resize((n + 31) / 32);
    for (auto& s : t.scales) s = cursor.u8();
    t.codes.resize(n);
    for (auto& c : t.codes) c = cursor.u8();
    t.dequantized_bits.resize(n);
    for (auto& d : t.dequantized_bits) d = cursor.u32();
  }
  CAMPO_CHECK(cursor.at_end(), "mx.bin: bytes after the last tensor");
  return tensors;
}

}  // namespace campo::testing
