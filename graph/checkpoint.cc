#include "graph/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "runtime/atomic_file.h"
#include "runtime/escape.h"
#include "runtime/file_check.h"

namespace campo {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

// Writing keeps the caller's tensor order in the header. Reading never builds the header as
// one ordered object: nlohmann's ordered_map finds keys by a linear search, so parsing n
// entries into it took O(n^2) (4 s at 40,000 entries, over a minute at 200,000). The header
// is read entry by entry instead (read_header), in linear time.
using Json = nlohmann::ordered_json;
using ReadJson = nlohmann::json;  // objects are std::maps: O(log n) per key

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Element types of the format (sub-byte float types are not supported).
struct StDType {
  const char* name;
  size_t size;
};
constexpr StDType kStDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
};

const StDType* find_st_dtype(const std::string& name) {
  for (const auto& d : kStDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const char* st_dtype_of(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
  }
  return "?";
}

bool campo_dtype_of(const std::string& st, DType* out) {
  if (st == "F32")
    *out = DType::f32;
  else if (st == "F16")
    *out = DType::f16;
  else if (st == "BF16")
    *out = DType::bf16;
  else if (st == "I32")
    *out = DType::i32;
  else if (st == "I64")
    *out = DType::i64;
  else
    return false;
  return true;
}

template <typename... Args>
[[noreturn]] void fail_file(const std::string& path, const Args&... args) {
  CAMPO_FAIL("checkpoint ", path, ": ", args...);
}

std::string errno_text(int err) { return std::strerror(err); }

// Text from the file, made safe and short for an error line (runtime/escape.h).
std::string shown(std::string_view text) { return escape_untrusted(text); }

std::string quoted_list(const std::vector<std::string>& names, size_t max_shown = 5) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < max_shown; ++i)
    s += (i ? ", '" : "'") + shown(names[i]) + "'";
  if (names.size() > max_shown) s += " and " + std::to_string(names.size() - max_shown) + " more";
  return s;
}

// ---------------------------------------------------------------------------------------
// Reading

// A read-only file descriptor (RAII) with positioned reads.
class InputFile {
 public:
  explicit InputFile(const std::string& path) : path_(path) {
    require_input_file(path, "checkpoint");  // a FIFO would block open() below
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail_file(path, "cannot open: ", errno_text(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      int err = errno;
      ::close(fd_);
      fail_file(path, "cannot stat: ", errno_text(err));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      fail_file(path, "not a regular file");
    }
    size_ = uint64_t(st.st_size);
  }
  ~InputFile() { ::close(fd_); }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }

