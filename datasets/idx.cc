#include "datasets/idx.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "runtime/file_check.h"

namespace campo {
namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// A file read through zlib, which reads gzip streams and plain files alike (gzdirect).
// A corrupt gzip stream throws at once; a gzip stream that simply ends early is recorded
// (ended_early()) so the caller can say how much data it expected.
class GzReader {
 public:
  // Reads the open descriptor `fd` (owned from here on); `name` is for messages.
  GzReader(int fd, std::string name) : path_(std::move(name)) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) size_ = uint64_t(st.st_size);
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) {
      ::close(fd);
      CAMPO_FAIL(path_, ": cannot open: ", std::strerror(errno));
    }
    gzbuffer(file_, 1 << 20);  // before the first read; fewer, larger reads
  }
  ~GzReader() {
    if (file_) gzclose_r(file_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes into dst; returns how many were read (fewer only at the end).
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
      int r = gzread(file_, static_cast<char*>(dst) + got, chunk);
      if (r < 0) throw_if_stream_error();
      if (r <= 0) break;
      got += size_t(r);
    }
    throw_if_stream_error();
    return got;
  }

  // Reads n bytes into a growing vector (so a lying header in a gzip file cannot force a
  // huge allocation before the data is there); returns fewer only at the end.
  std::vector<uint8_t> read_vector(size_t n) {
    const size_t step = size_t(64) << 20;
    std::vector<uint8_t> out;
    out.reserve(std::min(n, step));
    while (out.size() < n) {
      size_t want = std::min(step, n - out.size());
      size_t old = out.size();
      out.resize(old + want);
      size_t got = read(out.data() + old, want);
      out.resize(old + got);
      if (got < want) break;
    }
    return out;
  }

  // Counts the bytes left (reading to the end also checks the gzip CRC), stopping past
  // `limit`: a gzip stream can expand a thousandfold, so trailing data is not inflated
  // without bound just to be counted.
  size_t count_remaining(size_t limit) {
    char buf[1 << 14];
    size_t total = 0;
    while (total <= limit) {
      size_t got = read(buf, sizeof buf);
      total += got;
      if (got < sizeof buf) break;
    }
    return total;
  }

  bool is_gzip() { return gzdirect(file_) == 0; }
  // The size of a plain (not gzip) regular file; empty for gzip streams.
  std::optional<uint64_t> plain_size() {
    if (!size_ || is_gzip()) return std::nullopt;
    return size_;
  }
  bool ended_early() const { return ended_early_; }
  const std::string& path() const { return path_; }

 private:
  void throw_if_stream_error() {
    int errnum = Z_OK;
    const char* message = gzerror(file_, &errnum);
    if (errnum == Z_OK) return;
    if (errnum == Z_BUF_ERROR) {  // "unexpected end of file": a cut-off gzip stream
      ended_early_ = true;
      return;
    }
    if (errnum == Z_ERRNO) CAMPO_FAIL(path_, ": read error: ", std::strerror(errno));
    std::string detail = message ? message : "unknown error";
    if (detail.rfind(path_ + ": ", 0) == 0) detail.erase(0, path_.size() + 2);  // zlib adds it
    if (detail.rfind("<fd:", 0) == 0 && detail.find(">: ") != std::string::npos)
      detail.erase(0, detail.find(">: ") + 3);  // gzdopen's name
    CAMPO_FAIL(path_, ": corrupt gzip stream (zlib: ", detail, ")");
  }

  std::string path_;
  gzFile file_ = nullptr;
  std::optional<uint64_t> size_;
  bool ended_early_ = false;
};

GzReader open_file(const std::string& path) {
  require_input_file(path, "IDX file");  // a FIFO would hang the read
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CAMPO_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  return GzReader(fd, path);
}

// The bytes in an anonymous in-memory file, read by the same code as a file on disk.
GzReader open_bytes(std::span<const uint8_t> bytes, const std::string& name) {
  const int fd = ::memfd_create("campo-idx", MFD_CLOEXEC);
  CAMPO_CHECK(fd >= 0, name, ": cannot make an in-memory file: ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      CAMPO_FAIL(name, ": cannot fill an in-memory file: ", std::strerror(err));
    }
    done += size_t(w);
  }
  ::lseek(fd, 0, SEEK_SET);
  return GzReader(fd, name);
}

