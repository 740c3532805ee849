// IDX files (datasets/idx.cc), plain or gzip: the input is one file, read as images and as
// labels; an accepted image file small enough is then loaded as a data set (with labels of
// class 0) and every sample read, natively or resized.
#include <vector>

#include "datasets/idx.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {

void idx(const uint8_t* data, size_t size) {
  TempInput input("idx", data, size);
  reject_or_accept([&] { read_idx_labels(input.path()); });
  reject_or_accept([&] {
    const IdxImages images = read_idx_images(input.path());
    if (images.count * images.rows * images.cols > (1 << 16)) return;  // keep runs fast
    std::vector<uint8_t> labels = {0, 0, 8, 1};
    for (int shift = 24; shift >= 0; shift -= 8) labels.push_back(uint8_t(images.count >> shift));
    labels.resize(labels.size() + size_t(images.count), 0);
    TempInput label_file("idx-labels", labels.data(), labels.size());
    IdxOptions options;
    const int sizes[] = {0, 5, 33};
    options.image_size = sizes[size % 3];
    options.channels = size % 2 ? 3 : 1;
    IdxDataset dataset(input.path(), label_file.path(), options);
    const Shape shape = dataset.image_shape();
    std::vector<float> image(size_t(shape[0] * shape[1] * shape[2]));
    int32_t label = -1;
    for (int64_t i = 0; i < dataset.size(); ++i) dataset.get(i, image.data(), &label);
  });
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::idx)