  void read_at(uint64_t offset, void* dst, uint64_t n) const {
    auto* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t got = ::pread(fd_, p, size_t(std::min<uint64_t>(n, 1u << 30)), off_t(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail_file(path_, "read error: ", errno_text(errno));
      if (got == 0) fail_file(path_, "unexpected end of file (was it changed while reading?)");
      p += got;
      offset += uint64_t(got);
      n -= uint64_t(got);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  std::string dtype;  // safetensors name, e.g. "F32"
  size_t element_size = 0;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

struct Header {
  std::vector<Entry> entries;                     // header order
  std::unordered_map<std::string, size_t> index;  // name -> position in entries
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // absolute file offset of the data section
};

bool read_u64(const ReadJson& j, uint64_t* out) {
  if (!j.is_number_unsigned()) return false;
  *out = j.get<uint64_t>();
  return true;
}

// The JSON text of a value from the file, for an error line.
std::string shown_json(const ReadJson& j) {
  return shown(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

Entry parse_entry(const std::string& path, const std::string& name, const ReadJson& j) {
  Entry e;
  e.name = name;
  const std::string who = "tensor '" + shown(name) + "'";
  if (!j.is_object()) fail_file(path, "header entry '", shown(name), "' is not an object");
  auto dt = j.find("dtype");
  if (dt == j.end() || !dt->is_string()) fail_file(path, who, " has no string \"dtype\"");
  e.dtype = dt->get<std::string>();
  const StDType* st = find_st_dtype(e.dtype);
  if (!st) fail_file(path, who, " has unknown dtype '", shown(e.dtype), "'");
  e.element_size = st->size;

  auto sh = j.find("shape");
  if (sh == j.end() || !sh->is_array()) fail_file(path, who, " has no \"shape\" array");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    uint64_t v;
    if (!read_u64(d, &v) || v > uint64_t(INT64_MAX))
      fail_file(path, who, ": \"shape\" must hold non-negative integers, got ", shown_json(*sh));
    if (__builtin_mul_overflow(numel, v, &numel))
      fail_file(path, who, ": shape ", shown_json(*sh), " overflows");
    e.shape.push_back(int64_t(v));
  }
  uint64_t nbytes;
  if (numel > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, uint64_t(st->size), &nbytes))
    fail_file(path, who, ": shape ", shown_json(*sh), " overflows");

  auto off = j.find("data_offsets");
  if (off == j.end() || !off->is_array() || off->size() != 2 || !read_u64((*off)[0], &e.begin) ||
      !read_u64((*off)[1], &e.end) || e.begin > e.end)
    fail_file(path, who, ": \"data_offsets\" must be [begin, end] with 0 <= begin <= end, got ",
              off == j.end() ? std::string("nothing") : shown_json(*off));
  if (e.end - e.begin != nbytes)
    fail_file(path, who, ": ", e.dtype, " ", shown(shape_str(e.shape)), " needs ", nbytes,
              " bytes, but data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin);
  return e;
}

// Reads the header's top-level entries one at a time, as nlohmann's parser completes each:
// a tensor entry (only its "dtype", "shape" and "data_offsets" are built) is validated
// into an Entry and dropped from the parsed tree, and each "__metadata__" pair is copied out
// and dropped, so the parsed tree never holds more than one entry and the work is linear in
// the header's size. Duplicate tensor names and metadata keys are refused (which of two
// values a reader takes is not defined). The callback's depth: 0 the header object, 1 its
// keys and entries, 2 an entry's (or the metadata's) keys and values.
class HeaderReader {
 public:
  HeaderReader(const std::string& path, Header& h) : path_(path), h_(h) {}

  bool operator()(int depth, ReadJson::parse_event_t event, ReadJson& parsed) {
    using Event = ReadJson::parse_event_t;
    if (depth == 0) {
      if (event == Event::object_start) is_object_ = true;
      if (event == Event::array_start || (event == Event::value && !is_object_))
        fail_file(path_, "header is not a JSON object");
      return true;
    }
    if (depth == 1) {
      switch (event) {
        case Event::key:
          key_ = parsed.get<std::string>();
          in_metadata_ = key_ == "__metadata__";
          if (in_metadata_ && has_metadata_)
            fail_file(path_, "\"__metadata__\" appears twice in the header");
          has_metadata_ |= in_metadata_;
          return true;
        case Event::object_start:
          return true;
        case Event::array_start:
        case Event::value:
          if (in_metadata_) fail_file(path_, "\"__metadata__\" is not an object");
          fail_file(path_, "header entry '", shown(key_), "' is not an object");
        case Event::object_end:
          if (!in_metadata_) add_entry(parsed);
          in_metadata_ = false;
          return false;  // done with it: drop it from the tree
        default:
          return true;
      }
    }
    if (depth == 2 && in_metadata_) {
      if (event == Event::key) {
        metadata_key_ = parsed.get<std::string>();
        return false;  // the value comes to this callback all the same; none is stored
      }
      if (event == Event::value && parsed.is_string()) {
        if (!h_.metadata.emplace(metadata_key_, parsed.get<std::string>()).second)
          fail_file(path_, "metadata '", shown(metadata_key_), "' appears twice");
        return false;
      }
      fail_file(path_, "metadata '", shown(metadata_key_),
                "' is not a string (the format allows only string values)");
    }
    if (depth == 2 && event == Event::key) {  // a tensor entry's field: only these are read
      const std::string& field = parsed.get_ref<const std::string&>();
      return field == "dtype" || field == "shape" || field == "data_offsets";
    }
    return true;
  }

 private:
  void add_entry(const ReadJson& j) {
    if (!h_.index.emplace(key_, h_.entries.size()).second)
      fail_file(path_, "tensor '", shown(key_), "' appears twice in the header");
    h_.entries.push_back(parse_entry(path_, key_, j));
  }

  const std::string& path_;
  Header& h_;
  std::string key_, metadata_key_;
  bool is_object_ = false, in_metadata_ = false, has_metadata_ = false;
};

// Reads and validates the header: its length against the file, the JSON, every entry, and
// that the entries tile the data section exactly.
Header read_header(const std::string& path, const InputFile& f) {
  if (f.size() < 8)
    fail_file(path, "file is ", f.size(), " bytes, too short for a safetensors header");
  uint8_t len_bytes[8];
  f.read_at(0, len_bytes, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];
  if (n > f.size() - 8)
    fail_file(path, "header length ", n, " is larger than the file (", f.size(),
              " bytes): truncated or not a safetensors file");
  if (n > kMaxHeaderBytes)
    fail_file(path, "header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes");

  std::string text(size_t(n), '\0');
  f.read_at(8, text.data(), n);
  Header h;
  h.data_start = 8 + n;
  try {
    // What is left of the tree is the empty header object: every entry was taken out.
    [[maybe_unused]] const ReadJson rest = ReadJson::parse(text, HeaderReader(path, h));
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, "header is not valid JSON: ", escape_untrusted(e.what(), 400));
  }

  const uint64_t data_size = f.size() - h.data_start;
  for (const Entry& e : h.entries)
    if (e.end > data_size)
      fail_file(path, "tensor '", shown(e.name), "' ends at byte ", e.end,
                " of the data section, which ", "holds only ", data_size,
                " bytes: the file is truncated");
  std::vector<const Entry*> sorted;
  for (const Entry& e : h.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : sorted) {
    if (e->begin < covered)
      fail_file(path, "tensors '", shown(prev->name), "' [", prev->begin, ", ", prev->end,
                ") and '", shown(e->name), "' [", e->begin, ", ", e->end, ") overlap");
    if (e->begin > covered)
      fail_file(path, "no tensor covers bytes [", covered, ", ", e->begin, ") of the data section");
    covered = e->end;
    prev = e;
  }
  if (covered != data_size)
    fail_file(path, "the data section holds ", data_size, " bytes but the tensors cover only ",
              covered, " (trailing bytes)");
  return h;
}

// Reads entry `e` into a new host tensor of campo dtype `dtype`.
Tensor read_tensor(const InputFile& f, const Header& h, const Entry& e, DType dtype) {
  Tensor t = Tensor::empty(e.shape, dtype);
  f.read_at(h.data_start + e.begin, t.data(), e.end - e.begin);
  return t;
}

// Reads entry `e` (F32, F16, BF16 or F64) as an f32 tensor.
Tensor read_as_f32(const std::string& path, const InputFile& f, const Header& h, const Entry& e) {
  if (e.dtype == "F32") return read_tensor(f, h, e, DType::f32);
  Tensor out = Tensor::empty(e.shape, DType::f32);
  const size_t n = size_t(out.numel());
  if (e.dtype == "F16" || e.dtype == "BF16") {
    DType src = e.dtype == "F16" ? DType::f16 : DType::bf16;
    Tensor raw = read_tensor(f, h, e, src);
    convert(raw.data(), src, out.data(), DType::f32, n);
  } else if (e.dtype == "F64") {
    std::vector<double> raw(n);
    f.read_at(h.data_start + e.begin, raw.data(), e.end - e.begin);
    float* dst = out.data_as<float>();
    for (size_t i = 0; i < n; ++i) dst[i] = float(raw[i]);
  } else {
    fail_file(path, "tensor '", shown(e.name), "' has dtype ", e.dtype,
              "; a variable loads only from F32, F16, BF16 or F64");
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Writing

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Metadata keys written by save_checkpoint.
constexpr const char* kKeyFormat = "format";  // "pt", as Hugging Face's torch writer
constexpr const char* kKeyVersion = "campo.format_version";
constexpr const char* kKeyModel = "campo.model";
constexpr const char* kKeyStep = "campo.step";
constexpr const char* kKeyEpoch = "campo.epoch";
constexpr const char* kKeyPosition = "campo.position_in_epoch";
constexpr const char* kKeyOptimizer = "campo.optimizer";
const std::string kRngPrefix = "campo.rng.";

bool is_reserved_key(const std::string& key) {
  for (const char* k :
       {kKeyFormat, kKeyVersion, kKeyModel, kKeyStep, kKeyEpoch, kKeyPosition, kKeyOptimizer})
    if (key == k) return true;
  return key.rfind(kRngPrefix, 0) == 0;
}

// Counts (steps, epochs, batches) above 2^53 cannot come from a real run (2^53 steps at
// one per microsecond take 285 years); refusing them keeps later arithmetic far from
// int64 overflow.
constexpr int64_t kMaxCount = int64_t(1) << 53;

// A decimal integer: the whole string, optional '-', digits, no spaces, '+' or junk.
bool parse_whole_int(const std::string& s, int64_t* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

int64_t metadata_int_value(const std::string& path, const std::string& key,
                           const std::string& value, int64_t min, int64_t max) {
  int64_t v = 0;
  if (!parse_whole_int(value, &v) || v < min || v > max)
    fail_file(path, "metadata '", shown(key), "' is '", shown(value), "', not an integer from ",
              min, " to ", max);
  return v;
}

int64_t required_int(const std::string& path, const std::map<std::string, std::string>& md,
                     const char* key, int64_t min, int64_t max) {
  auto it = md.find(key);
  if (it == md.end()) fail_file(path, "metadata lacks '", key, "'");
  return metadata_int_value(path, key, it->second, min, max);
}

// Model and optimizer names are registry names: letters, digits, '_', '-', '.'.
std::string plain_name(const std::string& path, const std::map<std::string, std::string>& md,
                       const char* key) {
  auto it = md.find(key);
  if (it == md.end()) return "";
  const std::string& v = it->second;
  bool ok = v.size() <= 64;
  for (char c : v)
    ok &= std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  if (!ok)
    fail_file(path, "metadata '", key, "' is '", shown(v),
              "', not a name (at most 64 letters, digits, '_', '-' or '.')");
  return v;
}

// Where variable `name` lives in a file of format `version`: since version 2, optimizer
// state sits under "optimizer." so that the top level is exactly the model's state_dict;
// version 1 stored it beside the parameters ("conv1.weight.momentum_buffer").
std::string stored_name(const VariableStore& vars, const std::string& name, int version) {
  if (vars.kind(name) == VariableKind::optimizer_state && version != 1)
    return kOptimizerStatePrefix + name;
  if (vars.kind(name) == VariableKind::quantization_state) return kQuantizationStatePrefix + name;
  return name;
}

// Refuses a tensor holding NaN or inf: such weights come from a diverged run, and
// evaluating or resuming them would only report garbage.
void require_finite(const std::string& path, const std::string& name, const Tensor& t) {
  const float* p = t.data_as<float>();
  int64_t nan = 0, inf = 0;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    nan += std::isnan(p[i]);
    inf += std::isinf(p[i]);
  }
  if (nan || inf)
    fail_file(path, "tensor '", shown(name), "' holds ",
              nan ? std::to_string(nan) + " NaN" : std::string(), nan && inf ? " and " : "",
              inf ? std::to_string(inf) + " infinite" : std::string(), " value(s) of ", t.numel(),
              " (the run that wrote it diverged): it cannot be evaluated or resumed");
}

// The batch-norm prefix of a running-statistics name ("layer1.0.bn1"), or "".
std::string bn_prefix(const std::string& name) {
  static const std::string suffix = ".running_mean";
  return ends_with(name, suffix) ? name.substr(0, name.size() - suffix.size()) : std::string();
}

}  // namespace

// ---------------------------------------------------------------------------------------

std::string rng_state_to_string(const Rng::State& st) {
  char buf[160];
  uint32_t spare_bits;
  std::memcpy(&spare_bits, &st.spare, 4);
  std::snprintf(buf, sizeof buf, "xoshiro256**:%016llx,%016llx,%016llx,%016llx,%d,%08x",
                (unsigned long long)st.s[0], (unsigned long long)st.s[1],
                (unsigned long long)st.s[2], (unsigned long long)st.s[3], st.has_spare ? 1 : 0,
                spare_bits);
  return buf;
}

Rng::State rng_state_from_string(const std::string& text) {
  static const std::string tag = "xoshiro256**:";
  auto bad = [&]() { CAMPO_FAIL("malformed RNG state '", escape_untrusted(text), "'"); };
  if (text.rfind(tag, 0) != 0) bad();
  const char* p = text.data() + tag.size();
  const char* end = text.data() + text.size();
  auto hex_field = [&](uint64_t* out, size_t digits, bool last) {
    if (size_t(end - p) < digits) bad();
    auto [q, ec] = std::from_chars(p, p + digits, *out, 16);
    if (ec != std::errc() || q != p + digits) bad();
    p = q;
    if (!last) {
      if (p == end || *p != ',') bad();
      ++p;
    }
  };
  Rng::State st{};
  for (auto& w : st.s) hex_field(&w, 16, false);
  uint64_t flag, bits;
  hex_field(&flag, 1, false);
  hex_field(&bits, 8, true);
  if (p != end || flag > 1) bad();
  st.has_spare = flag == 1;
  uint32_t b32 = uint32_t(bits);
  std::memcpy(&st.spare, &b32, 4);
  return st;
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Everything that can be refused is checked before the temp file exists.
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    CAMPO_CHECK(name != "__metadata__", "cannot write checkpoint ", path,
                ": '__metadata__' is not a tensor name");
    CAMPO_CHECK(seen.insert(name).second, "cannot write checkpoint ", path, ": tensor '",
                escape_untrusted(name), "' appears twice");
    CAMPO_CHECK(t.defined() && t.device() == Device::cpu, "cannot write checkpoint ", path,
                ": tensor '", escape_untrusted(name), "' is not a host tensor");
  }
  // Data layout: 8-byte types first, then 4, 2, so every tensor is aligned to its element
  // size (as the reference writer does); the header keeps the caller's order.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return dtype_size(tensors[a].second.dtype()) > dtype_size(tensors[b].second.dtype());
  });
  std::vector<uint64_t> begin(tensors.size());
  uint64_t offset = 0;
  for (size_t i : order) {
    begin[i] = offset;
    offset += tensors[i].second.nbytes();
  }

  // The header object is written entry by entry in the caller's order (an ordered_json
  // object finds each new key by a linear search: quadratic in the number of tensors).
  std::string text = "{";
  try {
    if (!metadata.empty()) text += "\"__metadata__\":" + ReadJson(metadata).dump();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i].second;
      if (text.size() > 1) text += ',';
      text += Json(tensors[i].first).dump() + ':' +
              Json{{"dtype", st_dtype_of(t.dtype())},
                   {"shape", t.shape()},
                   {"data_offsets", {begin[i], begin[i] + t.nbytes()}}}
                  .dump();
    }
  } catch (const nlohmann::json::exception& e) {
    CAMPO_FAIL("cannot write checkpoint ", path, ": a name is not valid UTF-8 (", e.what(), ")");
  }
  text += '}';
  text.resize((text.size() + 7) / 8 * 8, ' ');  // data starts 8-byte aligned
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = uint8_t(uint64_t(text.size()) >> (8 * i));

