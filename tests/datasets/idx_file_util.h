// Test helpers: temporary directories and small IDX files written plain or with gzip.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/check.h"
#include "tests/test_util.h"

namespace campo::testing {

inline std::vector<uint8_t> idx_bytes(uint32_t magic, const std::vector<uint32_t>& dims,
                                      const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    }
    ASSERT_EQ(gzclose(f), Z_OK);
  } else {
    std::ofstream os(path, std::ios::binary);
    os.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    ASSERT_TRUE(os.good()) << path;
  }
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream is(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(is), {});
}

// Writes an image and a label IDX file for one split ("train" or "t10k" prefix).
inline void write_idx_split(const TempDir& dir, const std::string& prefix, uint32_t count,
                            uint32_t rows, uint32_t cols, const std::vector<uint8_t>& pixels,
                            const std::vector<uint8_t>& labels, bool gzip) {
  const std::string ext = gzip ? ".gz" : "";
  write_bytes(dir.file(prefix + "-images-idx3-ubyte" + ext),
              idx_bytes(0x00000803, {count, rows, cols}, pixels), gzip);
  write_bytes(dir.file(prefix + "-labels-idx1-ubyte" + ext),
              idx_bytes(0x00000801, {uint32_t(labels.size())}, labels), gzip);
}

}  // namespace campo::testing
