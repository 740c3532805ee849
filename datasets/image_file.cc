#include "datasets/image_file.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/atomic_file.h"
#include "runtime/check.h"

// stb_image's implementation, private to this file. Its code is not ours to warn about.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wstringop-overflow"  // gcc: false positives, format conversion
#endif
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_HDR  // 8-bit images only
#define STBI_NO_PSD
#define STBI_NO_PIC
#define STBI_NO_JPEG          // JPEG goes to libjpeg-turbo (see decode_jpeg)
#define STBI_FAILURE_USERMSG  // readable reasons ("corrupt PNG", not "bad IHDR len")
#include <stb_image.h>
#pragma GCC diagnostic pop

// The only stb_image_write implementation in campo; static so that no other translation
// unit (or a system libstb) can clash with it.
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace campo {
namespace {

std::string failure_reason() {
  const char* r = stbi_failure_reason();
  return r ? r : "unknown error";
}

using Bytes = std::vector<uint8_t>;

// stb_image 2.27 reads the numbers of a binary PNM header (P5, P6) into an int without an
// overflow check, which is undefined behaviour above 2^31 - 1 (found by
// fuzz/image_fuzz.cc; 2.28 refuses them). Returns the problem, or "" (also for a file that
// is not a binary PNM).
std::string overflowing_pnm_header(std::span<const uint8_t> b) {
  size_t pos = 0;
  auto next = [&] { return pos < b.size() ? int(b[pos++]) : EOF; };
  std::string problem;
  if (next() == 'P') {
    const int kind = next();
    int c = next();
    for (int field = 0; field < 3 && (kind == '5' || kind == '6') && problem.empty(); ++field) {
      for (;;) {  // whitespace, then a comment to the end of its line
        while (c != EOF && std::strchr(" \t\n\v\f\r", c) && c != 0) c = next();
        if (c != '#') break;
        while (c != EOF && c != '\n' && c != '\r') c = next();
      }
      int64_t value = 0;
      for (; c >= '0' && c <= '9' && problem.empty(); c = next()) {
        value = value * 10 + (c - '0');
        if (value > INT32_MAX)
          problem = "corrupt PNM header: a number above " + std::to_string(INT32_MAX);
      }
    }
  }
  return problem;
}

// stb_image 2.27 grows its buffer for a PNG's IDAT data to the chunk length the file
// declares before reading the chunk, so a 60-byte PNG declaring a 1 GB chunk makes it
// allocate 2 GB (found by fuzz/image_fuzz.cc). A chunk cannot be longer than the bytes
// that follow its header, so such a file is corrupt and refused. Only for whole files: a
// probe reads a prefix, and stbi_info stops at the header chunk anyway.
std::string overlong_png_chunk(std::span<const uint8_t> b) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() < 8 || !std::equal(kSignature, kSignature + 8, b.begin())) return "";
  size_t pos = 8;
  while (b.size() - pos >= 8) {
    const uint64_t length = (uint64_t(b[pos]) << 24) | (uint64_t(b[pos + 1]) << 16) |
                            (uint64_t(b[pos + 2]) << 8) | uint64_t(b[pos + 3]);
    const bool is_end = std::equal(b.begin() + pos + 4, b.begin() + pos + 8, "IEND");
    pos += 8;
    if (length > b.size() - pos)
      return "corrupt PNG: a chunk declares " + std::to_string(length) + " bytes, " +
             std::to_string(b.size() - pos) + " follow it";
    if (is_end) break;
    pos += size_t(length);
    if (b.size() - pos < 4) break;  // the CRC; stb_image reports a cut-off file itself
    pos += 4;
  }
  return "";
}

// What stb_image would mishandle in the file, or "" (see above). `whole_file`: `b` is the
// whole file, about to be decoded; otherwise a prefix whose header is probed.
std::string unsafe_header(std::span<const uint8_t> b, bool whole_file) {
  std::string problem = overflowing_pnm_header(b);
  if (problem.empty() && whole_file) problem = overlong_png_chunk(b);
  return problem;
}

// stb_image allocates the whole image (a GIF three times over, at 4 bytes a pixel) as its
// header says, before reading any pixel: a 10-byte GIF header can ask for 14395 x 24889
// (found by fuzz/image_fuzz.cc, which stops at 2 GB). Headers above kMaxImagePixels are
// refused before decoding.
bool too_many_pixels(int64_t w, int64_t h) { return w * h > kMaxImagePixels; }