  AtomicFile out(path, "checkpoint");
  out.write(len_bytes, 8);
  out.write(text.data(), text.size());
  for (size_t i : order) out.write(tensors[i].second.data(), tensors[i].second.nbytes());
  out.commit();
}

void save_checkpoint(const std::string& path, const VariableStore& vars,
                     const CheckpointMeta& meta) {
  std::map<std::string, std::string> md;
  md[kKeyFormat] = "pt";
  md[kKeyVersion] = std::to_string(kCheckpointFormatVersion);
  md[kKeyModel] = meta.model;
  CAMPO_CHECK(meta.step >= 0 && meta.epoch >= 0 && meta.position_in_epoch >= 0,
              "cannot write checkpoint ", path, ": negative step, epoch or position");
  md[kKeyStep] = std::to_string(meta.step);
  md[kKeyEpoch] = std::to_string(meta.epoch);
  md[kKeyPosition] = std::to_string(meta.position_in_epoch);
  md[kKeyOptimizer] = meta.optimizer;
  for (const auto& [name, state] : meta.rng_states) {
    try {
      rng_state_from_string(state);
    } catch (const Error& e) {
      CAMPO_FAIL("cannot write checkpoint ", path, ": RNG state '", name, "': ", e.what());
    }
    md[kRngPrefix + name] = state;
  }
  for (const auto& [key, value] : meta.extra) {
    CAMPO_CHECK(!is_reserved_key(key), "cannot write checkpoint ", path, ": metadata key '",
                escape_untrusted(key), "' is reserved");
    md[key] = value;
  }

  // The model's variables by name; after each batch-norm layer's running_var (or
  // running_mean when it has none), num_batches_tracked = step as torchvision's state_dict
  // has it. Then the optimizer state under "optimizer." and the quantized GEMMs' under
  // "quantization.", in creation order.
  Tensor tracked = Tensor::empty({}, DType::i64);
  *tracked.data_as<int64_t>() = meta.step;
  std::vector<std::pair<std::string, Tensor>> tensors, optimizer_state;
  for (const std::string& name : vars.names()) {
    if (vars.kind(name) == VariableKind::optimizer_state ||
        vars.kind(name) == VariableKind::quantization_state) {
      optimizer_state.emplace_back(stored_name(vars, name, kCheckpointFormatVersion),
                                   vars.read(name));
      continue;
    }
    CAMPO_CHECK(!name.starts_with(kOptimizerStatePrefix), "cannot write checkpoint ", path,
                ": model variable '", name, "' starts with '", kOptimizerStatePrefix,
                "', which checkpoints reserve for optimizer state");
    CAMPO_CHECK(!name.starts_with(kQuantizationStatePrefix), "cannot write checkpoint ", path,
                ": model variable '", name, "' starts with '", kQuantizationStatePrefix,
                "', which checkpoints reserve for quantized GEMM state");
    tensors.emplace_back(name, vars.read(name));
    std::string prefix = bn_prefix(name);
    if (prefix.empty() && ends_with(name, ".running_var")) {
      prefix = name.substr(0, name.size() - std::string(".running_var").size());
      if (!vars.contains(prefix + ".running_mean")) prefix.clear();
    } else if (!prefix.empty() && vars.contains(prefix + ".running_var")) {
      prefix.clear();  // emitted after running_var
    }
    if (!prefix.empty() && !vars.contains(prefix + ".num_batches_tracked"))
      tensors.emplace_back(prefix + ".num_batches_tracked", tracked);
  }
  tensors.insert(tensors.end(), optimizer_state.begin(), optimizer_state.end());
  write_safetensors(path, tensors, md);
}

