// Data sets by name, as the command line selects them (--dataset, --data-dir).
//   fashion-mnist  IDX files; default directory /usr/share/datasets/fashion-mnist
//                  (Debian package dataset-fashion-mnist)
//   mnist          IDX files; no package provides them, so data_dir is required
//   synthetic      SyntheticDataset: learnable, deterministic, no files
//   cifar10        the binary version (data_batch_*.bin, test_batch.bin); data_dir required
//   fortunes       English text: the quotations of Debian's fortunes packages, as text:PATH
//   text:PATH      a UTF-8 text file as masked-language-model sequences (datasets/text.h):
//                  options.tokenizer encodes it, train = the first 90% of its tokens,
//                  test = the rest, windows of seq_len tokens, mask_prob of them to predict;
//                  "text" alone takes PATH from data_dir
//   folder:PATH    an image folder (datasets/image_folder.h); "folder" alone takes PATH
//                  from data_dir. Splits:
//                    PATH/train exists: train = PATH/train, test = PATH/test, else
//                      PATH/val (an error when neither exists and holdout is 0);
//                    otherwise PATH holds the class folders: train = PATH, and the test
//                      split needs holdout > 0.
//                  With holdout = f > 0 (only when there is no test folder), the train
//                  folder is split per class, deterministically: test holds about f of
//                  every class, train the rest. The test split takes the train folder's
//                  class list, so labels agree even when a test class folder is missing.
//
// Augmentation (random crop with `padding`, horizontal flip), for cifar10 and folders,
// is on by default for the train split and off for the test split; `seed` seeds it
// (the draw of a sample is a function of (seed, epoch, index)).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/tokenizer.h"

namespace campo {

struct DatasetOptions {
  std::string data_dir;  // empty: the data set's default location
  // 0: native (28 for MNIST and synthetic, 32 for cifar10, 224 for folders). Otherwise
  // the side of the square output: a resize for MNIST and synthetic, the crop for
  // cifar10 and folders.
  int image_size = 0;
  // 0: native (1 for MNIST and synthetic, 3 for cifar10 and folders); 1 or 3. MNIST's
  // grey plane is replicated; folders convert (luminance or replication); cifar10 is 3.
  int channels = 0;
  // Normalisation, x = (p - mean) / std with p in [0, 1]: per channel when given (one
  // value per output channel), else mean / stddev for every channel, else the data
  // set's own statistics (ImageNet's for colour folders, 0.5 / 0.5 for grey ones).
  std::optional<float> mean, stddev;
  std::vector<float> channel_mean, channel_stddev;
  uint64_t seed = 0;  // synthetic's data, and the augmentation of cifar10 and folders

  // cifar10 and folders only (an error for the others when set).
  std::optional<bool> augment;  // unset: on for the train split, off for test
  int resize = 0;               // the shorter side before cropping; 0: image_size
  std::optional<int> padding;   // random-crop border; unset: 4 for cifar10, 0 for folders
  bool skip_bad = false;        // folders: leave out files with unreadable headers
  double holdout = 0;           // folders without a test folder: fraction held out

  // text only: the vocabulary (required), tokens per sequence, fraction to predict.
  std::shared_ptr<const WordPieceTokenizer> tokenizer;
  int seq_len = 128;
  float mask_prob = 0.15f;

  int64_t synthetic_size = 0;  // 0: 60000 for train, 10000 for test
  int synthetic_classes = 10;
  float synthetic_noise = 0.5f;
};

// The known names, in the order error messages list them ("folder:PATH" stands for any
// path).
std::vector<std::string> dataset_names();

// Whether `name` is a text data set (fortunes, text or text:PATH), and its text: the file
// (PATH, or data_dir for "text" alone; an error when neither gives one), or the fortunes
// corpus (datasets/text.h; data_dir replaces its directory).
bool is_text_dataset(const std::string& name);
std::string read_text_dataset(const std::string& name, const std::string& data_dir);

// Opens split "train" or "test" of data set `name`.
std::shared_ptr<Dataset> open_dataset(const std::string& name, const std::string& split,
                                      const DatasetOptions& options = {});

// Throws, naming both splits, unless a model built for `train` can evaluate `test`: the
// same image shape [C, H, W] and class count. Splits opened by open_dataset with one
// image_size always agree; native sizes can differ (IDX files of a --data-dir whose test
// images are 32x32 and train images 28x28), and the message then says to pass an image
// size (--image-size), which resizes both. Call it when both splits are open, before
// training, rather than learn of it from the first evaluation.
void check_splits_match(const Dataset& train, const Dataset& test);

}  // namespace campo
