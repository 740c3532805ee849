// The IDX format of MNIST and Fashion-MNIST, plain or gzip-compressed (zlib reads both).
//
// An IDX file is a big-endian header (magic 0x0000TTDD: TT = element type, 0x08 = ubyte;
// DD = number of dimensions; then one u32 per dimension) followed by the raw elements.
// Images are magic 0x00000803 ([count, rows, cols]), labels 0x00000801 ([count]).
//
// IdxDataset decodes a whole split once and caches it as normalised f32 pixels,
// x = (p / 255 - mean) / stddev, so that get() is a memcpy. An optional square resize
// (bilinear) is applied on the fly in get() from the cached native-resolution pixels, and
// an optional channel replication (1 -> 3) copies the plane; both are cheap next to a
// training step and keep the cache at 4 bytes per native pixel.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datasets/dataset.h"

namespace campo {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
};

// The most payload bytes one IDX file may announce (4 GiB of pixels, 16 GiB once cached as
// f32; EMNIST, the largest IDX set, has 0.6 GiB). It bounds what a lying header, or a
// gzip stream that inflates a thousandfold, can make the reader allocate.
inline constexpr uint64_t kMaxIdxBytes = uint64_t(4) << 30;
// The longest image side accepted (MNIST's is 28); keeps resize taps and shapes in int32.
inline constexpr int64_t kMaxIdxSide = 65536;

// Read one IDX file, plain or gzip. Every malformed input (missing file, not a regular
// file, wrong magic, short header, truncated data, trailing bytes, corrupt gzip stream, a
// payload over kMaxIdxBytes) throws a campo::Error whose message starts with the path. A
// plain file's size is checked against its header before anything is allocated; trailing
// data is counted up to 1 MiB ("more than 1048576 unexpected bytes").
IdxImages read_idx_images(const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

// The same parsers on bytes in memory (plain or gzip), `name` standing for the path in
// messages: what a fuzzer calls. They go through exactly the code of the file readers.
IdxImages parse_idx_images(std::span<const uint8_t> bytes, const std::string& name = "<memory>");
std::vector<uint8_t> parse_idx_labels(std::span<const uint8_t> bytes,
                                      const std::string& name = "<memory>");

struct IdxOptions {
  std::string name = "fashion-mnist";  // for messages and Dataset::name()
  float mean = 0.2860f;                // Fashion-MNIST's; MNIST's is 0.1307
  float stddev = 0.3530f;              // Fashion-MNIST's; MNIST's is 0.3081
  int num_classes = 10;
  int image_size = 0;  // 0: native (28); otherwise a square bilinear resize to this size
  int channels = 1;    // 1, or 3 to replicate the grey plane (for models built for RGB)
  // Appended to the missing-file error: where the files can be had.
  std::string missing_hint =
      "`apt-get install dataset-fashion-mnist` provides it (or pass --data-dir)";
};

class IdxDataset final : public Dataset {
 public:
  // Decodes both files; checks counts match and every label is < num_classes.
  IdxDataset(const std::string& images_path, const std::string& labels_path,
             const IdxOptions& options, std::string split = "");

  int64_t size() const override { return count_; }
  Shape image_shape() const override { return {channels_, out_h_, out_w_}; }
  int num_classes() const override { return num_classes_; }
  std::string name() const override { return name_; }
  void get(int64_t index, float* image, int32_t* label) const override;

  // The cached native-resolution normalised plane of one sample (rows * cols floats).
  const float* native_pixels(int64_t index) const;
  int64_t native_rows() const { return rows_; }
  int64_t native_cols() const { return cols_; }

 private:
  // One output coordinate of the bilinear resize: src = w0 * in[i0] + w1 * in[i1].
  struct Tap {
    int32_t i0, i1;
    float w0, w1;
  };

  std::string name_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
  int64_t channels_ = 1, out_h_ = 0, out_w_ = 0;
  int num_classes_ = 10;
  std::vector<float> pixels_;  // count * rows * cols, normalised
  std::vector<int32_t> labels_;
  std::vector<Tap> taps_y_, taps_x_;  // empty when not resizing
};

// Finds a split's files in `dir`: "train" -> train-images-idx3-ubyte[.gz] and
// train-labels-idx1-ubyte[.gz]; "test" -> t10k-... . A missing file is an error naming the
// paths tried and options.missing_hint.
std::shared_ptr<IdxDataset> load_idx_split(const std::string& dir, const std::string& split,
                                           const IdxOptions& options = {});

}  // namespace campo
