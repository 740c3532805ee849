// Image files through stb_image: decoding from memory matches decoding the file, and an
// image over kMaxImagePixels is refused from its header, before anything is decoded.
#include "datasets/image_file.h"

#include <gtest/gtest.h>

#include <fstream>
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
  const std::string why =
      "cannot decode the image (10000x10000 is 100000000 pixels, more than the 67108864";
  EXPECT_TRUE(contains(error_message([&] { decode_image_file(path); }), path + ": " + why));
  EXPECT_TRUE(contains(error_message([&] { decode_image(bomb, "bomb"); }), "bomb: " + why));
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, nullptr, &reason));
  EXPECT_TRUE(contains(reason, "10000x10000 is 100000000 pixels, more than the 67108864"))
      << reason;
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

// Inputs the fuzzer (fuzz/image_fuzz.cc) found stb_image 2.27 mishandling.

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
  EXPECT_TRUE(contains(msg, "Huffman table (DHT) declares 300 codes, at most 255")) << msg;
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

TEST(ImageFileTest, JpegHuffmanTableOf256CodesIsRefused) {
  // stb_image 2.27 marks "no short code" with symbol index 255, so the 256th code of a full
  // table, 9 bits long here, decodes as another symbol (the fuzzer's assertion failure).
  TempDir dir;
  const std::string path = dir.file("full.jpg");
  write_file(path, jpeg({dht_segment(256), kFrame}));
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, nullptr, &reason));
  EXPECT_TRUE(contains(reason, "declares 256 codes, at most 255 are supported")) << reason;
}

TEST(ImageFileTest, JpegHuffmanTableOf255CodesPassesTheCheck) {
  TempDir dir;
  const std::string path = dir.file("255.jpg");
  write_file(path, jpeg({dht_segment(255), kFrame}));
  ImageFileInfo info;
  std::string reason;
  EXPECT_TRUE(probe_image_file(path, &info, &reason)) << reason;
  EXPECT_EQ(info.height, 8);
  EXPECT_EQ(info.width, 8);
}

// A quantisation table segment: table `id`, all 64 values 1.
std::vector<uint8_t> dqt_segment(uint8_t id) {
  std::vector<uint8_t> s = {0xff, 0xdb, 0, 67, id};
  s.insert(s.end(), 64, 1);
  return s;
}

// A scan header for kFrame's one component, with DC table `dc` and AC table `ac`, and a
// few bytes of entropy-coded data.
std::vector<uint8_t> scan(int dc, int ac) {
  return {0xff, 0xda, 0, 8, 1, 1, uint8_t(dc << 4 | ac), 0, 63, 0, 0x12, 0x34, 0x56};
}

TEST(ImageFileTest, JpegScanWithAnUndefinedHuffmanTableIsRefused) {
  // stb_image 2.27 would decode with its never-initialised table memory.
  TempDir dir;
  const std::string path = dir.file("no-ac.jpg");
  write_file(path, jpeg({dqt_segment(0), kFrame, dht_segment(12, 0x00), scan(0, 0)}));
  std::string msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, "a scan uses Huffman table AC 0, which no DHT segment before it "
                            "defines"))
      << msg;
  write_file(path, jpeg({dqt_segment(0), kFrame, dht_segment(12, 0x10), scan(0, 0)}));
  msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, "Huffman table DC 0, which no DHT")) << msg;
  // With both tables (and a table 1 the scan does not use), only stb_image's own checks
  // are left: the entropy-coded data is nonsense, but no table is missing.
  write_file(path, jpeg({dqt_segment(0), kFrame, dht_segment(12, 0x00), dht_segment(12, 0x10),
                         scan(0, 0)}));
  try {
    decode_image_file(path);
  } catch (const Error& e) {
    EXPECT_FALSE(contains(e.what(), "which no DHT")) << e.what();
  }
}

TEST(ImageFileTest, JpegFrameWithAnUndefinedQuantisationTableIsRefused) {
  TempDir dir;
  const std::string path = dir.file("no-dqt.jpg");
  write_file(path, jpeg({dqt_segment(1), kFrame, dht_segment(12, 0x00), dht_segment(12, 0x10),
                         scan(0, 0)}));
  const std::string msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, "the frame uses quantisation table 0, which no DQT segment before "
                            "its first scan defines"))
      << msg;
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

TEST(ImageFileTest, PngChunkLongerThanTheFileIsRefusedBeforeDecoding) {
  // fuzz/regressions/image/png-overlong-idat-oom.png: an IDAT chunk declaring far more bytes
  // than the file holds, for which stb_image 2.27 reallocated 2 GB before reading it.
  std::ifstream in(
      std::string(CAMPO_SOURCE_DIR) + "/fuzz/regressions/image/png-overlong-idat-oom.png",
      std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 8u);
  const std::string msg = error_message([&] { decode_image(bytes, "idat.png"); });
  EXPECT_TRUE(contains(msg, "idat.png: cannot decode the image (corrupt PNG: a chunk declares "))
      << msg;
  // A valid PNG (the seed corpus's) still decodes: every chunk fits.
  std::ifstream seed_in(std::string(CAMPO_SOURCE_DIR) + "/fuzz/corpus/image/rgb.png",
                        std::ios::binary);
  std::vector<uint8_t> seed((std::istreambuf_iterator<char>(seed_in)), {});
  ASSERT_FALSE(seed.empty());
  EXPECT_NO_THROW(decode_image(seed, "seed.png"));
}

TEST(ImageFileTest, MissingFileIsAnErrorNamingIt) {
  const std::string msg = error_message([&] { decode_image_file("/nonexistent/x.png"); });
  EXPECT_TRUE(contains(msg, "/nonexistent/x.png: cannot decode the image (cannot open: ")) << msg;
}

}  // namespace
}  // namespace campo
