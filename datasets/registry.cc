#include "datasets/registry.h"

#include <filesystem>
#include <tuple>

#include "datasets/cifar10.h"
#include "datasets/idx.h"
#include "datasets/image_folder.h"
#include "datasets/synthetic.h"
#include "datasets/text.h"
#include "datasets/text_file.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

// The per-channel normalisation the options ask for; empty when they leave it to the
// data set.
void channel_stats(const std::string& who, const DatasetOptions& o, int channels,
                   std::vector<float>* mean, std::vector<float>* stddev) {
  auto pick = [&](const std::vector<float>& per_channel, const std::optional<float>& all,
                  const char* what) {
    if (!per_channel.empty()) {
      CAMPO_CHECK(int(per_channel.size()) == channels, who, ": ", per_channel.size(), " ", what,
                  " values given for ", channels, " channels");
      return per_channel;
    }
    return all ? std::vector<float>(size_t(channels), *all) : std::vector<float>{};
  };
  *mean = pick(o.channel_mean, o.mean, "mean");
  *stddev = pick(o.channel_stddev, o.stddev, "std");
}

// The image options only cifar10 and folders understand: an error when set elsewhere.
void reject_image_options(const std::string& name, const DatasetOptions& o) {
  const char* what = o.augment.value_or(false) ? "augmentation"
                     : o.resize                ? "resize"
                     : o.padding               ? "crop padding"
                     : o.skip_bad              ? "skip_bad"
                     : o.holdout != 0          ? "a hold-out split"
                                               : nullptr;
  CAMPO_CHECK(what == nullptr, name, ": ", what,
              " is not available for this data set (only for cifar10 and folder:PATH)");
}

std::shared_ptr<Dataset> open_idx(const std::string& name, const std::string& split,
                                  const DatasetOptions& options) {
  reject_image_options(name, options);
  IdxOptions idx;
  idx.name = name;
  idx.image_size = options.image_size;
  idx.channels = options.channels ? options.channels : 1;
  std::string dir = options.data_dir;
  std::optional<float> mean = options.mean, stddev = options.stddev;
  // The grey plane is normalised before it is replicated: one statistic for all channels.
  for (auto [per_channel, scalar, what] : {std::tuple{&options.channel_mean, &mean, "mean"},
                                           std::tuple{&options.channel_stddev, &stddev, "std"}}) {
    if (per_channel->empty()) continue;
    for (float v : *per_channel)
      CAMPO_CHECK(v == per_channel->front(), name, ": per-channel ", what,
                  " values must be equal: the channels replicate one grey plane");
    *scalar = per_channel->front();
  }
  if (name == "fashion-mnist") {
    idx.mean = mean.value_or(0.2860f);
    idx.stddev = stddev.value_or(0.3530f);
    if (dir.empty()) dir = kFashionMnistDir;
  } else {
    idx.mean = mean.value_or(0.1307f);
    idx.stddev = stddev.value_or(0.3081f);
    idx.missing_hint =
        "download the four MNIST IDX files (train-images-idx3-ubyte.gz, ...) into it";
    CAMPO_CHECK(!dir.empty(), "mnist: no data directory given; no package installs MNIST, so ",
                "pass --data-dir pointing at the four IDX files (train-images-idx3-ubyte.gz, ",
                "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, ",
                "t10k-labels-idx1-ubyte.gz)");
  }
  return load_idx_split(dir, split, idx);
}

