// Image files: JPEG decoded with libjpeg-turbo; PNG, BMP, PGM/PPM, TGA and GIF's first
// frame with stb_image; PNG grids written with stb_image_write. This is the only place that
// compiles stb_image's implementation (with internal linkage, so another copy elsewhere in a
// program cannot clash). stb_image keeps its failure reason per thread and each JPEG gets its own
// decompressor, so both functions are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "datasets/image_transform.h"
#include "runtime/tensor.h"

namespace campo {

// A decoded image: 8-bit, rows interleaved (stride_x = channels); channels as stored
// (1 grey, 2 grey + alpha, 3 RGB, 4 RGBA).
struct DecodedImage {
  std::shared_ptr<uint8_t> pixels;  // freed with the allocator of the decoder that made it
  int64_t height = 0, width = 0, channels = 0;

  ImageView view() const { return ImageView::interleaved(pixels.get(), height, width, channels); }
};

// The most pixels (width x height) an image may have: 64 Mi, 8192 x 8192. The header is
// read first (stbi_info) and a larger image is refused before decoding, so a small file
// that claims a huge size (a PNG or JPEG "bomb") cannot make stb_image allocate gigabytes.
inline constexpr int64_t kMaxImagePixels = int64_t(1) << 26;

// Decodes a whole file. A missing, unreadable, corrupt or truncated file, or one over
// kMaxImagePixels, throws a campo::Error naming the path and the reason (stb_image's).
DecodedImage decode_image_file(const std::string& path);
// The same on the bytes of an image file in memory, `name` standing for the path in
// messages: what a fuzzer calls.
DecodedImage decode_image(std::span<const uint8_t> bytes, const std::string& name = "<memory>");

// The cheap check: reads only the header. Returns true and the size when the decoder
// recognises the file and it is within kMaxImagePixels; otherwise false with the reason
// ("stb_image: <its reason>", "libjpeg-turbo: <its reason>", or the size) in *reason.
struct ImageFileInfo {
  int64_t height = 0, width = 0, channels = 0;
};
bool probe_image_file(const std::string& path, ImageFileInfo* info, std::string* reason);

// Writes images [N, C, H, W] with values in [-1, 1] as a PNG grid of `nrow` images per row
// with `padding` black pixels around each (torchvision's make_grid layout); grey for C = 1,
// RGB for C = 3; pixel = round(255 * clamp((x + 1) / 2, 0, 1)). Atomic: written to a
// temporary file in the same directory, then renamed over `path`.
void write_png_grid(const std::string& path, const Tensor& images, int nrow = 8, int padding = 2);

}  // namespace campo
