// CIFAR-10 binary batches (datasets/cifar10.cc): the input is one batch file, loaded for
// evaluation and with augmentation and a resize, every sample read.
#include <vector>

#include "datasets/cifar10.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {

void cifar10(const uint8_t* data, size_t size) {
  TempInput input("cifar10", data, size);
  Cifar10Options augmented;
  augmented.augment = true;
  augmented.resize = 40;
  augmented.image_size = 36;
  for (const Cifar10Options& options : {Cifar10Options{}, augmented}) {
    reject_or_accept([&] {
      Cifar10Dataset dataset({input.path()}, options);
      const Shape shape = dataset.image_shape();
      std::vector<float> image(size_t(shape[0] * shape[1] * shape[2]));
      int32_t label = -1;
      for (int64_t i = 0; i < dataset.size(); ++i) {
        dataset.get_for_epoch(i, 1, image.data(), &label);
        require(label >= 0 && label < 10, "a CIFAR-10 label outside 0..9 was accepted");
      }
    });
  }
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::cifar10)
