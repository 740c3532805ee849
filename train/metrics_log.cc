#include "train/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string_view>
#include <type_traits>
#include <utility>

#include "runtime/check.h"
#include "runtime/file_check.h"

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

// One JSON object on one line, its fields in the order added and its numbers in their
// shortest round-trip text (std::to_chars): an lr of 0.03302772f reads 0.03302772, where
// nlohmann's dump writes 0.033027720000000003 for the double nearest it. Keys are the
// fixed names of this file or checked names (check_name), so nothing needs escaping.
class JsonLine {
 public:
  explicit JsonLine(std::string_view event) : text_("{\"event\":\"") {
    text_ += event;
    text_ += '"';
  }
  template <typename T>
  JsonLine& add(std::string_view key, T value) {
    add_key(key);
    add_number(value);
    return *this;
  }
  template <typename T>
  JsonLine& add(std::string_view key, const std::vector<T>& values) {
    add_key(key);
    text_ += '[';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) text_ += ',';
      add_number(values[i]);
    }
    text_ += ']';
    return *this;
  }
  // A single model's value alone, an array's as a list.
  template <typename T>
  JsonLine& add_per_model(std::string_view key, const std::vector<T>& values, bool array) {
    return array ? add(key, values) : add(key, values.at(0));
  }
  std::string str() const { return text_ + "}"; }

 private:
  void add_key(std::string_view key) {
    text_ += ",\"";
    text_ += key;
    text_ += "\":";
  }
  template <typename T>
  void add_number(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) {  // JSON has no inf or NaN
        text_ += "null";
        return;
      }
    }
    char digits[64];
    text_.append(digits, std::to_chars(digits, digits + sizeof digits, v).ptr);
  }
  std::string text_;
};

// A metric's name is a JSON key and part of a TensorBoard tag: letters, digits and _ only.
void check_name(const std::string& name) {
  CAMPO_CHECK(
      !name.empty() && std::all_of(name.begin(), name.end(),
                                   [](char c) { return std::isalnum(uint8_t(c)) || c == '_'; }),
      "internal: metric name '", name, "' (letters, digits and _ only)");
}

// The tag of model i's scalar: `base` alone for a single model, base/model_<i> in an array.
std::string model_tag(const std::string& base, size_t i, bool array) {
  return array ? base + "/model_" + std::to_string(i) : base;
}

// A new event file in `dir`, named as TensorFlow names its own
// (events.out.tfevents.<unix time>.<host>.<pid>) and ending in .campo; never an existing
// one: a second log of the same process within the second ends in .campo.1, .campo.2, ...,
// names that sort after the first, as TensorBoard reads a directory's files (by name).
std::FILE* create_event_file(const std::string& dir, std::string& path) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  std::replace(host, host + std::strlen(host), '/', '_');
  const std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                           std::to_string(std::time(nullptr)) + "." + host + "." +
                           std::to_string(::getpid());
  for (int k = 0;; ++k) {
    path = base + ".campo" + (k ? "." + std::to_string(k) : "");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      std::FILE* f = ::fdopen(fd, "wb");
      if (!f) {
        const int error = errno;
        ::close(fd);
        CAMPO_FAIL("--tensorboard directory ", dir, ": cannot open ", path, ": ",
                   std::strerror(error));
      }
      return f;
    }
    CAMPO_CHECK(errno == EEXIST && k < 1000, "--tensorboard directory ", dir, ": cannot create ",
                path, ": ", std::strerror(errno));
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

bool is_logged_step(int64_t in_epoch, int64_t per_epoch, bool last) {
  return last || in_epoch % std::max<int64_t>(1, per_epoch / 10) == 0;
}

void check_metrics_outputs(const std::string& metrics_path, const std::string& tensorboard_dir) {
  if (!metrics_path.empty()) require_output_file(metrics_path, "--metrics file");
  if (!tensorboard_dir.empty())
    require_output_directory(tensorboard_dir, "--tensorboard directory");
}

