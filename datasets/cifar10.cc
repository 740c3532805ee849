#include "datasets/cifar10.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "datasets/synthetic.h"
#include "runtime/file_check.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kPixelBytes = kCifar10RecordBytes - 1;

}  // namespace

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {
      "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};
  return names;
}

std::vector<std::string> cifar10_split_files(const std::string& dir, const std::string& split) {
  CAMPO_CHECK(split == "train" || split == "test", "cifar10: unknown split '", split,
              "' (expected train or test)");
  std::error_code ec;
  CAMPO_CHECK(fs::is_directory(dir, ec), "cifar10: ", dir, ": no such directory");
  fs::path base(dir);
  // The archive unpacks to cifar-10-batches-bin/; accept its parent too.
  if (!fs::exists(base / "test_batch.bin", ec) && !fs::exists(base / "data_batch_1.bin", ec) &&
      fs::is_directory(base / "cifar-10-batches-bin", ec))
    base /= "cifar-10-batches-bin";
  std::vector<std::string> names;
  if (split == "train")
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    names.push_back("test_batch.bin");
  std::vector<std::string> files;
  for (const std::string& n : names) {
    const fs::path p = base / n;
    if (!fs::is_regular_file(p, ec)) {
      const bool is_python =
          fs::exists(base / "data_batch_1", ec) || fs::exists(base / "test_batch", ec);
      CAMPO_FAIL("cifar10: cannot find ", p.string(),
                 is_python ? "; this directory holds the python (pickle) version of CIFAR-10 "
                             "(data_batch_1 without .bin), which is not supported: use the "
                             "binary version, cifar-10-binary.tar.gz"
                           : "; expected the binary version (cifar-10-binary.tar.gz): "
                             "data_batch_1.bin .. data_batch_5.bin and test_batch.bin");
    }
    files.push_back(p.string());
  }
  return files;
}

Cifar10Dataset::Cifar10Dataset(const std::vector<std::string>& files, const Cifar10Options& options,
                               std::string split)
    : name_(split.empty() ? options.name : options.name + "/" + split), seed_(options.seed) {
  transform_.crop = options.image_size ? options.image_size : kCifar10Side;
  transform_.resize = options.resize ? options.resize : transform_.crop;
  transform_.padding = options.padding;
  transform_.random = options.augment;
  transform_.channels = 3;
  transform_.mean = options.mean.empty() ? kCifar10Mean : options.mean;
  transform_.stddev = options.stddev.empty() ? kCifar10Std : options.stddev;
  transform_.validate(name_);
  CAMPO_CHECK(!files.empty(), name_, ": no batch files given");

  for (const std::string& path : files) {
    require_input_file(path, "CIFAR-10 batch file");  // a FIFO would hang the read
    std::error_code ec;
    const uintmax_t bytes = fs::file_size(path, ec);
    CAMPO_CHECK(!ec, path, ": cannot read the size: ", ec.message());
    CAMPO_CHECK(bytes <= kMaxCifar10BatchBytes, path, ": ", bytes,
                " bytes, too large for a CIFAR-10 batch (one holds 10000 records, ",
                10000 * kCifar10RecordBytes, " bytes)");
    std::vector<uint8_t> raw(static_cast<size_t>(bytes));
    std::ifstream in(path, std::ios::binary);
    CAMPO_CHECK(in.good(), path, ": cannot open: ", std::strerror(errno));
    in.read(reinterpret_cast<char*>(raw.data()), std::streamsize(bytes));
    CAMPO_CHECK(in.gcount() == std::streamsize(bytes), path, ": read ", in.gcount(), " of ", bytes,
                " bytes");
    Cifar10Batch batch = parse_cifar10_batch(raw, path);
    labels_.insert(labels_.end(), batch.labels.begin(), batch.labels.end());
    pixels_.insert(pixels_.end(), batch.pixels.begin(), batch.pixels.end());
  }
}

Cifar10Batch parse_cifar10_batch(std::span<const uint8_t> bytes, const std::string& name) {
  const size_t size = bytes.size();
  CAMPO_CHECK(size > 0 && size % size_t(kCifar10RecordBytes) == 0, name,
              ": truncated or not a CIFAR-10 binary batch: ", size,
              " bytes is not a whole number of ", kCifar10RecordBytes,
              "-byte records (1 label byte + 3072 pixel bytes)",
              size % size_t(kCifar10RecordBytes + 1) == 0
                  ? " (3074-byte records would be CIFAR-100, which is not supported)"
                  : "");
  CAMPO_CHECK(size <= kMaxCifar10BatchBytes, name, ": ", size,
              " bytes, too large for a CIFAR-10 batch");
  const size_t records = size / size_t(kCifar10RecordBytes);
  Cifar10Batch batch;
  batch.labels.resize(records);
  batch.pixels.resize(records * size_t(kPixelBytes));
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* rec = bytes.data() + r * size_t(kCifar10RecordBytes);
    CAMPO_CHECK(rec[0] <= 9, name, ": record ", r, " has label ", int(rec[0]),
                "; CIFAR-10 labels are 0..9");
    batch.labels[r] = rec[0];
    std::memcpy(batch.pixels.data() + r * size_t(kPixelBytes), rec + 1, size_t(kPixelBytes));
  }
  return batch;
}

const uint8_t* Cifar10Dataset::raw_pixels(int64_t index) const {
  check_index(index);
  return pixels_.data() + index * kPixelBytes;
}

void Cifar10Dataset::get(int64_t index, float* image, int32_t* label) const {
  get_for_epoch(index, 0, image, label);
}

void Cifar10Dataset::get_for_epoch(int64_t index, int epoch, float* image, int32_t* label) const {
  const ImageView view = ImageView::planar(raw_pixels(index), kCifar10Side, kCifar10Side, 3);
  Rng rng(mix_seed(mix_seed(seed_ ^ 0xc1fa10ull, uint64_t(int64_t(epoch))), uint64_t(index)));
  transform_image(view, transform_, rng, image);
  *label = labels_[size_t(index)];
}

std::shared_ptr<Cifar10Dataset> load_cifar10_split(const std::string& dir, const std::string& split,
                                                   const Cifar10Options& options) {
  return std::make_shared<Cifar10Dataset>(cifar10_split_files(dir, split), options, split);
}

}  // namespace campo
