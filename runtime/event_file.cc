#include "runtime/event_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "runtime/check.h"

namespace campo {

namespace {

constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}();

// Protocol-buffer wire format: a key is (field << 3 | wire type); wire types 0 varint,
// 1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit; fixed values are little-endian.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(uint8_t(v));
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, uint64_t(field) << 3 | type);
}

void put_little_endian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += char(uint8_t(v >> (8 * i)));
}

void put_length_delimited(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event {wall_time = 1; step = 2} (a zero step left out, as proto3 encodes it).
std::string event_header(int64_t step) {
  std::string event;
  put_key(event, 1, kFixed64);
  put_little_endian(event, std::bit_cast<uint64_t>(now_seconds()), 8);
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event, uint64_t(step));
  }
  return event;
}

// Event {wall_time, step, summary = 5: Summary {value = 1: Value {tag = 1, simple_value = 2}
// for each scalar}}.
std::string scalars_event(int64_t step, const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_length_delimited(v, 1, tag);
    put_key(v, 2, kFixed32);
    put_little_endian(v, std::bit_cast<uint32_t>(value), 4);
    put_length_delimited(summary, 1, v);
  }
  std::string event = event_header(step);
  put_length_delimited(event, 5, summary);
  return event;
}

// A new event file in `dir`, named as TensorFlow names its own
// (events.out.tfevents.<unix time>.<host>.<pid>) and ending in .campo; never an existing
// one: a second log of the same process within the second ends in .campo.1, .campo.2, ...,
// names that sort after the first, as TensorBoard reads a directory's files (by name).
std::FILE* create_event_file(const std::string& dir, const std::string& what, std::string& path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  std::replace(host, host + std::strlen(host), '/', '_');
  const std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                           std::to_string(std::time(nullptr)) + "." + host + "." +
                           std::to_string(::getpid());
  for (int k = 0;; ++k) {
    path = base + ".campo" + (k ? "." + std::to_string(k) : "");
    // O_EXCL: never an existing name, nor a link planted at it; 0666: the umask applies, as
    // for any new file.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) {
      std::FILE* f = ::fdopen(fd, "wb");
      if (!f) {
        const int error = errno;
        ::close(fd);
        CAMPO_FAIL(what, " ", dir, ": cannot open ", path, ": ", std::strerror(error));
      }
      return f;
    }
    CAMPO_CHECK(errno == EEXIST && k < 1000, what, " ", dir, ": cannot create ", path, ": ",
                std::strerror(errno));
  }
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventFileWriter::EventFileWriter(const std::string& dir, const std::string& what)
    : file_(create_event_file(dir, what, path_)) {
  std::string first = event_header(0);
  put_length_delimited(first, 3, "brain.Event:2");  // file_version
  write_record(first);
}

void EventFileWriter::session_start(int64_t step) {
  std::string session_log;  // SessionLog {status = 1: START}
  put_key(session_log, 1, kVarint);
  put_varint(session_log, 1);
  std::string event = event_header(step);
  put_length_delimited(event, 7, session_log);
  write_record(event);
}

void EventFileWriter::scalars(int64_t step,
                              const std::vector<std::pair<std::string, float>>& values) {
  write_record(scalars_event(step, values));
}

// TFRecord: uint64 length, uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked
// CRC-32C of the data.
void EventFileWriter::write_record(const std::string& data) {
  std::string record;
  put_little_endian(record, data.size(), 8);
  put_little_endian(record, masked_crc32c(record.data(), 8), 4);
  record += data;
  put_little_endian(record, masked_crc32c(data.data(), data.size()), 4);
  const bool written = std::fwrite(record.data(), 1, record.size(), file_.get()) == record.size() &&
                       std::fflush(file_.get()) == 0;
  CAMPO_CHECK(written, "TensorBoard event file ", path_, ": cannot write: ", std::strerror(errno));
}

}  // namespace campo