std::string too_many_pixels_reason(int64_t w, int64_t h) {
  return std::to_string(w) + "x" + std::to_string(h) + " is " + std::to_string(w * h) +
         " pixels, more than the " + std::to_string(kMaxImagePixels) +
         " (8192 x 8192) this loader decodes: shrink the image";
}

// Reads the file, or its first `limit` bytes when limit > 0; *whole says whether that is
// all of it. Images are decoded from memory: stb_image's "rewind" on a FILE* goes back only
// to the start of its last 128-byte buffer, so after a long JPEG header probe the other
// formats' probes read a chunk from the middle of the file as if it were its start (which
// the checks above could not see; found by fuzz/image_fuzz.cc).
bool read_bytes(const std::string& path, size_t limit, Bytes* out, bool* whole,
                std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    *error = std::string("cannot open: ") + std::strerror(errno);
    return false;
  }
  out->clear();
  uint8_t chunk[1 << 16];
  size_t got = 0;
  *whole = false;
  while (limit == 0 || out->size() < limit) {
    const size_t want = limit ? std::min(sizeof chunk, limit - out->size()) : sizeof chunk;
    got = std::fread(chunk, 1, want, f);
    out->insert(out->end(), chunk, chunk + got);
    if (got < want) {
      *whole = true;
      break;
    }
  }
  const bool failed = std::ferror(f) != 0;
  if (failed) *error = std::string("read error: ") + std::strerror(errno);
  std::fclose(f);
  return !failed;
}

// The size check made on the header, before decoding allocates anything.
void check_header(const std::string& name, int w, int h, int n) {
  CAMPO_CHECK(w > 0 && h > 0 && n >= 1 && n <= 4, name, ": an unusable image of ", w, "x", h,
              " with ", n, " channels");
  CAMPO_CHECK(!too_many_pixels(w, h), name, ": cannot decode the image (",
              too_many_pixels_reason(w, h), ")");
}

