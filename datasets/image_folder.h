// Image folders, as torchvision's ImageFolder: root/<class>/<image files>.
//
// Classes are the subfolders of root sorted by name (byte order, as Python's sorted());
// class i is the i-th. A class folder's images are all files below it (recursively)
// whose extension is one of kImageExtensions (any case), sorted by relative path; other
// files are ignored, as are files and folders whose name starts with '.' (editor and
// macOS droppings such as "._cat.jpg"). Construction only lists files: it fails, naming
// the folder, when root has no class folder or a class folder has no image.
//
// Symbolic links, where a wrong one would silently give images a wrong label: a class
// folder may itself be a link (to a folder elsewhere), but two class folders that resolve
// to the same folder, or one inside the other, are refused. Below a class folder a link is
// followed only when it resolves to a file inside that same class folder; a link to any
// folder (it could loop, as `up -> ..`, or bring in another class) and an image-named link
// to a file outside the class folder or to nothing (dangling, or a loop of links) are
// errors naming the link. Links whose name is not an image's and whose target is a file
// or nothing are ignored like any other non-image file.
//
// Decoding happens in get() (on the loader's prefetch thread), through stb_image; a
// colour image feeds a grey model by luminance, a grey one a colour model by
// replication. Preprocessing is datasets/image_transform.h: resize the shorter side to
// `resize`, then a centre crop of image_size (evaluation) or, with `augment`, a random
// crop of image_size after `padding` pixels of black border, and a random horizontal
// flip, drawn from an Rng seeded by (seed, epoch, index).
//
// Bad files: a file stb_image cannot decode makes get() throw a campo::Error naming it
// and stb_image's reason. With skip_bad, construction reads every file's header
// (stbi_info, a few hundred bytes per file, in parallel) and leaves out the files whose
// header is not a readable image, with one warning per file on stderr. Only headers are
// checked (decoding everything up front would cost as much as an epoch), so a file with
// a sound header but damaged data still makes get() throw, skip_bad or not.
//
// Hold-out split: with holdout = f in (0, 1), file j (in sorted order) of a class is held
// out when floor((j + 1) f) > floor(j f): about f of every class, spread evenly, chosen by
// position alone (no seed), so the two sides never overlap and never change between runs.
// The data set holds the held-out files when take_holdout, else the others.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "datasets/image_transform.h"

namespace campo {

// Lower-case extensions (with the dot) that count as images.
extern const std::vector<std::string> kImageExtensions;

struct ImageFolderOptions {
  std::string name;                 // for messages and name(); empty: the root path
  int64_t image_size = 224;         // side of the square output
  int64_t resize = 0;               // the shorter side before cropping; 0: image_size
  int64_t padding = 0;              // black border before the random crop (augment only)
  bool augment = false;             // random crop + horizontal flip; else a centre crop
  int channels = 3;                 // 1 or 3
  std::vector<float> mean, stddev;  // per channel; empty: ImageNet's (3), 0.5 / 0.5 (1)
  uint64_t seed = 0;                // of the augmentation
  bool skip_bad = false;            // check headers at construction, leave out bad files
  // Empty: the sorted subfolders of root. Otherwise the class list that fixes the labels
  // (a test folder takes its train folder's); every subfolder must be one of them, and a
  // class may lack a folder.
  std::vector<std::string> classes;
  double holdout = 0;         // 0, or the fraction held out of each class
  bool take_holdout = false;  // with holdout: the held-out files, else the rest
};

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(const std::string& root, const ImageFolderOptions& options);

  int64_t size() const override { return int64_t(files_.size()); }
  Shape image_shape() const override { return {transform_.channels, side_, side_}; }
  int num_classes() const override { return int(classes_.size()); }
  std::string name() const override { return name_; }
  void get(int64_t index, float* image, int32_t* label) const override;
  void get_for_epoch(int64_t index, int epoch, float* image, int32_t* label) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t index) const;
  int32_t label_of(int64_t index) const;
  const ImageTransform& transform() const { return transform_; }

 private:
  std::string root_, name_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;  // full paths
  std::vector<int32_t> labels_;
  ImageTransform transform_;
  int64_t side_ = 0;
  uint64_t seed_ = 0;
  bool skip_bad_ = false;
};

// The sorted class folder names of `root` (hidden ones left out); throws when root is not
// a directory or has none.
std::vector<std::string> list_image_classes(const std::string& root);

}  // namespace campo