// Reads the magic number and dims of an IDX header, checking the magic.
std::vector<int64_t> read_idx_header(GzReader& in, uint32_t expected_magic, const char* what) {
  const int ndims = int(expected_magic & 0xff);
  uint8_t header[4 + 4 * 3];
  const size_t header_bytes = size_t(4 + 4 * ndims);
  size_t got = in.read(header, header_bytes);
  if (got >= 4) {
    uint32_t magic = read_be32(header);
    if (magic != expected_magic) {
      std::string guess;
      if (magic == kIdxImagesMagic) guess = " (this is an IDX image file)";
      if (magic == kIdxLabelsMagic) guess = " (this is an IDX label file)";
      if ((magic >> 16) == 0x1f8b) guess = " (a gzip stream inside the file: compressed twice?)";
      CAMPO_FAIL(in.path(), ": wrong magic number ", hex32(magic), ", expected ",
                 hex32(expected_magic), " for an IDX ", what, " file", guess);
    }
  }
  CAMPO_CHECK(got == header_bytes, in.path(), ": truncated file: ", got,
              " bytes, too short for the ", header_bytes, "-byte IDX ", what, " header",
              in.ended_early() ? " (the gzip stream ends early)" : "");
  std::vector<int64_t> dims(static_cast<size_t>(ndims));
  for (int d = 0; d < ndims; ++d) dims[size_t(d)] = int64_t(read_be32(header + 4 + 4 * d));
  return dims;
}

// Reads the payload of `expected` bytes (which the caller has bounded by kMaxIdxBytes) and
// checks nothing follows it. A plain file's size is compared first, so a lying header
// costs no allocation; a gzip stream is read in steps and stops where the data does.
std::vector<uint8_t> read_idx_payload(GzReader& in, size_t header_bytes, size_t expected,
                                      const char* what) {
  if (const std::optional<uint64_t> size = in.plain_size()) {
    const uint64_t follows = *size - std::min<uint64_t>(*size, header_bytes);
    CAMPO_CHECK(follows >= expected, in.path(), ": truncated file: the header announces ", expected,
                " bytes of ", what, " data, but only ", follows, " follow it");
    CAMPO_CHECK(follows == expected, in.path(), ": ", follows - expected,
                " unexpected bytes after the ", expected, " bytes of ", what,
                " data that the header announces");
  }
  std::vector<uint8_t> data = in.read_vector(expected);
  CAMPO_CHECK(data.size() == expected, in.path(), ": truncated file: expected ", expected,
              " bytes of ", what, " data, got ", data.size(),
              in.ended_early() ? " (the gzip stream ends early)" : "");
  constexpr size_t kTrailingLimit = size_t(1) << 20;
  const size_t extra = in.count_remaining(kTrailingLimit);
  CAMPO_CHECK(extra == 0, in.path(), ": ", extra > kTrailingLimit ? "more than " : "",
              std::min(extra, kTrailingLimit), " unexpected bytes after the ", expected,
              " bytes of ", what, " data that the header announces");
  return data;
}

IdxImages read_images(GzReader& in) {
  std::vector<int64_t> dims = read_idx_header(in, kIdxImagesMagic, "image");
  IdxImages out;
  out.count = dims[0];
  out.rows = dims[1];
  out.cols = dims[2];
  CAMPO_CHECK(out.rows > 0 && out.cols > 0, in.path(), ": image size ", out.rows, "x", out.cols,
              " in the header is empty");
  CAMPO_CHECK(out.rows <= kMaxIdxSide && out.cols <= kMaxIdxSide, in.path(), ": image size ",
              out.rows, "x", out.cols, " in the header is implausibly large (sides up to ",
              kMaxIdxSide, ")");
  // Each dim is < 2^32, so the product is exact in 128 bits.
  const unsigned __int128 bytes =
      (unsigned __int128)out.count * uint64_t(out.rows) * uint64_t(out.cols);
  CAMPO_CHECK(bytes <= kMaxIdxBytes, in.path(), ": the header announces ", out.count, " images of ",
              out.rows, "x", out.cols, ", implausibly large (more than the ", kMaxIdxBytes >> 30,
              " GiB of pixels this reader accepts)");
  out.pixels = read_idx_payload(in, 16, size_t(bytes), "pixel");
  return out;
}

std::vector<uint8_t> read_labels(GzReader& in) {
  std::vector<int64_t> dims = read_idx_header(in, kIdxLabelsMagic, "label");
  static_assert(kMaxIdxBytes > UINT32_MAX, "a label count is a u32: always within the bound");
  return read_idx_payload(in, 8, size_t(dims[0]), "label");
}

std::string find_split_file(const std::string& dir, const std::string& base,
                            const IdxOptions& options, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string plain = (fs::path(dir) / base).string();
  const std::string gz = plain + ".gz";
  if (fs::is_regular_file(plain, ec)) return plain;
  if (fs::is_regular_file(gz, ec)) return gz;
  CAMPO_FAIL(options.name, ": cannot find the ", what, ": tried ", plain, " and ", gz,
             fs::is_directory(dir, ec) ? "" : " (the directory does not exist)", "; ",
             options.missing_hint);
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  GzReader in = open_file(path);
  return read_images(in);
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  GzReader in = open_file(path);
  return read_labels(in);
}

IdxImages parse_idx_images(std::span<const uint8_t> bytes, const std::string& name) {
  GzReader in = open_bytes(bytes, name);
  return read_images(in);
}

