#include "datasets/image_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
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

// The size check made on the header, before decoding allocates anything.
void check_header(const std::string& name, int w, int h, int n) {
  CAMPO_CHECK(w > 0 && h > 0 && n >= 1 && n <= 4, name, ": an unusable image of ", w, "x", h,
              " with ", n, " channels");
  CAMPO_CHECK(int64_t(w) * int64_t(h) <= kMaxImagePixels, name, ": the image is ", w, "x", h,
              " pixels, more than the ", kMaxImagePixels, " this reader decodes; scale it down ",
              "(the model sees a few hundred pixels a side)");
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
  // Read whole, then decoded from memory: one code path for files and fuzzers, and the
  // bytes at hand for check_pnm_complete.
  std::ifstream in(path, std::ios::binary);
  CAMPO_CHECK(in.good(), path, ": cannot decode the image (cannot open: ", std::strerror(errno),
              ")");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  CAMPO_CHECK(size >= 0 && size <= std::streamoff(INT32_MAX), path, ": cannot decode the image (",
              size < 0 ? "cannot read its size" : "over 2 GiB", ")");
  in.seekg(0, std::ios::beg);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(size));
  CAMPO_CHECK(in.gcount() == std::streamsize(size), path, ": cannot decode the image (read ",
              in.gcount(), " of ", size, " bytes)");
  return decode_image(bytes, path);
}

DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name) {
  CAMPO_CHECK(bytes.size() <= size_t(INT32_MAX), name, ": ", bytes.size(),
              " bytes, too large for an image file");
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
  int w = 0, h = 0, n = 0;
  if (!stbi_info(path.c_str(), &w, &h, &n)) {
    if (reason) *reason = "stb_image: " + failure_reason();
    return false;
  }
  if (int64_t(w) * int64_t(h) > kMaxImagePixels) {
    if (reason)
      *reason = std::to_string(w) + "x" + std::to_string(h) + " pixels, more than the " +
                std::to_string(kMaxImagePixels) + " this reader decodes";
    return false;
  }
  if (info) *info = {h, w, n};
  return true;
}

}  // namespace campo