MetricsLog::MetricsLog(const MetricsLogOptions& options) : options_(options) {
  CAMPO_CHECK(options_.models >= 1, "internal: a metrics log of ", options_.models, " models");
  if (!options_.metrics_path.empty()) {
    // A resumed run continues the file of the run it resumes.
    metrics_.reset(
        std::fopen(options_.metrics_path.c_str(), options_.resumed_step > 0 ? "a" : "w"));
    CAMPO_CHECK(metrics_, "--metrics file ", options_.metrics_path,
                ": cannot open it: ", std::strerror(errno));
    if (options_.resumed_step > 0)
      write_line(JsonLine("resume").add("step", options_.resumed_step).str());
  }
  if (!options_.tensorboard_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.tensorboard_dir, ec);
    CAMPO_CHECK(!ec, "--tensorboard directory ", options_.tensorboard_dir,
                ": cannot create it: ", ec.message());
    events_.reset(create_event_file(options_.tensorboard_dir, event_path_));
    std::string first = event_header(0);
    put_length_delimited(first, 3, "brain.Event:2");  // file_version
    write_record(first);
    if (options_.resumed_step > 0) {
      // SessionLog {status = 1: START}: TensorBoard drops the events of steps >= this one
      // from the files before it; the checkpoint's own step stays.
      std::string session_log;
      put_key(session_log, 1, kVarint);
      put_varint(session_log, 1);
      std::string event = event_header(options_.resumed_step + 1);
      put_length_delimited(event, 7, session_log);
      write_record(event);
    }
  }
}

void MetricsLog::check_models(size_t count, const char* what) const {
  CAMPO_CHECK(count == size_t(options_.models), "internal: ", count, " ", what,
              " for a metrics log of ", options_.models, " models");
}

void MetricsLog::write_line(const std::string& json) {
  const bool written = std::fputs(json.c_str(), metrics_.get()) >= 0 &&
                       std::fputc('\n', metrics_.get()) != EOF && std::fflush(metrics_.get()) == 0;
  CAMPO_CHECK(written, "--metrics file ", options_.metrics_path,
              ": cannot write: ", std::strerror(errno));
}

// TFRecord: uint64 length, uint32 masked CRC-32C of those 8 bytes, the data, uint32 masked
// CRC-32C of the data.
void MetricsLog::write_record(const std::string& data) {
  std::string record;
  put_little_endian(record, data.size(), 8);
  put_little_endian(record, masked_crc32c(record.data(), 8), 4);
  record += data;
  put_little_endian(record, masked_crc32c(data.data(), data.size()), 4);
  const bool written =
      std::fwrite(record.data(), 1, record.size(), events_.get()) == record.size() &&
      std::fflush(events_.get()) == 0;
  CAMPO_CHECK(written, "--tensorboard event file ", event_path_,
              ": cannot write: ", std::strerror(errno));
}

void MetricsLog::log_step(const StepMetrics& m) {
  if (!enabled()) return;
  if (!m.losses.empty()) check_models(m.losses.size(), "losses");
  check_models(m.lrs.size(), "learning rates");
  for (const auto& [name, values] : m.named) {
    check_name(name);
    check_models(values.size(), name.c_str());
  }
  const bool array = options_.models > 1;
  if (metrics_) {
    JsonLine j("train");
    j.add("step", m.step).add("epoch", m.epoch);
    if (!m.losses.empty()) j.add_per_model(array ? "losses" : "loss", m.losses, array);
    for (const auto& [name, values] : m.named) j.add_per_model(name, values, array);
    j.add_per_model(array ? "lrs" : "lr", m.lrs, array)
        .add("loss_scale", m.loss_scale)
        .add("skipped_steps", m.skipped_steps)
        .add("samples_per_sec", m.samples_per_sec);
    write_line(j.str());
  }
  if (events_) {
    std::vector<std::pair<std::string, float>> scalars;
    for (size_t i = 0; i < m.losses.size(); ++i)
      scalars.emplace_back(model_tag("train/loss", i, array), float(m.losses[i]));
    for (const auto& [name, values] : m.named)
      for (size_t i = 0; i < values.size(); ++i)
        scalars.emplace_back(model_tag("train/" + name, i, array), float(values[i]));
    for (size_t i = 0; i < m.lrs.size(); ++i)
      scalars.emplace_back(model_tag("train/lr", i, array), m.lrs[i]);
    scalars.emplace_back("train/loss_scale", m.loss_scale);
    scalars.emplace_back("train/samples_per_sec", float(m.samples_per_sec));
    write_record(scalars_event(m.step, scalars));
  }
}

void MetricsLog::log_eval(int64_t step, const std::vector<double>& accuracy) {
  if (!enabled()) return;
  check_models(accuracy.size(), "accuracies");
  const bool array = options_.models > 1;
  if (metrics_) {
    write_line(JsonLine("eval")
                   .add("step", step)
                   .add_per_model(array ? "test_accuracies" : "test_accuracy", accuracy, array)
                   .str());
  }
  if (events_) {
    std::vector<std::pair<std::string, float>> scalars;
    for (size_t i = 0; i < accuracy.size(); ++i)
      scalars.emplace_back(model_tag("eval/accuracy", i, array), float(accuracy[i]));
    write_record(scalars_event(step, scalars));
  }
}

}  // namespace campo