std::vector<uint8_t> parse_idx_labels(std::span<const uint8_t> bytes, const std::string& name) {
  GzReader in = open_bytes(bytes, name);
  return read_labels(in);
}

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path,
                       const IdxOptions& options, std::string split)
    : name_(split.empty() ? options.name : options.name + "/" + split),
      channels_(options.channels),
      num_classes_(options.num_classes) {
  CAMPO_CHECK(options.channels == 1 || options.channels == 3, name_, ": channels must be 1 or 3",
              ", got ", options.channels);
  CAMPO_CHECK(options.image_size >= 0, name_, ": image size must be positive, got ",
              options.image_size);
  CAMPO_CHECK(options.num_classes > 0 && options.num_classes <= 256, name_,
              ": num_classes must be in [1, 256], got ", options.num_classes);
  CAMPO_CHECK(std::isfinite(options.mean) && std::isfinite(options.stddev) && options.stddev > 0,
              name_, ": normalisation needs a finite mean and a positive std, got mean ",
              options.mean, " std ", options.stddev);

  IdxImages images = read_idx_images(images_path);
  std::vector<uint8_t> labels = read_idx_labels(labels_path);
  CAMPO_CHECK(int64_t(labels.size()) == images.count, name_, ": ", images_path, " holds ",
              images.count, " images but ", labels_path, " holds ", labels.size(), " labels");
  for (size_t i = 0; i < labels.size(); ++i)
    CAMPO_CHECK(labels[i] < options.num_classes, labels_path, ": label ", int(labels[i]),
                " of sample ", i, " is out of range for ", options.num_classes, " classes");

  count_ = images.count;
  rows_ = images.rows;
  cols_ = images.cols;
  out_h_ = options.image_size ? options.image_size : rows_;
  out_w_ = options.image_size ? options.image_size : cols_;

  // x = (p / 255 - mean) / std, through a 256-entry table.
  float table[256];
  for (int p = 0; p < 256; ++p) table[p] = (float(p) / 255.0f - options.mean) / options.stddev;
  pixels_.resize(images.pixels.size());
  const uint8_t* src = images.pixels.data();
  float* dst = pixels_.data();
  const int64_t n = int64_t(pixels_.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dst[i] = table[src[i]];
  labels_.assign(labels.begin(), labels.end());

  if (out_h_ != rows_ || out_w_ != cols_) {
    // Bilinear taps: half-pixel centres, clamped at the edges (PyTorch's
    // interpolate(mode="bilinear", align_corners=False), no antialiasing).
    auto taps = [](int64_t in, int64_t out) {
      std::vector<Tap> t(static_cast<size_t>(out));
      const double scale = double(in) / double(out);
      for (int64_t o = 0; o < out; ++o) {
        double s = std::max(0.0, (double(o) + 0.5) * scale - 0.5);
        int64_t i0 = std::min<int64_t>(int64_t(s), in - 1);
        int64_t i1 = std::min<int64_t>(i0 + 1, in - 1);
        float w1 = i0 == in - 1 ? 0.0f : float(s - double(i0));
        t[size_t(o)] = {int32_t(i0), int32_t(i1), 1.0f - w1, w1};
      }
      return t;
    };
    taps_y_ = taps(rows_, out_h_);
    taps_x_ = taps(cols_, out_w_);
  }
}

const float* IdxDataset::native_pixels(int64_t index) const {
  check_index(index);
  return pixels_.data() + index * rows_ * cols_;
}

void IdxDataset::get(int64_t index, float* image, int32_t* label) const {
  const float* src = native_pixels(index);
  const int64_t plane = out_h_ * out_w_;
  if (taps_y_.empty()) {
    std::memcpy(image, src, size_t(plane) * sizeof(float));
  } else {
    // out[y][x] = sum over the 2x2 taps of wy * wx * in[iy][ix]
    for (int64_t y = 0; y < out_h_; ++y) {
      const Tap& ty = taps_y_[size_t(y)];
      const float* r0 = src + ty.i0 * cols_;
      const float* r1 = src + ty.i1 * cols_;
      float* out = image + y * out_w_;
      for (int64_t x = 0; x < out_w_; ++x) {
        const Tap& tx = taps_x_[size_t(x)];
        float top = tx.w0 * r0[tx.i0] + tx.w1 * r0[tx.i1];
        float bottom = tx.w0 * r1[tx.i0] + tx.w1 * r1[tx.i1];
        out[x] = ty.w0 * top + ty.w1 * bottom;
      }
    }
  }
  for (int64_t c = 1; c < channels_; ++c)
    std::memcpy(image + c * plane, image, size_t(plane) * sizeof(float));
  *label = labels_[size_t(index)];
}

std::shared_ptr<IdxDataset> load_idx_split(const std::string& dir, const std::string& split,
                                           const IdxOptions& options) {
  CAMPO_CHECK(split == "train" || split == "test", options.name, ": unknown split '", split,
              "' (expected train or test)");
  const std::string prefix = split == "train" ? "train" : "t10k";
  std::string images =
      find_split_file(dir, prefix + "-images-idx3-ubyte", options, split + " images");
  std::string labels =
      find_split_file(dir, prefix + "-labels-idx1-ubyte", options, split + " labels");
  return std::make_shared<IdxDataset>(images, labels, options, split);
}

}  // namespace campo