namespace {

// f32 values in a variable's stored type: as they are for f32; rounded to nearest even for a
// bf16 (or f16) variable (exact for values that were stored in that type).
Tensor in_stored_type(const Tensor& f32, DType stored) {
  if (stored == DType::f32) return f32;
  Tensor out = Tensor::empty(f32.shape(), stored);
  convert(f32.data(), DType::f32, out.data(), stored, size_t(f32.numel()));
  return out;
}

}  // namespace

CheckpointMeta load_checkpoint(const std::string& path, VariableStore& vars,
                               const LoadOptions& options) {
  InputFile f(path);
  const Header h = read_header(path, f);

  // Metadata first: a file this build cannot interpret changes nothing. Every field is
  // checked here, so a caller never sees a value this format cannot hold.
  CheckpointMeta meta;
  const auto& md = h.metadata;
  if (md.count(kKeyVersion)) {
    auto it = md.find(kKeyVersion);
    int64_t version = 0;
    if (parse_whole_int(it->second, &version) && version > kCheckpointFormatVersion)
      fail_file(path, "written by a newer campo (format version ", shown(it->second),
                "; this build reads up to ", kCheckpointFormatVersion, ")");
    meta.format_version =
        int(metadata_int_value(path, kKeyVersion, it->second, 1, kCheckpointFormatVersion));
    meta.step = required_int(path, md, kKeyStep, 0, kMaxCount);
    meta.epoch = required_int(path, md, kKeyEpoch, 0, kMaxCount);
    meta.position_in_epoch = required_int(path, md, kKeyPosition, 0, kMaxCount);
    meta.model = plain_name(path, md, kKeyModel);
    meta.optimizer = plain_name(path, md, kKeyOptimizer);
  } else {
    meta.format_version = 0;  // not written by campo (e.g. exported from PyTorch)
    for (const auto& [key, value] : md)
      if (key.starts_with("campo."))
        fail_file(path, "metadata has '", shown(key), "' but no '", kKeyVersion,
                  "': written by an unknown tool, refusing to guess its meaning");
  }
  for (const auto& [key, value] : md) {
    if (key.rfind(kRngPrefix, 0) == 0) {
      try {
        rng_state_from_string(value);
      } catch (const Error& e) {
        fail_file(path, "metadata '", shown(key), "': ", e.what());
      }
      meta.rng_states[key.substr(kRngPrefix.size())] = value;
    } else if (!is_reserved_key(key)) {
      meta.extra[key] = value;
    }
  }

  // Match every variable to a tensor.
  std::vector<std::string> missing, reset;
  std::vector<std::pair<std::string, const Entry*>> found;
  std::set<std::string> expected;  // tensor names the variables read
  bool only_optimizer_state_missing = true;
  for (const std::string& name : vars.names()) {
    const std::string stored = stored_name(vars, name, meta.format_version);
    expected.insert(stored);
    auto it = h.index.find(stored);
    if (it == h.index.end()) {
      const bool is_state = vars.kind(name) == VariableKind::optimizer_state;
      if (is_state && options.allow_missing_optimizer_state) {
        reset.push_back(name);
      } else {
        missing.push_back(stored);
        only_optimizer_state_missing &= is_state;
      }
      continue;
    }
    const Entry& e = h.entries[it->second];
    const Shape& want = vars.at(name).shape();
    if (e.shape != want)
      fail_file(path, "tensor '", shown(stored), "' has shape ", shown(shape_str(e.shape)),
                ", the model expects ", shape_str(want));
    if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16" && e.dtype != "F64")
      fail_file(path, "tensor '", shown(stored), "' has dtype ", e.dtype,
                "; a variable loads only from F32, F16, BF16 or F64");
    found.emplace_back(name, &e);
  }
  if (!missing.empty())
    fail_file(path, "missing ", missing.size(),
              " tensor(s) the model needs: ", quoted_list(missing),
              only_optimizer_state_missing
                  ? " (optimizer state only: allow missing optimizer state to start a fresh "
                    "optimizer, e.g. from a PyTorch export)"
                  : "");
  if (options.strict_unexpected) {
    std::vector<std::string> unexpected;
    for (const Entry& e : h.entries) {
      if (expected.count(e.name)) continue;
      static const std::string nbt = ".num_batches_tracked";
      if (ends_with(e.name, nbt) &&
          vars.contains(e.name.substr(0, e.name.size() - nbt.size()) + ".running_mean"))
        continue;
      unexpected.push_back(e.name);
    }
    if (!unexpected.empty())
      fail_file(path, unexpected.size(),
                " tensor(s) match no variable of the model: ", quoted_list(unexpected));
  }

  // Stage everything, then commit (copies cannot fail).
  std::vector<Tensor> staged;
  staged.reserve(found.size());
  for (const auto& [name, e] : found) {
    staged.push_back(read_as_f32(path, f, h, *e));
    require_finite(path, e->name, staged.back());
    staged.back() = in_stored_type(staged.back(), vars.at(name).dtype());
  }
  for (size_t i = 0; i < found.size(); ++i) vars.write(found[i].first, staged[i]);
  for (const std::string& name : reset) {
    Tensor zeros = Tensor::empty(vars.at(name).shape(), vars.at(name).dtype());
    zeros.fill_zero();
    vars.write(name, zeros);
  }
  return meta;
}