// stb_image 2.27 decodes a binary PGM/PPM whose pixel data is cut short without an error,
// into uninitialised memory. The header is read here to check the data is all there:
// "P5" or "P6", then width, height and maxval as decimal numbers separated by whitespace
// (with '#' comments to the end of a line), then one whitespace byte, then the samples
// (1 byte each for maxval < 256, else 2).
void check_pnm_complete(std::span<const uint8_t> bytes, const std::string& name, int64_t w,
                        int64_t h, int64_t n) {
  if (bytes.size() < 2 || bytes[0] != 'P' || (bytes[1] != '5' && bytes[1] != '6')) return;
  size_t at = 2;
  auto is_space = [](uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  int64_t maxval = 0;
  for (int field = 0; field < 3; ++field) {
    for (;;) {  // whitespace and comments
      if (at < bytes.size() && is_space(bytes[at])) {
        ++at;
      } else if (at < bytes.size() && bytes[at] == '#') {
        while (at < bytes.size() && bytes[at] != '\n' && bytes[at] != '\r') ++at;
      } else {
        break;
      }
    }
    int64_t value = 0;
    while (at < bytes.size() && bytes[at] >= '0' && bytes[at] <= '9' && value < (int64_t(1) << 32))
      value = value * 10 + (bytes[at++] - '0');
    maxval = value;
  }
  ++at;  // the single whitespace byte before the data
  const int64_t need = w * h * n * (maxval > 255 ? 2 : 1);
  const int64_t have = int64_t(bytes.size()) - int64_t(std::min(at, bytes.size()));
  CAMPO_CHECK(have >= need, name, ": truncated image: the PNM header announces ", w, "x", h,
              " pixels (", need, " bytes), ", have, " bytes follow it");
}

// JPEG is decoded by libjpeg-turbo (Debian's libturbojpeg0), not by stb_image 2.27, whose
// JPEG decoder the image fuzzer kept breaking: writes past a Huffman table, a wrong symbol
// for the last code of a full table, reads of never-initialised tables, shifts past 32
// bits on corrupt entropy-coded data (fuzz/regressions/image/jpeg-*). libjpeg-turbo is the
// decoder PyTorch's and TensorFlow's image loaders use, is fuzzed continuously by OSS-Fuzz,
// and is faster. A JPEG is a file starting with the SOI marker (ff d8).
bool is_jpeg(std::span<const uint8_t> b) { return b.size() >= 2 && b[0] == 0xff && b[1] == 0xd8; }

// One TurboJPEG decompressor, destroyed with the scope. Its error text is per handle, so
// decoding is thread-safe.
class JpegDecoder {
 public:
  JpegDecoder() : handle_(tjInitDecompress()) {}
  ~JpegDecoder() {
    if (handle_) tjDestroy(handle_);
  }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads the headers up to the frame: size and colour space. False with *error.
  bool read_header(std::span<const uint8_t> b, int* w, int* h, int* colorspace,
                   std::string* error) {
    int subsampling = 0;
    if (handle_ && tjDecompressHeader3(handle_, b.data(), static_cast<unsigned long>(b.size()), w,
                                       h, &subsampling, colorspace) == 0)
      return true;
    *error = this->error();
    return false;
  }

  // Decodes into `out` (w x h x tjPixelSize[format] bytes). Warnings (corrupt entropy-coded
  // data, a file cut short) are errors, not a partly grey image; a progressive JPEG of more
  // than 500 scans is refused, as libjpeg-turbo recommends against decompression bombs.
  bool decode(std::span<const uint8_t> b, uint8_t* out, int w, int h, int format,
              std::string* error) {
    if (tjDecompress2(handle_, b.data(), static_cast<unsigned long>(b.size()), out, w, 0, h, format,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) == 0)
      return true;
    *error = this->error();
    return false;
  }

 private:
  std::string error() const { return std::string("libjpeg-turbo: ") + tjGetErrorStr2(handle_); }
  tjhandle handle_;
};

// Channels a decoded JPEG of this colour space has: grey 1, anything else RGB.
int jpeg_channels(int colorspace) { return colorspace == TJCS_GRAY ? 1 : 3; }

DecodedImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& name) {
  JpegDecoder decoder;
  int w = 0, h = 0, colorspace = 0;
  std::string error;
  CAMPO_CHECK(decoder.read_header(bytes, &w, &h, &colorspace, &error), name,
              ": cannot decode the image (", error, ")");
  const int channels = jpeg_channels(colorspace);
  check_header(name, w, h, channels);
  // CMYK and YCCK (Adobe) JPEGs decode to CMYK as stored, inverted (255 = no ink), and are
  // turned into RGB here the way stb_image does: R = C * K / 255, and so on.
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int format = cmyk ? TJPF_CMYK : channels == 1 ? TJPF_GRAY : TJPF_RGB;
  const size_t pixels = size_t(w) * size_t(h);
  auto* data = static_cast<uint8_t*>(std::malloc(pixels * size_t(tjPixelSize[format])));
  CAMPO_CHECK(data != nullptr, name, ": cannot decode the image (out of memory for ", w, "x", h,
              " pixels)");
  std::shared_ptr<uint8_t> owner(data, std::free);
  CAMPO_CHECK(decoder.decode(bytes, data, w, h, format, &error), name,
              ": cannot decode the image (", error, ")");
  if (cmyk)  // in place: pixel i's RGB (3i..3i+2) lies at or before its CMYK (4i..4i+3)
    for (size_t i = 0; i < pixels; ++i) {
      const unsigned k = data[4 * i + 3];
      for (int c = 0; c < 3; ++c) data[3 * i + c] = uint8_t((data[4 * i + c] * k + 127) / 255);
    }
  DecodedImage img;
  img.pixels = std::move(owner);
  img.height = h;
  img.width = w;
  img.channels = channels;
  return img;
}

DecodedImage wrap(const std::string& name, uint8_t* data, int w, int h, int n) {
  CAMPO_CHECK(data != nullptr, name, ": cannot decode the image (stb_image: ", failure_reason(),
              ")");
  DecodedImage img;
  img.pixels = std::shared_ptr<uint8_t>(data, [](uint8_t* p) { stbi_image_free(p); });
  img.height = h;
  img.width = w;
  img.channels = n;
  CAMPO_CHECK(w > 0 && h > 0 && n >= 1 && n <= 4, name, ": decoded to an unusable image of ", w,
              "x", h, " with ", n, " channels");
  return img;
}

}  // namespace

