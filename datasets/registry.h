// Data sets by name, as the command line selects them (--dataset, --data-dir).
//   fashion-mnist  IDX files; default directory /usr/share/datasets/fashion-mnist
//                  (Debian package dataset-fashion-mnist)
//   mnist          IDX files; no package provides them, so data_dir is required
//   synthetic      SyntheticDataset: learnable, deterministic, no files
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/dataset.h"

namespace campo {

struct DatasetOptions {
  std::string data_dir;               // empty: the data set's default location
  int image_size = 0;                 // 0: native; else a square resize (28 for synthetic)
  int channels = 1;                   // 1, or 3 (grey replicated; synthetic draws 3 channels)
  std::optional<float> mean, stddev;  // unset: the data set's own statistics
  uint64_t seed = 0;                  // synthetic only
  int64_t synthetic_size = 0;         // 0: 60000 for train, 10000 for test
  int synthetic_classes = 10;
  float synthetic_noise = 0.5f;
};

// The known names, in the order error messages list them.
std::vector<std::string> dataset_names();

// Opens split "train" or "test" of data set `name`.
std::shared_ptr<Dataset> open_dataset(const std::string& name, const std::string& split,
                                      const DatasetOptions& options = {});

}  // namespace campo
