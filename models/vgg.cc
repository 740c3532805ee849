// VGG-16 (configuration "D") and VGG-16-BN as torchvision builds them, with torchvision's
// state_dict names. `features` is one nn.Sequential, so a layer's name is its index there:
// conv (3x3, pad 1, bias), [BatchNorm2d], ReLU per conv and a 2x2/2 max-pool per "M":
//   vgg16     convs at features.0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28
//   vgg16_bn  convs at features.0, 3, 7, 10, 14, 17, 20, 24, 27, 30, 34, 37, 40, BN right
//             after each (features.1, 4, ..., 41)
// Head, ModelOptions::stem:
//   "imagenet" (torchvision): AdaptiveAvgPool2d((7, 7)) -- the identity on the 7x7 map of a
//     224 px input, an AvgPool when the map is a multiple of 7, otherwise an error -- then
//     classifier.0 Linear(25088, 4096), ReLU, Dropout(0.5), classifier.3 Linear(4096, 4096),
//     ReLU, Dropout(0.5), classifier.6 Linear(4096, classes).
//   "small" (28-32 px images): the final max-pool (features.30 / .43) is left out, so a
//     28 px input still has a 1x1 map and a 32 px one 2x2; then global average pooling
//     and a classifier built the same way with smaller widths: classifier.0
//     Linear(512, 512), ReLU, Dropout(0.5), classifier.3 Linear(512, classes).
// Dropout is torchvision's fixed 0.5 (ModelOptions::dropout is not used).
// Initialisation as torchvision: convs kaiming_normal(fan_out, relu) with bias 0, BN weight
// 1 bias 0, Linear N(0, 0.01) with bias 0. One exception: the small variant without
// batch-norm draws its convs with He et al.'s forward form, kaiming_normal(fan_in, relu).
// With fan_out, a 1-channel 32 px input leaves the 13 plain convs with a forward signal
// ~500x smaller in variance than the input, and the loss sits at ln(10): measured in
// PyTorch with torchvision's init (SGD lr 0.01, momentum 0.9, batch 64, Fashion-MNIST at
// 32 px) as in campo, still 2.302 after 120 steps; with fan_in it falls (1.92 at step 120).
#include "models/layers.h"
#include "models/models.h"

namespace campo {
namespace {

constexpr int kPool = 0;  // "M" in torchvision's configuration list
constexpr int kConfigD[] = {64,    64,  kPool, 128, 128,   kPool, 256, 256, 256,
                            kPool, 512, 512,   512, kPool, 512,   512, 512, kPool};
constexpr float kDropout = 0.5f;

ValueId classifier_linear(Builder& b, ValueId x, int64_t out, int index) {
  return layers::linear(b, x, out, std::to_string(index), true, Init::normal(0.0f, 0.01f),
                        Init::zeros());
}

ValueId build_vgg(const char* name, bool batch_norm, Builder& b, ValueId images,
                  const ModelOptions& o) {
  const Shape s = b.shape(images);
  CAMPO_CHECK(s.size() == 4, name, " expects images [N, C, H, W], got ", shape_str(s));
  CAMPO_CHECK(o.num_classes > 0, name, ": num_classes must be positive, got ", o.num_classes);
  const bool small = uses_small_variant(o, s);
  // Four (small) or five (imagenet) 2x2 pools must leave at least one pixel.
  const int64_t min_side = small ? 16 : 32;
  CAMPO_CHECK(s[2] >= min_side && s[3] >= min_side, name, " (", small ? "small" : "imagenet",
              " variant) needs images of at least ", min_side, "x", min_side, ", got ",
              shape_str(s));
  const int num_entries = int(std::size(kConfigD));
  ValueId x = images;
  {
    auto features = b.scope("features");
    int index = 0;  // position in torchvision's nn.Sequential
    for (int i = 0; i < num_entries; ++i) {
      if (kConfigD[i] == kPool) {
        const bool is_last = i == num_entries - 1;
        if (!(small && is_last)) x = b.max_pool(x, 2, 2);
        index += 1;
        continue;
      }
      layers::Conv conv{.out_channels = kConfigD[i], .kernel = 3, .pad = 1, .kaiming = true};
      if (small && !batch_norm)  // He et al.'s forward form, see the note at the top
        conv.weight_init = Init::kaiming_normal(b.shape(x)[1] / b.array_size() * 3 * 3);
      x = layers::conv2d(b, x, conv, std::to_string(index));
      if (batch_norm) x = layers::batch_norm(b, x, std::to_string(index + 1));
      x = b.relu(x);
      index += batch_norm ? 3 : 2;
    }
  }
  auto classifier = [&] { return b.scope("classifier"); };
  if (small) {
    x = b.flatten(b.global_avg_pool(x));
    auto scope = classifier();
    x = b.dropout(b.relu(classifier_linear(b, x, 512, 0)), kDropout);
    return classifier_linear(b, x, o.num_classes, 3);
  }
  const Shape f = b.shape(x);
  CAMPO_CHECK(f[2] == f[3] && f[2] % 7 == 0, name,
              ": the imagenet head pools the feature map to 7x7, which needs a square map "
              "whose side is a multiple of 7 (224 px input gives 7x7); got ",
              shape_str(f), " from input ", shape_str(s), " (use stem \"small\" for small images)");
  if (f[2] != 7) x = b.avg_pool(x, int(f[2] / 7), int(f[2] / 7));  // AdaptiveAvgPool2d((7, 7))
  x = b.flatten(x);
  auto scope = classifier();
  x = b.dropout(b.relu(classifier_linear(b, x, 4096, 0)), kDropout);
  x = b.dropout(b.relu(classifier_linear(b, x, 4096, 3)), kDropout);
  return classifier_linear(b, x, o.num_classes, 6);
}

}  // namespace

ValueId build_vgg16(Builder& b, ValueId images, const ModelOptions& o) {
  return build_vgg("vgg16", false, b, images, o);
}

ValueId build_vgg16_bn(Builder& b, ValueId images, const ModelOptions& o) {
  return build_vgg("vgg16_bn", true, b, images, o);
}

}  // namespace campo
