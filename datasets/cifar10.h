// CIFAR-10, binary version (cifar-10-binary.tar.gz): data_batch_1.bin .. data_batch_5.bin
// (train, 10000 records each) and test_batch.bin (test, 10000) in one directory (or in
// its cifar-10-batches-bin/ subfolder, as the archive unpacks). A record is 1 label byte
// (0..9) then 3072 pixel bytes: the R, G and B planes of a 32x32 image, rows top first.
// The python (pickle) version is not supported.
//
// The whole split is kept as bytes (3 KB per image, 150 MB for train) and each get()
// preprocesses one image (datasets/image_transform.h): an optional resize, then a crop of
// image_size, normalised with CIFAR-10's per-channel mean and std. With `augment`, the
// standard recipe: `padding` (4) pixels of black border, a random 32x32 (image_size)
// crop and a random horizontal flip, drawn from an Rng seeded by (seed, epoch, index).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/image_transform.h"

namespace campo {

inline constexpr int64_t kCifar10Side = 32;
inline constexpr int64_t kCifar10RecordBytes = 1 + 3 * kCifar10Side * kCifar10Side;  // 3073

// The largest batch file read (a real one holds 10000 records, 30 MB): a bound on what a
// wrong path can make the reader allocate.
inline constexpr uint64_t kMaxCifar10BatchBytes = uint64_t(1) << 30;

// One batch file's records, parsed from its bytes: a size that is not a whole number of
// records, over kMaxCifar10BatchBytes, or a label above 9 throws a campo::Error starting
// with `name`. What the data set's constructor uses, and what a fuzzer calls.
struct Cifar10Batch {
  std::vector<int32_t> labels;
  std::vector<uint8_t> pixels;  // records * 3072: R, G, B planes of 32x32
};
Cifar10Batch parse_cifar10_batch(std::span<const uint8_t> bytes,
                                 const std::string& name = "<memory>");

// airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck.
const std::vector<std::string>& cifar10_class_names();

struct Cifar10Options {
  std::string name = "cifar10";
  int64_t image_size = 0;           // side of the output; 0: 32
  int64_t resize = 0;               // the image's side before cropping; 0: image_size
  int64_t padding = 4;              // black border before the random crop (augment only)
  bool augment = false;             // random crop + horizontal flip
  std::vector<float> mean, stddev;  // per channel; empty: CIFAR-10's
  uint64_t seed = 0;                // of the augmentation
};

class Cifar10Dataset final : public Dataset {
 public:
  // Reads the batch files in order. A missing file or one that is not a regular file (a
  // FIFO), a size that is not a whole number of 3073-byte records or over
  // kMaxCifar10BatchBytes, or a label above 9 throws a campo::Error naming the file.
  Cifar10Dataset(const std::vector<std::string>& files, const Cifar10Options& options,
                 std::string split = "");

  int64_t size() const override { return int64_t(labels_.size()); }
  Shape image_shape() const override { return {3, transform_.crop, transform_.crop}; }
  int num_classes() const override { return 10; }
  std::string name() const override { return name_; }
  void get(int64_t index, float* image, int32_t* label) const override;
  void get_for_epoch(int64_t index, int epoch, float* image, int32_t* label) const override;

  // The raw planes of one image (3 * 32 * 32 bytes, R then G then B).
  const uint8_t* raw_pixels(int64_t index) const;
  const ImageTransform& transform() const { return transform_; }

 private:
  std::string name_;
  std::vector<uint8_t> pixels_;  // size * 3072
  std::vector<int32_t> labels_;
  ImageTransform transform_;
  uint64_t seed_ = 0;
};

// The files of split "train" or "test" in `dir`; a missing file is an error naming the
// paths, and saying so when the directory holds the unsupported python version.
std::vector<std::string> cifar10_split_files(const std::string& dir, const std::string& split);

std::shared_ptr<Cifar10Dataset> load_cifar10_split(const std::string& dir, const std::string& split,
                                                   const Cifar10Options& options = {});

}  // namespace campo
