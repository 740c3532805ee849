// Reads the TensorBoard event files campo writes, for tests: the TFRecord framing with both
// masked CRC-32Cs checked, and the Event fields campo writes decoded from the protobuf wire
// format by hand (event.proto: wall_time 1, step 2, file_version 3, summary 5, session_log 7;
// summary.proto: Summary.value 1, Value.tag 1, Value.simple_value 2). Any other field, a
// wrong wire type, a bad CRC or a cut-off record throws std::runtime_error.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "train/metrics_log.h"

namespace campo::testing {

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  bool session_start = false;  // a SessionLog with status START (1)
  std::vector<std::pair<std::string, float>> scalars;
};

namespace tfevents_detail {

// A cursor over protobuf wire data (which must outlive it).
class WireReader {
 public:
  explicit WireReader(const std::string& bytes)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())), end_(p_ + bytes.size()) {}
  bool done() const { return p_ == end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = byte();
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint longer than 10 bytes");
  }
  uint64_t little_endian(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(byte()) << (8 * i);
    return v;
  }
  std::string length_delimited() {
    const uint64_t n = varint();
    if (n > uint64_t(end_ - p_)) throw std::runtime_error("length-delimited field past the end");
    std::string s(reinterpret_cast<const char*>(p_), size_t(n));
    p_ += n;
    return s;
  }
  // The next key as (field, wire type).
  std::pair<uint32_t, uint32_t> key() {
    const uint64_t k = varint();
    return {uint32_t(k >> 3), uint32_t(k & 7)};
  }

 private:
  uint8_t byte() {
    if (p_ == end_) throw std::runtime_error("message cut off");
    return *p_++;
  }
  const uint8_t* p_;
  const uint8_t* end_;
};

inline void expect_wire_type(uint32_t field, uint32_t got, uint32_t want, const char* message) {
  if (got != want)
    throw std::runtime_error(std::string(message) + ": field " + std::to_string(field) +
                             " has wire type " + std::to_string(got) + ", not " +
                             std::to_string(want));
}

inline std::pair<std::string, float> decode_value(const std::string& bytes) {
  WireReader r(bytes);
  std::pair<std::string, float> v{"", 0.0f};
  bool has_value = false;
  while (!r.done()) {
    const auto [field, type] = r.key();
    if (field == 1) {
      expect_wire_type(field, type, 2, "Summary.Value");
      v.first = r.length_delimited();
    } else if (field == 2) {
      expect_wire_type(field, type, 5, "Summary.Value");
      v.second = std::bit_cast<float>(uint32_t(r.little_endian(4)));
      has_value = true;
    } else {
      throw std::runtime_error("Summary.Value: unexpected field " + std::to_string(field));
    }
  }
  if (!has_value) throw std::runtime_error("Summary.Value " + v.first + " has no simple_value");
  return v;
}

inline DecodedEvent decode_event(const std::string& bytes) {
  WireReader r(bytes);
  DecodedEvent e;
  while (!r.done()) {
    const auto [field, type] = r.key();
    switch (field) {
      case 1:
        expect_wire_type(field, type, 1, "Event");
        e.wall_time = std::bit_cast<double>(r.little_endian(8));
        break;
      case 2:
        expect_wire_type(field, type, 0, "Event");
        e.step = int64_t(r.varint());
        break;
      case 3:
        expect_wire_type(field, type, 2, "Event");
        e.file_version = r.length_delimited();
        break;
      case 5: {
        expect_wire_type(field, type, 2, "Event");
        const std::string bytes = r.length_delimited();  // outlives the reader over it
        WireReader summary(bytes);
        while (!summary.done()) {
          const auto [f, t] = summary.key();
          if (f != 1) throw std::runtime_error("Summary: unexpected field " + std::to_string(f));
          expect_wire_type(f, t, 2, "Summary");
          e.scalars.push_back(decode_value(summary.length_delimited()));
        }
        break;
      }
      case 7: {
        expect_wire_type(field, type, 2, "Event");
        const std::string bytes = r.length_delimited();
        WireReader log(bytes);
        while (!log.done()) {
          const auto [f, t] = log.key();
          if (f != 1) throw std::runtime_error("SessionLog: unexpected field " + std::to_string(f));
          expect_wire_type(f, t, 0, "SessionLog");
          e.session_start = log.varint() == 1;
        }
        break;
      }
      default:
        throw std::runtime_error("Event: unexpected field " + std::to_string(field));
    }
  }
  return e;
}

}  // namespace tfevents_detail

// Every record of an event file, framing and CRCs checked, decoded.
inline std::vector<DecodedEvent> read_event_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<DecodedEvent> events;
  size_t pos = 0;
  auto u32_at = [&](size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(file[at + size_t(i)])) << (8 * i);
    return v;
  };
  while (pos < file.size()) {
    const std::string where = path + " record " + std::to_string(events.size());
    if (file.size() - pos < 12) throw std::runtime_error(where + ": header cut off");
    uint64_t length = 0;
    for (int i = 0; i < 8; ++i) length |= uint64_t(uint8_t(file[pos + size_t(i)])) << (8 * i);
    if (u32_at(pos + 8) != masked_crc32c(file.data() + pos, 8))
      throw std::runtime_error(where + ": the length's CRC does not match");
    pos += 12;
    if (length > file.size() - pos || file.size() - pos - length < 4)
      throw std::runtime_error(where + ": data cut off");
    const std::string data = file.substr(pos, size_t(length));
    if (u32_at(pos + length) != masked_crc32c(data.data(), data.size()))
      throw std::runtime_error(where + ": the data's CRC does not match");
    pos += length + 4;
    events.push_back(tfevents_detail::decode_event(data));
  }
  return events;
}

// The event files (events.out.tfevents.*) of a directory, sorted by name.
inline std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The value of `tag` in an event's scalars; throws when it has none.
inline float scalar_of(const DecodedEvent& e, const std::string& tag) {
  for (const auto& [t, v] : e.scalars)
    if (t == tag) return v;
  throw std::runtime_error("no scalar " + tag + " at step " + std::to_string(e.step));
}

}  // namespace campo::testing
