#include "datasets/registry.h"

#include "datasets/idx.h"
#include "datasets/synthetic.h"

namespace campo {

std::vector<std::string> dataset_names() { return {"fashion-mnist", "mnist", "synthetic"}; }

std::shared_ptr<Dataset> open_dataset(const std::string& name, const std::string& split,
                                      const DatasetOptions& options) {
  CAMPO_CHECK(split == "train" || split == "test", name, ": unknown split '", split,
              "' (expected train or test)");
  if (name == "fashion-mnist" || name == "mnist") {
    IdxOptions idx;
    idx.name = name;
    idx.image_size = options.image_size;
    idx.channels = options.channels;
    std::string dir = options.data_dir;
    if (name == "fashion-mnist") {
      idx.mean = options.mean.value_or(0.2860f);
      idx.stddev = options.stddev.value_or(0.3530f);
      if (dir.empty()) dir = kFashionMnistDir;
    } else {
      idx.mean = options.mean.value_or(0.1307f);
      idx.stddev = options.stddev.value_or(0.3081f);
      idx.missing_hint =
          "download the four MNIST IDX files (train-images-idx3-ubyte.gz, ...) into it";
      CAMPO_CHECK(!dir.empty(), "mnist: no data directory given; no package installs MNIST, so ",
                  "pass --data-dir pointing at the four IDX files (train-images-idx3-ubyte.gz, ",
                  "train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, ",
                  "t10k-labels-idx1-ubyte.gz)");
    }
    return load_idx_split(dir, split, idx);
  }
  if (name == "synthetic") {
    CAMPO_CHECK(options.channels > 0, "synthetic: channels must be positive, got ",
                options.channels);
    CAMPO_CHECK(options.image_size >= 0, "synthetic: image size must be positive, got ",
                options.image_size);
    SyntheticOptions syn;
    syn.name = "synthetic/" + split;
    const int64_t side = options.image_size ? options.image_size : 28;
    syn.image_shape = {options.channels, side, side};
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