std::shared_ptr<Dataset> open_cifar10(const std::string& split, const DatasetOptions& options) {
  CAMPO_CHECK(!options.data_dir.empty(), "cifar10: no data directory given; no package ",
              "installs CIFAR-10, so pass --data-dir pointing at the binary version ",
              "(cifar-10-binary.tar.gz unpacked: data_batch_1.bin .. data_batch_5.bin, ",
              "test_batch.bin)");
  CAMPO_CHECK(options.channels == 0 || options.channels == 3,
              "cifar10: channels must be 3 (colour images), got ", options.channels);
  CAMPO_CHECK(options.image_size >= 0 && options.resize >= 0,
              "cifar10: image size and resize must be >= 0");
  CAMPO_CHECK(!options.skip_bad && options.holdout == 0,
              "cifar10: skip_bad and hold-out splits are for image folders only");
  Cifar10Options c;
  c.image_size = options.image_size;
  c.resize = options.resize;
  c.padding = options.padding.value_or(4);
  c.augment = options.augment.value_or(split == "train");
  c.seed = options.seed;
  channel_stats("cifar10", options, 3, &c.mean, &c.stddev);
  return load_cifar10_split(options.data_dir, split, c);
}

std::shared_ptr<Dataset> open_folder(const std::string& name, const std::string& split,
                                     const DatasetOptions& options) {
  std::string root = name.size() > 7 ? name.substr(7) : "";  // after "folder:"
  if (name == "folder") {
    root = options.data_dir;
    CAMPO_CHECK(!root.empty(), "folder: no path given; use folder:PATH or pass --data-dir");
  } else {
    CAMPO_CHECK(!root.empty(), name, ": no path after 'folder:'");
    CAMPO_CHECK(options.data_dir.empty() || options.data_dir == root, name, ": two paths given (",
                root, " and the data directory ", options.data_dir, "); give one");
  }
  std::error_code ec;
  CAMPO_CHECK(fs::is_directory(root, ec), name, ": ", root, ": no such folder");
  const std::string who = "folder:" + root;

  ImageFolderOptions f;
  f.name = who + "/" + split;
  f.channels = options.channels ? options.channels : 3;
  CAMPO_CHECK(f.channels == 1 || f.channels == 3, who, ": channels must be 1 or 3, got ",
              f.channels);
  CAMPO_CHECK(options.image_size >= 0 && options.resize >= 0, who,
              ": image size and resize must be >= 0");
  f.image_size = options.image_size ? options.image_size : 224;
  f.resize = options.resize;
  f.padding = options.padding.value_or(0);
  f.augment = options.augment.value_or(split == "train");
  f.seed = options.seed;
  f.skip_bad = options.skip_bad;
  channel_stats(who, options, f.channels, &f.mean, &f.stddev);

  const fs::path path(root);
  const bool has_split_folders = fs::is_directory(path / "train", ec);
  const std::string train_dir = has_split_folders ? (path / "train").string() : root;
  std::string test_dir;
  if (has_split_folders) {
    if (fs::is_directory(path / "test", ec))
      test_dir = (path / "test").string();
    else if (fs::is_directory(path / "val", ec))
      test_dir = (path / "val").string();
  }
  if (options.holdout != 0) {
    CAMPO_CHECK(test_dir.empty(), who, ": a hold-out split was asked for, but ", test_dir,
                " already holds the test split");
    f.holdout = options.holdout;
    f.take_holdout = split == "test";
    return std::make_shared<ImageFolderDataset>(train_dir, f);
  }
  if (split == "train") return std::make_shared<ImageFolderDataset>(train_dir, f);
  CAMPO_CHECK(!test_dir.empty(), who, ": no test split: ",
              has_split_folders ? "there is " + train_dir + " but neither " +
                                      (path / "test").string() + " nor " + (path / "val").string()
                                : root + " holds the class folders directly",
              "; lay out PATH/train/<class>/... and PATH/test/<class>/..., or ask for a ",
              "hold-out split of the train folder (holdout fraction)");
  f.classes = list_image_classes(train_dir);
  return std::make_shared<ImageFolderDataset>(test_dir, f);
}

std::shared_ptr<Dataset> open_text(const std::string& name, const std::string& split,
                                   const DatasetOptions& options) {
  CAMPO_CHECK(options.image_size == 0 && options.channels == 0 && options.channel_mean.empty() &&
                  !options.mean && !options.stddev,
              name, ": image options (size, channels, normalisation) do not apply to text");
  reject_image_options(name, options);
  CAMPO_CHECK(options.tokenizer != nullptr, "internal: ", name,
              " needs a vocabulary (DatasetOptions::tokenizer)");
  return make_text_dataset(read_text_dataset(name, options.data_dir),
                           name == "fortunes" ? "fortunes" : "text", split, *options.tokenizer,
                           options.seq_len, options.mask_prob, options.seed);
}

}  // namespace

