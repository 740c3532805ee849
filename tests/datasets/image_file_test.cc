// Image files through stb_image and libjpeg-turbo: decoding from memory matches decoding
// the file, an image over kMaxImagePixels is refused from its header, before anything is
// decoded, and the inputs the fuzzer found are refused with a reason.
#include "datasets/image_file.h"

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/datasets/idx_file_util.h"

// stb_image_write's implementation, private to this test (it writes the JPEGs read here).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
#pragma GCC diagnostic pop

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

// JPEG goes to libjpeg-turbo. The inputs that broke stb_image 2.27's JPEG decoder are
// refused with its reason (and replayed by FuzzReplayTest from fuzz/regressions/image).

TEST(ImageFileTest, JpegWithABogusHuffmanTableIsRefused) {
  TempDir dir;
  const std::string path = dir.file("huffman.jpg");
  write_file(path, jpeg({dht_segment(300), kFrame}));
  const std::string msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, path + ": cannot decode the image (libjpeg-turbo: Bogus Huffman "
                                   "table definition)"))
      << msg;
  ImageFileInfo info;
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, &info, &reason));
  EXPECT_TRUE(contains(reason, "libjpeg-turbo: Bogus Huffman table")) << reason;
  // A table after the frame header: the probe stops at the frame, decoding does not.
  write_file(path, jpeg({kFrame, dht_segment(257, 0x10)}));
  EXPECT_TRUE(contains(error_message([&] { decode_image_file(path); }), "Bogus Huffman"));
}

TEST(ImageFileTest, FillBytesBeforeTheJpegStartAreNotAJpeg) {
  // stb_image skipped 0xff fill bytes before SOI (the fuzzer's ff ff d8 file); a JPEG
  // starts with ff d8, so this is no known image type.
  TempDir dir;
  const std::string path = dir.file("fill.jpg");
  std::vector<uint8_t> bytes = jpeg({dht_segment(12), kFrame});
  bytes.insert(bytes.begin(), 0xff);
  write_file(path, bytes);
  EXPECT_TRUE(contains(error_message([&] { decode_image_file(path); }), "not of any known type"));
  std::string reason;
  EXPECT_FALSE(probe_image_file(path, nullptr, &reason));
}

// A quantisation table segment: table `id`, all 64 values 1.
std::vector<uint8_t> dqt_segment(uint8_t id) {
  std::vector<uint8_t> s = {0xff, 0xdb, 0, 67, id};
  s.insert(s.end(), 64, 1);
  return s;
}

// A scan header for kFrame's one component with DC and AC tables 0, and a few bytes of
// entropy-coded data.
const std::vector<uint8_t> kScan = {0xff, 0xda, 0, 8, 1, 1, 0x00, 0, 63, 0, 0x12, 0x34, 0x56};

TEST(ImageFileTest, JpegFrameWithAnUndefinedQuantisationTableIsRefused) {
  // stb_image 2.27 would have read never-initialised table memory.
  TempDir dir;
  const std::string path = dir.file("no-dqt.jpg");
  write_file(path,
             jpeg({dqt_segment(1), kFrame, dht_segment(12, 0x00), dht_segment(12, 0x10), kScan}));
  const std::string msg = error_message([&] { decode_image_file(path); });
  EXPECT_TRUE(contains(msg, "libjpeg-turbo: Quantization table 0x00 was not defined")) << msg;
}

// A 16 x 8 RGB JPEG from stb_image_write: left half red-ish, right half blue-ish.
std::vector<uint8_t> small_rgb_jpeg() {
  std::vector<uint8_t> rgb(16 * 8 * 3);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 16; ++x) {
      uint8_t* p = &rgb[size_t(y * 16 + x) * 3];
      p[0] = x < 8 ? 200 : 20;
      p[1] = 60;
      p[2] = x < 8 ? 30 : 220;
    }
  TempDir dir;
  const std::string path = dir.file("small.jpg");
  EXPECT_TRUE(stbi_write_jpg(path.c_str(), 16, 8, 3, rgb.data(), 95));
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ImageFileTest, JpegDecodesToRgbAndACutOffJpegIsAnError) {
  std::vector<uint8_t> bytes = small_rgb_jpeg();
  const DecodedImage img = decode_image(bytes, "small");
  ASSERT_EQ(img.height, 8);
  ASSERT_EQ(img.width, 16);
  ASSERT_EQ(img.channels, 3);
  const uint8_t* left = img.pixels.get() + (4 * 16 + 2) * 3;
  const uint8_t* right = img.pixels.get() + (4 * 16 + 13) * 3;
  EXPECT_NEAR(left[0], 200, 6);
  EXPECT_NEAR(left[2], 30, 6);
  EXPECT_NEAR(right[0], 20, 6);
  EXPECT_NEAR(right[2], 220, 6);
  // Cut inside the entropy-coded data: libjpeg-turbo's warning is an error here, not an
  // image whose rest is grey.
  bytes.resize(bytes.size() - 40);
  const std::string msg = error_message([&] { decode_image(bytes, "cut"); });
  EXPECT_TRUE(contains(msg, "cut: cannot decode the image (libjpeg-turbo: ")) << msg;
}

TEST(ImageFileTest, CmykJpegDecodesToRgb) {
  // Adobe CMYK JPEGs store ink inverted (255 = none): R = C * K / 255.
  std::vector<uint8_t> cmyk(8 * 8 * 4);
  for (size_t i = 0; i < 64; ++i) {
    cmyk[4 * i + 0] = 255;  // no cyan
    cmyk[4 * i + 1] = 128;  // half magenta
    cmyk[4 * i + 2] = 255;  // no yellow
    cmyk[4 * i + 3] = 200;  // some black
  }
  tjhandle tj = tjInitCompress();
  ASSERT_NE(tj, nullptr);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(tj, cmyk.data(), 8, 0, 8, TJPF_CMYK, &out, &size, TJSAMP_444, 100, 0), 0)
      << tjGetErrorStr2(tj);
  const std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  const DecodedImage img = decode_image(bytes, "cmyk");
  ASSERT_EQ(img.channels, 3);
  const uint8_t* p = img.pixels.get() + 27 * 3;
  EXPECT_NEAR(p[0], 200, 3);
  EXPECT_NEAR(p[1], 128 * 200 / 255, 3);
  EXPECT_NEAR(p[2], 200, 3);
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
