// Image files through stb_image: decoding from memory matches decoding the file, and an
// image over kMaxImagePixels is refused from its header, before anything is decoded.
#include "datasets/image_file.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::TempDir;

// A binary PGM (P5) of the given size, header and the pixels `data` (possibly fewer than
// the header announces).
std::vector<uint8_t> pgm(int64_t w, int64_t h, const std::vector<uint8_t>& data) {
  const std::string header = "P5\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n";
  std::vector<uint8_t> out(header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

TEST(ImageFile, DecodesBytesInMemoryLikeAFile) {
  TempDir dir;
  const std::vector<uint8_t> bytes = pgm(3, 2, {0, 10, 20, 30, 40, 50});
  testing::write_bytes(dir.file("a.pgm"), bytes, false);
  const DecodedImage from_file = decode_image_file(dir.file("a.pgm"));
  const DecodedImage from_memory = decode_image(bytes, "a");
  for (const DecodedImage* img : {&from_file, &from_memory}) {
    EXPECT_EQ(img->width, 3);
    EXPECT_EQ(img->height, 2);
    EXPECT_EQ(img->channels, 1);
    EXPECT_EQ(img->pixels.get()[5], 50);
  }
  EXPECT_TRUE(contains(error_message([] {
                         decode_image(std::vector<uint8_t>{1, 2, 3});
                       }),
                       "<memory>: cannot decode the image (stb_image: "));
  EXPECT_TRUE(contains(error_message([] { decode_image({}, "empty"); }), "empty: cannot decode"));
}

TEST(ImageFile, AnImageOverThePixelLimitIsRefusedFromItsHeader) {
  // 10000 x 10000 announced in a 30-byte file: stb_image would allocate 100 MB first.
  TempDir dir;
  const std::vector<uint8_t> bomb = pgm(10000, 10000, {1, 2, 3});
  const std::string path = dir.file("bomb.pgm");
  testing::write_bytes(path, bomb, false);
  const std::string why = "the image is 10000x10000 pixels, more than the 67108864";
  EXPECT_TRUE(contains(error_message([&] { decode_image_file(path); }), path + ": " + why));
  EXPECT_TRUE(contains(error_message([&] { decode_image(bomb, "bomb"); }), "bomb: " + why));
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, nullptr, &reason));
  EXPECT_TRUE(contains(reason, "10000x10000 pixels, more than the 67108864")) << reason;
  // At the limit, 8192 x 8192, the header passes and the missing data is the problem.
  const std::vector<uint8_t> edge = pgm(8192, 8192, {1, 2, 3});
  EXPECT_TRUE(contains(error_message([&] { decode_image(edge, "edge"); }),
                       "edge: truncated image: the PNM header announces 8192x8192 pixels"));
}

TEST(ImageFile, ATruncatedPnmIsAnErrorNotUninitialisedPixels) {
  // stb_image 2.27 returns such an image without an error, its pixels never written.
  TempDir dir;
  testing::write_bytes(dir.file("cut.pgm"), pgm(3, 2, {0, 10, 20}), false);
  EXPECT_TRUE(contains(error_message([&] { decode_image_file(dir.file("cut.pgm")); }),
                       dir.file("cut.pgm") + ": truncated image: the PNM header announces 3x2 "
                                             "pixels (6 bytes), 3 bytes follow it"));
  // Comments in the header, a colour PPM and 16-bit samples are measured right.
  const std::string commented = "P5\n# made by hand\n3 2\n# max\n255\n";
  std::vector<uint8_t> bytes(commented.begin(), commented.end());
  for (uint8_t v : {0, 10, 20, 30, 40, 50}) bytes.push_back(v);
  EXPECT_EQ(decode_image(bytes).pixels.get()[5], 50);
  bytes.pop_back();
  EXPECT_TRUE(contains(error_message([&] { decode_image(bytes); }), "(6 bytes), 5 bytes follow"));
  const std::string colour = "P6 1 2 65535\n";
  std::vector<uint8_t> wide(colour.begin(), colour.end());
  wide.resize(wide.size() + 1 * 2 * 3 * 2 - 1, 7);
  EXPECT_TRUE(contains(error_message([&] { decode_image(wide); }), "(12 bytes), 11 bytes follow"));
  wide.push_back(7);
  EXPECT_EQ(decode_image(wide).channels, 3);
}

}  // namespace
}  // namespace campo