bool is_text_dataset(const std::string& name) {
  return name == "fortunes" || name == "text" || name.rfind("text:", 0) == 0;
}

std::string read_text_dataset(const std::string& name, const std::string& data_dir) {
  CAMPO_CHECK(is_text_dataset(name), "internal: '", name, "' is not a text data set");
  if (name == "fortunes") return read_fortunes_corpus(data_dir.empty() ? kFortunesDir : data_dir);
  std::string path = name.size() > 5 ? name.substr(5) : "";
  if (name == "text") {
    CAMPO_CHECK(!data_dir.empty(), "text: no file given; use --dataset text:PATH or --data-dir");
    path = data_dir;
  }
  CAMPO_CHECK(!path.empty(), "text: no path after 'text:'");
  return read_text_file(path, "--dataset text file");
}

void check_splits_match(const Dataset& train, const Dataset& test) {
  auto shape_text = [](const Shape& s) {
    std::string t;
    for (int64_t d : s) t += (t.empty() ? "" : "x") + std::to_string(d);
    return t;
  };
  const Shape a = train.image_shape(), b = test.image_shape();
  CAMPO_CHECK(a == b, "the test split ", test.name(), " has images of ", shape_text(b),
              " (CxHxW) but the train split ", train.name(), " has ", shape_text(a),
              ", so the model cannot evaluate it",
              a.size() == 3 && b.size() == 3 && a[0] == b[0]
                  ? "; pass --image-size N to resize both splits to NxN (e.g. --image-size " +
                        std::to_string(a[1]) + ")"
                  : "; give both splits the same channels (--channels) and size (--image-size)");
  CAMPO_CHECK(train.num_classes() == test.num_classes(), "the test split ", test.name(), " has ",
              test.num_classes(), " classes but the train split ", train.name(), " has ",
              train.num_classes(), "; the labels would not match");
}

std::vector<std::string> dataset_names() {
  return {"fashion-mnist", "mnist", "synthetic", "cifar10", "folder:PATH", "fortunes", "text:PATH"};
}

std::shared_ptr<Dataset> open_dataset(const std::string& name, const std::string& split,
                                      const DatasetOptions& options) {
  CAMPO_CHECK(split == "train" || split == "test", name, ": unknown split '", split,
              "' (expected train or test)");
  if (name == "fashion-mnist" || name == "mnist") return open_idx(name, split, options);
  if (name == "cifar10") return open_cifar10(split, options);
  if (name == "folder" || name.rfind("folder:", 0) == 0) return open_folder(name, split, options);
  if (is_text_dataset(name)) return open_text(name, split, options);
  if (name == "synthetic") {
    reject_image_options(name, options);
    const int channels = options.channels ? options.channels : 1;
    CAMPO_CHECK(channels > 0, "synthetic: channels must be positive, got ", channels);
    CAMPO_CHECK(options.image_size >= 0, "synthetic: image size must be positive, got ",
                options.image_size);
    SyntheticOptions syn;
    syn.name = "synthetic/" + split;
    const int64_t side = options.image_size ? options.image_size : 28;
    syn.image_shape = {channels, side, side};
    syn.size = options.synthetic_size ? options.synthetic_size : (split == "train" ? 60000 : 10000);
    syn.num_classes = options.synthetic_classes;
    syn.seed = options.seed;
    syn.stream = split == "train" ? 0 : 1;
    syn.noise = options.synthetic_noise;
    return std::make_shared<SyntheticDataset>(syn);
  }
  std::string known;
  for (const std::string& n : dataset_names()) known += (known.empty() ? "" : ", ") + n;
  CAMPO_FAIL("unknown dataset '", name, "'; known data sets: ", known);
}

}  // namespace campo
