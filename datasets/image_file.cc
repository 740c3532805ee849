#include "datasets/image_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/check.h"

// stb_image's implementation, private to this file. Its code is not ours to warn about.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_HDR  // 8-bit images only
#define STBI_NO_PSD
#define STBI_NO_PIC
#define STBI_FAILURE_USERMSG  // readable reasons ("corrupt JPEG", not "bad huffman code")
#include <stb_image.h>
#pragma GCC diagnostic pop

namespace campo {
namespace {

std::string failure_reason() {
  const char* r = stbi_failure_reason();
  return r ? r : "unknown error";
}

using Bytes = std::vector<uint8_t>;

// stb_image 2.27 (Debian 12's libstb-dev) trusts a JPEG's tables in three ways that the
// image fuzzer (fuzz/image_fuzz.cc) broke:
// - it builds a Huffman table from its 16 code counts without checking that they sum to
//   at most 256, and writes past the table when they do (2.28 refuses such a table);
// - its decoder marks "no short code" with symbol index 255, so in a table of 256 codes
//   whose last code is short it takes that code for a longer one and decodes a symbol of
//   another length (an assertion in a debug build, wrong pixels otherwise). Real JPEGs
//   have at most 162 codes per table, so 256 is refused outright;
// - a scan may use a Huffman table, and a frame component a quantisation table, that no
//   DHT or DQT segment defined: stb_image then reads its never-initialised table memory.
// This walks the JPEG's markers the way stb_image reads them, up to the first frame header
// when `until_frame` (all stbi_info reads) or to the end, and returns the first such
// problem, or "" (also for a file that is not a JPEG, or malformed otherwise: stb_image
// reports that itself).
std::string unsafe_jpeg_tables(std::span<const uint8_t> b, bool until_frame) {
  size_t pos = 0;
  auto next = [&] { return pos < b.size() ? int(b[pos++]) : EOF; };
  std::string problem;
  bool huffman_defined[2][4] = {}, quant_defined[4] = {}, progressive = false;
  std::vector<int> frame_quant_tables;  // per component of the last frame header
  int first = next(), soi = first;
  while (first == 0xff && soi == 0xff) soi = next();  // stb_image skips fill bytes here too
  if (first == 0xff && soi == 0xd8) {
    while (problem.empty()) {
      int c = next();
      if (c == EOF) break;
      if (c != 0xff) continue;  // entropy-coded data, or junk stb_image skips too
      while (c == 0xff) c = next();
      if (c == EOF || c == 0xd9) break;                                  // EOI
      if (c == 0x00 || c == 0x01 || (c >= 0xd0 && c <= 0xd8)) continue;  // no length
      if (until_frame && (c == 0xc0 || c == 0xc1 || c == 0xc2)) break;   // SOF0..2
      const int hi = next(), lo = next();
      if (lo == EOF) break;
      long length = ((long(hi) << 8) | long(lo)) - 2;
      if (length < 0) break;
      const size_t segment_end = pos + size_t(length);
      if (c == 0xc4) {
        // DHT: tables of (class/id byte, 16 counts, sum(counts) symbols) while length > 0.
        while (length > 0 && problem.empty()) {
          const int id = next();
          if (id == EOF) break;
          int codes = 0;
          for (int i = 0; i < 16; ++i) codes += std::max(next(), 0);
          if (codes > 255)
            problem = "corrupt JPEG: a Huffman table (DHT) declares " + std::to_string(codes) +
                      " codes, at most 255 are supported";
          else if ((id >> 4) <= 1 && (id & 15) <= 3)
            huffman_defined[id >> 4][id & 15] = true;
          pos += size_t(codes);
          length -= 17 + codes;
        }
        continue;  // pos is where stb_image goes on reading, whatever the length said
      }
      if (c == 0xdb) {  // DQT: tables of (precision/id byte, 64 one- or two-byte values)
        while (length > 0) {
          const int id = next();
          if (id == EOF) break;
          if ((id & 15) <= 3) quant_defined[id & 15] = true;
          const long size = (id >> 4) ? 128 : 64;
          pos += size_t(size);
          length -= 1 + size;
        }
      } else if (c >= 0xc0 && c <= 0xc2) {  // SOF0..2: P, Y, X, Nf, Nf x (C, HV, Tq)
        progressive = c == 0xc2;
        pos += 5;
        const int components = std::max(next(), 0);
        frame_quant_tables.clear();
        for (int i = 0; i < components && pos + 3 <= segment_end; ++i) {
          pos += 2;
          frame_quant_tables.push_back(next());
        }
      } else if (c == 0xda) {  // SOS: Ns, Ns x (Cs, Td/Ta), Ss, Se, Ah/Al
        const int components = std::max(next(), 0);
        std::vector<int> tables;
        for (int i = 0; i < components && i < 4; ++i) {
          next();
          tables.push_back(next());
        }
        const int spectral_start = next();
        next();  // Se
        const int approximation_high = next() >> 4;
        // The tables stb_image decodes this scan with: both in a baseline scan; in a
        // progressive one, DC for a first DC scan and AC for any AC scan.
        const bool dc = !progressive || (spectral_start == 0 && approximation_high == 0);
        const bool ac = !progressive || spectral_start > 0;
        for (int t : tables) {
          const int td = t >> 4, ta = t & 15;
          if (t < 0 || td > 3 || ta > 3) continue;  // stb_image refuses these itself
          if ((dc && !huffman_defined[0][td]) || (ac && !huffman_defined[1][ta])) {
            problem = "corrupt JPEG: a scan uses Huffman table " +
                      std::string(dc && !huffman_defined[0][td] ? "DC " + std::to_string(td)
                                                                : "AC " + std::to_string(ta)) +
                      ", which no DHT segment before it defines";
            break;
          }
        }
        for (int q : frame_quant_tables)
          if (problem.empty() && q >= 0 && q <= 3 && !quant_defined[q])
            problem = "corrupt JPEG: the frame uses quantisation table " + std::to_string(q) +
                      ", which no DQT segment before its first scan defines";
      }
      pos = segment_end;
    }
  }
  return problem;
}

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
  std::string problem = unsafe_jpeg_tables(b, /*until_frame=*/!whole_file);
  if (problem.empty()) problem = overflowing_pnm_header(b);
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
  std::string error, problem;
  int w = 0, h = 0, n = 0;
  bool recognised = false;
  for (size_t limit : {size_t(1) << 20, size_t(0)}) {
    if (!read_bytes(path, limit, &bytes, &whole, &error)) {
      if (reason) *reason = error;
      return false;
    }
    problem = unsafe_header(bytes, /*whole_file=*/false);
    recognised = problem.empty() && bytes.size() <= size_t(INT32_MAX) &&
                 stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &n);
    if (recognised || !problem.empty() || whole) break;
  }
  if (!recognised) {
    if (reason) *reason = problem.empty() ? "stb_image: " + failure_reason() : problem;
    return false;
  }
  if (too_many_pixels(w, h)) {
    if (reason) *reason = too_many_pixels_reason(w, h);
    return false;
  }
  if (info) *info = {h, w, n};
  return true;
}

}  // namespace campo
