#include "datasets/dataset.h"

#include <algorithm>
#include <cmath>

namespace campo {

void Dataset::check_index(int64_t index) const {
  CAMPO_CHECK(index >= 0 && index < size(), name(), ": sample index ", index,
              " is out of range [0, ", size(), ")");
}

namespace {

class DatasetView final : public Dataset {
 public:
  DatasetView(std::shared_ptr<const Dataset> base, int64_t limit, bool tanh_pixels)
      : base_(std::move(base)),
        size_(limit > 0 ? std::min(limit, base_->size()) : base_->size()),
        tanh_(tanh_pixels) {
    CAMPO_CHECK(!tanh_ || base_->input_dtype() == DType::f32, "internal: tanh of ", base_->name(),
                "'s token ids");
  }
  int64_t size() const override { return size_; }
  Shape image_shape() const override { return base_->image_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  std::string name() const override {
    return size_ < base_->size() ? base_->name() + "[:" + std::to_string(size_) + "]"
                                 : base_->name();
  }
  void get(int64_t index, float* image, int32_t* label) const override {
    check_index(index);
    base_->get(index, image, label);
    map(image);
  }
  void get_for_epoch(int64_t index, int epoch, float* image, int32_t* label) const override {
    check_index(index);
    base_->get_for_epoch(index, epoch, image, label);
    map(image);
  }
  DType input_dtype() const override { return base_->input_dtype(); }
  Shape label_shape() const override { return base_->label_shape(); }
  void get_sample(int64_t index, int epoch, void* input, int32_t* labels) const override {
    check_index(index);
    base_->get_sample(index, epoch, input, labels);
    if (tanh_) map(static_cast<float*>(input));
  }

 private:
  void map(float* image) const {
    if (tanh_)
      for (int64_t i = 0, n = image_numel(); i < n; ++i) image[i] = std::tanh(image[i]);
  }

  std::shared_ptr<const Dataset> base_;
  int64_t size_;
  bool tanh_;
};

}  // namespace

std::shared_ptr<const Dataset> dataset_view(std::shared_ptr<const Dataset> base, int64_t limit,
                                            bool tanh_pixels) {
  return std::make_shared<DatasetView>(std::move(base), limit, tanh_pixels);
}

}  // namespace campo
