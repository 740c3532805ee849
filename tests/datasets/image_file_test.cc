// The image decoder's own checks in front of stb_image (datasets/image_file.cc), both for
// inputs found by fuzz/image_fuzz.cc (kept in fuzz/regressions/image/): JPEG Huffman
// tables of more than 256 codes, which stb_image 2.27 writes past its table for, PNM
// header numbers beyond int, which it overflows on, and headers of more than
// kMaxImagePixels, which it allocates for before reading a pixel.
#include "datasets/image_file.h"

#include <gtest/gtest.h>

#include <fstream>
#include <vector>

#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::TempDir;

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A DHT segment holding one table of class/id `table` whose 16 code counts sum to `codes`.
std::vector<uint8_t> dht_segment(int codes, uint8_t table = 0x00) {
  const int length = 2 + 17 + codes;
  std::vector<uint8_t> s = {0xff, 0xc4, uint8_t(length >> 8), uint8_t(length & 0xff), table};
  // Up to 255 codes of 8 bits, the rest of 9 (a complete prefix code for 256 codes).
  for (int bits = 1; bits <= 16; ++bits)
    s.push_back(uint8_t(bits == 8   ? std::min(codes, 255)
                        : bits == 9 ? std::max(codes - 255, 0)
                                    : 0));
  for (int i = 0; i < codes; ++i) s.push_back(uint8_t(i));
  return s;
}

// A baseline frame header: 8x8, one grey component using tables 0.
const std::vector<uint8_t> kFrame = {0xff, 0xc0, 0, 11, 8, 0, 8, 0, 8, 1, 1, 0x11, 0};

std::vector<uint8_t> jpeg(const std::vector<std::vector<uint8_t>>& segments) {
  std::vector<uint8_t> out = {0xff, 0xd8};
  for (const auto& s : segments) out.insert(out.end(), s.begin(), s.end());
  out.insert(out.end(), {0xff, 0xd9});
  return out;
}

TEST(ImageFileTest, JpegHuffmanTableOfMoreThan256CodesIsRefused) {
  TempDir dir;
  const std::string path = dir.file("huffman.jpg");
  write_file(path, jpeg({dht_segment(300), kFrame}));
  const std::string msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, path)) << msg;
  EXPECT_TRUE(contains(msg, "Huffman table (DHT) declares 300 codes, at most 256")) << msg;
  ImageFileInfo info;
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, &info, &reason));
  EXPECT_TRUE(contains(reason, "declares 300 codes")) << reason;
}

TEST(ImageFileTest, JpegHuffmanTableIsCheckedAfterFillBytesBeforeTheStart) {
  // stb_image skips 0xff fill bytes before SOI too (the fuzzer's ff ff d8 file).
  TempDir dir;
  const std::string path = dir.file("fill.jpg");
  std::vector<uint8_t> bytes = jpeg({dht_segment(300), kFrame});
  bytes.insert(bytes.begin(), 0xff);
  write_file(path, bytes);
  EXPECT_TRUE(contains(error_message([&] { decode_image_file(path); }), "declares 300 codes"));
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, nullptr, &reason));
  EXPECT_TRUE(contains(reason, "declares 300 codes")) << reason;
}

TEST(ImageFileTest, JpegHuffmanTableAfterTheFrameHeaderIsCheckedWhenDecoding) {
  // stb_image's header probe stops at the frame header, so the probe cannot see this
  // table (and need not: stb_image does not read it either); decoding does.
  TempDir dir;
  const std::string path = dir.file("late.jpg");
  write_file(path, jpeg({kFrame, dht_segment(257, 0x10)}));
  const std::string msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, "declares 257 codes")) << msg;
}

TEST(ImageFileTest, JpegHuffmanTableOf256CodesPassesTheCheck) {
  // 256 codes is the most a table can have: the header probes as an 8x8 grey JPEG.
  TempDir dir;
  const std::string path = dir.file("full.jpg");
  write_file(path, jpeg({dht_segment(256), kFrame}));
  ImageFileInfo info;
  std::string reason;
  EXPECT_TRUE(probe_image_file(path, &info, &reason)) << reason;
  EXPECT_EQ(info.height, 8);
  EXPECT_EQ(info.width, 8);
}

// A GIF's logical screen descriptor (no colour table): enough for stb_image's header probe.
std::vector<uint8_t> gif_header(int width, int height) {
  return {'G',
          'I',
          'F',
          '8',
          '9',
          'a',
          uint8_t(width & 0xff),
          uint8_t(width >> 8),
          uint8_t(height & 0xff),
          uint8_t(height >> 8),
          0,
          0,
          0};
}

TEST(ImageFileTest, ImageLargerThanTheLimitIsRefusedFromItsHeader) {
  // The fuzzer's 10-byte GIF: a 14395 x 24889 header, which stb_image would allocate three
  // 1.4 GB buffers for before finding no pixels.
  TempDir dir;
  const std::string path = dir.file("huge.gif");
  write_file(path, {'G', 'I', 'F', '8', '9', 'a', ';', '8', '9', 'a'});
  const std::string msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, path + ": cannot decode the image (14395x24889 is 358277155 pixels, "
                                   "more than the 67108864"))
      << msg;
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, nullptr, &reason));
  EXPECT_TRUE(contains(reason, "14395x24889 is 358277155 pixels")) << reason;
}

TEST(ImageFileTest, ImageAtTheLimitProbes) {
  TempDir dir;
  const std::string at = dir.file("at.gif"), above = dir.file("above.gif");
  write_file(at, gif_header(8192, 8192));
  write_file(above, gif_header(8193, 8192));
  ImageFileInfo info;
  std::string reason;
  EXPECT_TRUE(probe_image_file(at, &info, &reason)) << reason;
  EXPECT_EQ(info.width * info.height, kMaxImagePixels);
  EXPECT_FALSE(probe_image_file(above, &info, &reason));
  EXPECT_TRUE(contains(reason, "8193x8192")) << reason;
}

TEST(ImageFileTest, PnmHeaderNumberBeyondIntIsRefused) {
  TempDir dir;
  const std::string big = dir.file("big.ppm"), max = dir.file("max.pgm");
  const std::string header = "P6\n# comment\n4 2147483648\n255\n";
  write_file(big, std::vector<uint8_t>(header.begin(), header.end()));
  const std::string msg = error_message([&] { decode_image_file(big); });
  EXPECT_TRUE(contains(msg, big + ": cannot decode the image (corrupt PNM header: a number "
                                  "above 2147483647)"))
      << msg;
  std::string reason;
  EXPECT_FALSE(probe_image_file(big, nullptr, &reason));
  EXPECT_TRUE(contains(reason, "a number above 2147483647")) << reason;
  // 2^31 - 1 itself reads (and is then too large an image, which is the next check).
  const std::string at = "P5 1 2147483647 255\n";
  write_file(max, std::vector<uint8_t>(at.begin(), at.end()));
  EXPECT_FALSE(probe_image_file(max, nullptr, &reason));
  EXPECT_TRUE(contains(reason, "1x2147483647 is 2147483647 pixels")) << reason;
}

TEST(ImageFileTest, MissingFileIsAnErrorNamingIt) {
  const std::string msg = error_message([&] { decode_image_file("/nonexistent/x.png"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/x.png: cannot decode the image (cannot open: ")) << msg;
}

}  // namespace
}  // namespace campo
