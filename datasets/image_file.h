// Image files (JPEG, PNG, BMP, PGM/PPM, TGA, GIF's first frame) decoded with stb_image.
// This is the only place that compiles stb_image's implementation (with internal linkage,
// so another copy elsewhere in a program cannot clash). stb_image keeps its failure
// reason per thread, so both functions are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "datasets/image_transform.h"

namespace campo {

// A decoded image: 8-bit, rows interleaved (stride_x = channels); channels as stored
// (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA).
struct DecodedImage {
  std::shared_ptr<uint8_t> pixels;  // freed with stb_image's allocator
  int64_t height = 0, width = 0, channels = 0;

  ImageView view() const { return ImageView::interleaved(pixels.get(), height, width, channels); }
};

// The most pixels (width * height) an image file may have: larger ones are refused from
// their header, before stb_image allocates for them.
inline constexpr int64_t kMaxImagePixels = int64_t(1) << 26;

// Decodes a whole file. A missing, unreadable, corrupt or truncated file, or one larger
// than kMaxImagePixels, throws a campo::Error naming the path and the reason.
DecodedImage decode_image_file(const std::string& path);

// The cheap check: reads only the header. Returns true and the size when stb_image
// recognises the file and it is not too large; otherwise false with the reason in *reason.
struct ImageFileInfo {
  int64_t height = 0, width = 0, channels = 0;
};
bool probe_image_file(const std::string& path, ImageFileInfo* info, std::string* reason);

}  // namespace campo
