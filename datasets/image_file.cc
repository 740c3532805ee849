#include "datasets/image_file.h"

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

}  // namespace

DecodedImage decode_image_file(const std::string& path) {
  int w = 0, h = 0, n = 0;
  uint8_t* data = stbi_load(path.c_str(), &w, &h, &n, 0);
  CAMPO_CHECK(data != nullptr, path, ": cannot decode the image (stb_image: ", failure_reason(),
              ")");
  DecodedImage img;
  img.pixels = std::shared_ptr<uint8_t>(data, [](uint8_t* p) { stbi_image_free(p); });
  img.height = h;
  img.width = w;
  img.channels = n;
  CAMPO_CHECK(w > 0 && h > 0 && n >= 1 && n <= 4, path, ": decoded to an unusable image of ", w,
              "x", h, " with ", n, " channels");
  return img;
}

bool probe_image_file(const std::string& path, ImageFileInfo* info, std::string* reason) {
  int w = 0, h = 0, n = 0;
  if (!stbi_info(path.c_str(), &w, &h, &n)) {
    if (reason) *reason = failure_reason();
    return false;
  }
  if (info) *info = {h, w, n};
  return true;
}

}  // namespace campo