DecodedImage decode_image_file(const std::string& path) {
  // Read whole, then decoded from memory: one code path for files and fuzzers.
  Bytes bytes;
  bool whole = false;
  std::string error;
  CAMPO_CHECK(read_bytes(path, 0, &bytes, &whole, &error), path, ": cannot decode the image (",
              error, ")");
  return decode_image(bytes, path);
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name) {
  CAMPO_CHECK(bytes.size() <= size_t(INT32_MAX), name, ": ", bytes.size(),
              " bytes, too large for an image file");
  if (is_jpeg(bytes)) return decode_jpeg(bytes, name);
  const std::string problem = unsafe_header(bytes, /*whole_file=*/true);
  CAMPO_CHECK(problem.empty(), name, ": cannot decode the image (", problem, ")");
  const int len = int(bytes.size());
  int w = 0, h = 0, n = 0;
  CAMPO_CHECK(stbi_info_from_memory(bytes.data(), len, &w, &h, &n), name,
              ": cannot decode the image (stb_image: ", failure_reason(), ")");
  check_header(name, w, h, n);
  check_pnm_complete(bytes, name, w, h, n);
  uint8_t* data = stbi_load_from_memory(bytes.data(), len, &w, &h, &n, 0);
  return wrap(name, data, w, h, n);
}

bool probe_image_file(const std::string& path, ImageFileInfo* info, std::string* reason) {
  // A header is read from the first MiB; the whole file only when that is not enough.
  Bytes bytes;
  bool whole = false;
  std::string error, problem, jpeg_error;
  int w = 0, h = 0, n = 0;
  bool recognised = false, jpeg = false;
  for (size_t limit : {size_t(1) << 20, size_t(0)}) {
    if (!read_bytes(path, limit, &bytes, &whole, &error)) {
      if (reason) *reason = error;
      return false;
    }
    problem = unsafe_header(bytes, /*whole_file=*/false);
    jpeg = is_jpeg(bytes);
    if (!problem.empty() || bytes.size() > size_t(INT32_MAX)) {
      recognised = false;
    } else if (jpeg) {
      int colorspace = 0;
      recognised = JpegDecoder().read_header(bytes, &w, &h, &colorspace, &jpeg_error);
      n = jpeg_channels(colorspace);
    } else {
      recognised = stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &n);
    }
    if (recognised || !problem.empty() || whole) break;
  }
  if (!recognised) {
    if (reason)
      *reason = !problem.empty() ? problem : jpeg ? jpeg_error : "stb_image: " + failure_reason();
    return false;
  }
  if (too_many_pixels(w, h)) {
    if (reason) *reason = too_many_pixels_reason(w, h);
    return false;
  }
  if (info) *info = {h, w, n};
  return true;
}

void write_png_grid(const std::string& path, const Tensor& images, int nrow, int padding) {
  CAMPO_CHECK(images.rank() == 4 && images.dtype() == DType::f32,
              "image grid: expected f32 images [N, C, H, W], got ", dtype_name(images.dtype()), " ",
              shape_str(images.shape()));
  const int64_t n = images.dim(0), c = images.dim(1), h = images.dim(2), w = images.dim(3);
  CAMPO_CHECK(c == 1 || c == 3, "image grid: images need 1 or 3 channels, got ", c);
  CAMPO_CHECK(n > 0 && nrow > 0 && padding >= 0, "image grid: bad layout (", n, " images, ", nrow,
              " per row, padding ", padding, ")");
  const int64_t cols = std::min<int64_t>(nrow, n), rows = (n + cols - 1) / cols;
  const int64_t gw = cols * (w + padding) + padding, gh = rows * (h + padding) + padding;
  std::vector<uint8_t> pixels(size_t(gw * gh * c), 0);
  const float* src = images.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y0 = (i / cols) * (h + padding) + padding;
    const int64_t x0 = (i % cols) * (w + padding) + padding;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const float v = src[((i * c + ch) * h + y) * w + x];
          const float u = std::isfinite(v) ? std::clamp((v + 1.0f) * 0.5f, 0.0f, 1.0f) : 0.0f;
          pixels[size_t(((y0 + y) * gw + x0 + x) * c + ch)] = uint8_t(std::lround(u * 255.0f));
        }
  }
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(size));
  };
  CAMPO_CHECK(stbi_write_png_to_func(append, &png, int(gw), int(gh), int(c), pixels.data(),
                                     int(gw * c)) != 0,
              "cannot encode the PNG image '", path, "'");
  write_file_atomically(path, png, "PNG image");
}

}  // namespace campo