int64_t checkpoint_extra_int(const std::string& path, const CheckpointMeta& meta,
                             const std::string& key, int64_t min, int64_t max, int64_t fallback) {
  auto it = meta.extra.find(key);
  return it == meta.extra.end() ? fallback : metadata_int_value(path, key, it->second, min, max);
}

double checkpoint_extra_float(const std::string& path, const CheckpointMeta& meta,
                              const std::string& key, double min, double max, double fallback) {
  auto it = meta.extra.find(key);
  if (it == meta.extra.end()) return fallback;
  const std::string& s = it->second;
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) ||
      v < min || v > max)
    fail_file(path, "metadata '", shown(key), "' is '", shown(s), "', not a finite number from ",
              min, " to ", max);
  return v;
}

std::vector<std::string> checkpoint_tensor_names(const std::string& path) {
  InputFile f(path);
  Header h = read_header(path, f);
  std::vector<std::string> names;
  for (const Entry& e : h.entries) names.push_back(e.name);
  return names;
}

std::map<std::string, Tensor> read_safetensors(const std::string& path) {
  InputFile f(path);
  const Header h = read_header(path, f);
  std::map<std::string, Tensor> out;
  for (const Entry& e : h.entries) {
    DType t;
    if (!campo_dtype_of(e.dtype, &t))
      fail_file(path, "tensor '", shown(e.name), "' has dtype ", e.dtype,
                ", which campo cannot represent (F32, F16, BF16, I32, I64)");
    out.emplace(e.name, read_tensor(f, h, e, t));
  }
  return out;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  InputFile f(path);
  return read_header(path, f).metadata;
}

}  // namespace campo
