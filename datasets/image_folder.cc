#include "datasets/image_folder.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "datasets/image_file.h"
#include "datasets/synthetic.h"

namespace campo {

const std::vector<std::string> kImageExtensions = {".jpg", ".jpeg", ".png", ".bmp", ".pgm",
                                                   ".ppm", ".pnm",  ".tga", ".gif"};

namespace {

namespace fs = std::filesystem;

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

bool has_image_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return char(std::tolower(ch)); });
  return std::find(kImageExtensions.begin(), kImageExtensions.end(), ext) != kImageExtensions.end();
}

std::string extension_list() {
  std::string s;
  for (const std::string& e : kImageExtensions) s += (s.empty() ? "" : ", ") + e;
  return s;
}

// Whether canonical path `p` is `dir` or lies below it (both canonical).
bool is_within(const fs::path& p, const fs::path& dir) {
  return std::mismatch(dir.begin(), dir.end(), p.begin(), p.end()).first == dir.end();
}

// The image files below class folder `dir`, recursively, sorted; hidden files and folders
// left out. Symbolic links below `dir` are followed only to a file inside `dir` (see the
// header); any other link is an error naming it.
std::vector<std::string> list_images(const fs::path& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  const fs::path real_dir = fs::canonical(dir, ec);
  CAMPO_CHECK(!ec, dir.string(), ": cannot resolve the folder: ", ec.message());
  fs::recursive_directory_iterator it(dir, ec);  // never descends into a linked folder
  CAMPO_CHECK(!ec, dir.string(), ": cannot list the folder: ", ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    CAMPO_CHECK(!ec, dir.string(), ": cannot list the folder: ", ec.message());
    const fs::directory_entry& entry = *it;
    if (is_hidden(entry.path())) {
      if (entry.is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (entry.is_symlink(ec)) {
      const std::string link = entry.path().string();
      std::error_code target_ec;
      const fs::path target = fs::canonical(entry.path(), target_ec);
      if (target_ec) {
        // A dangling link or a loop of links; only an error where it would be an image.
        if (!has_image_extension(entry.path())) continue;
        CAMPO_FAIL(link, ": a symbolic link that leads nowhere (", target_ec.message(),
                   "); remove it or point it at an image file");
      }
      CAMPO_CHECK(!fs::is_directory(target, target_ec), link, ": a symbolic link to a folder (",
                  target.string(),
                  ") inside a class folder; such links are not followed, as they can loop or ",
                  "show one class's images under another label: move or copy the images into ",
                  dir.string());
      if (!has_image_extension(entry.path())) continue;  // not an image: ignored
      CAMPO_CHECK(is_within(target, real_dir), link, ": a symbolic link to ", target.string(),
                  ", outside its class folder ", dir.string(),
                  "; its image would be labelled as this class: copy the file in instead");
    }
    if (entry.is_regular_file(ec) && has_image_extension(entry.path()))
      files.push_back(entry.path().string());
  }
  CAMPO_CHECK(!ec, dir.string(), ": cannot list the folder: ", ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::vector<std::string> list_image_classes(const std::string& root) {
  std::error_code ec;
  CAMPO_CHECK(fs::is_directory(root, ec), root, ": no such folder (an image folder is ",
              "ROOT/<class>/<image files>)");
  std::vector<std::string> classes;
  int64_t loose_images = 0;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (is_hidden(it->path())) continue;
    if (it->is_directory(ec))
      classes.push_back(it->path().filename().string());
    else if (has_image_extension(it->path()))
      ++loose_images;
  }
  CAMPO_CHECK(!ec, root, ": cannot list the folder: ", ec.message());
  CAMPO_CHECK(!classes.empty(), root, ": no class folders; an image folder is ",
              "ROOT/<class>/<image files>, one folder per class",
              loose_images ? " (" + std::to_string(loose_images) +
                                 " images lie directly in it: move them into class folders)"
                           : "");
  std::sort(classes.begin(), classes.end());
  return classes;
}

ImageFolderDataset::ImageFolderDataset(const std::string& root, const ImageFolderOptions& options)
    : root_(root),
      name_(options.name.empty() ? root : options.name),
      side_(options.image_size),
      seed_(options.seed),
      skip_bad_(options.skip_bad) {
  CAMPO_CHECK(options.channels == 1 || options.channels == 3, name_,
              ": channels must be 1 or 3, got ", options.channels);
  CAMPO_CHECK(options.holdout >= 0 && options.holdout < 1, name_,
              ": the hold-out fraction must be in [0, 1), got ", options.holdout);
  transform_.crop = options.image_size;
  transform_.resize = options.resize ? options.resize : options.image_size;
  transform_.padding = options.padding;
  transform_.random = options.augment;
  transform_.channels = options.channels;
  transform_.mean = options.mean;
  transform_.stddev = options.stddev;
  if (transform_.mean.empty())
    transform_.mean = options.channels == 3 ? kImageNetMean : std::vector<float>{0.5f};
  if (transform_.stddev.empty())
    transform_.stddev = options.channels == 3 ? kImageNetStd : std::vector<float>{0.5f};
  transform_.validate(name_);

  const std::vector<std::string> found = list_image_classes(root);
  classes_ = options.classes.empty() ? found : options.classes;
  // A class folder may itself be a symbolic link, but no two may share images: one that
  // resolves to another, or into it, would give its images two labels.
  std::vector<fs::path> real_dirs;
  for (const std::string& cls : found) {
    std::error_code ec;
    real_dirs.push_back(fs::canonical(fs::path(root) / cls, ec));
    CAMPO_CHECK(!ec, (fs::path(root) / cls).string(),
                ": cannot resolve the folder: ", ec.message());
  }
  for (size_t a = 0; a < found.size(); ++a)
    for (size_t b = 0; b < found.size(); ++b)
      CAMPO_CHECK(a == b || !is_within(real_dirs[b], real_dirs[a]),
                  (fs::path(root) / found[a]).string(), " (", real_dirs[a].string(),
                  ") holds class folder ", (fs::path(root) / found[b]).string(), " (",
                  real_dirs[b].string(), "), through a symbolic link; its images would carry ",
                  "two labels: give every class its own folder");
  for (const std::string& cls : found) {
    auto pos = std::find(classes_.begin(), classes_.end(), cls);
    CAMPO_CHECK(pos != classes_.end(), (fs::path(root) / cls).string(),
                ": a class folder that the training classes lack (", classes_.size(),
                " classes, from the train folder); the labels would not match");
    const int32_t label = int32_t(pos - classes_.begin());
    const fs::path dir = fs::path(root) / cls;
    std::vector<std::string> images = list_images(dir);
    CAMPO_CHECK(!images.empty(), dir.string(), ": empty class folder: no image files (",
                extension_list(), ") in it or below it");
    for (size_t j = 0; j < images.size(); ++j) {
      if (options.holdout > 0) {
        const double f = options.holdout;
        const bool held_out = std::floor(double(j + 1) * f) > std::floor(double(j) * f);
        if (held_out != options.take_holdout) continue;
      }
      files_.push_back(std::move(images[j]));
      labels_.push_back(label);
    }
  }

  if (options.skip_bad) {
    // Header check of every file, in parallel; warnings in file order.
    const int64_t n = int64_t(files_.size());
    std::vector<std::string> reasons(static_cast<size_t>(n));
    std::vector<char> ok(static_cast<size_t>(n));
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t i = 0; i < n; ++i)
      ok[size_t(i)] = probe_image_file(files_[size_t(i)], nullptr, &reasons[size_t(i)]);
    size_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (!ok[size_t(i)]) {
        std::fprintf(stderr, "campo: warning: %s: skipping an unreadable image (%s)\n",
                     files_[size_t(i)].c_str(), reasons[size_t(i)].c_str());
        continue;
      }
      if (kept != size_t(i)) {
        files_[kept] = std::move(files_[size_t(i)]);
        labels_[kept] = labels_[size_t(i)];
      }
      ++kept;
    }
    files_.resize(kept);
    labels_.resize(kept);
  }
  CAMPO_CHECK(!files_.empty(), name_, ": no usable images in ", root,
              options.skip_bad ? " (every image file is unreadable)" : "");
}

const std::string& ImageFolderDataset::path(int64_t index) const {
  check_index(index);
  return files_[size_t(index)];
}

int32_t ImageFolderDataset::label_of(int64_t index) const {
  check_index(index);
  return labels_[size_t(index)];
}

void ImageFolderDataset::get(int64_t index, float* image, int32_t* label) const {
  get_for_epoch(index, 0, image, label);
}

void ImageFolderDataset::get_for_epoch(int64_t index, int epoch, float* image,
                                       int32_t* label) const {
  check_index(index);
  const std::string& file = files_[size_t(index)];
  DecodedImage decoded;
  try {
    decoded = decode_image_file(file);
  } catch (const Error& e) {
    if (!skip_bad_) throw;
    CAMPO_FAIL(e.what(), "; skip_bad checks only file headers when the data set opens, and ",
               "this file's header is sound but its data is not: remove or replace it");
  }
  Rng rng(mix_seed(mix_seed(seed_ ^ 0x1f0de5ull, uint64_t(int64_t(epoch))), uint64_t(index)));
  transform_image(decoded.view(), transform_, rng, image);
  *label = labels_[size_t(index)];
}

}  // namespace campo
