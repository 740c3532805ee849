// AlexNet as torchvision builds it (the one-GPU variant of Krizhevsky's "One weird trick"
// paper), with torchvision's state_dict names. `features` and `classifier` are
// nn.Sequentials, so a layer's name is its index there:
//   features    0 Conv2d(C, 64, 11, stride 4, pad 2), 1 ReLU, 2 MaxPool2d(3, 2),
//               3 Conv2d(64, 192, 5, pad 2), 4 ReLU, 5 MaxPool2d(3, 2),
//               6 Conv2d(192, 384, 3, pad 1), 7 ReLU, 8 Conv2d(384, 256, 3, pad 1), 9 ReLU,
//               10 Conv2d(256, 256, 3, pad 1), 11 ReLU, 12 MaxPool2d(3, 2)
//   avgpool     AdaptiveAvgPool2d((6, 6))
//   classifier  0 Dropout(0.5), 1 Linear(9216, 4096), 2 ReLU, 3 Dropout(0.5),
//               4 Linear(4096, 4096), 5 ReLU, 6 Linear(4096, classes)
// 61,100,840 parameters for 1000 classes. Initialisation is PyTorch's default for every
// layer (torchvision's AlexNet sets none of its own), but for the small variant's convs.
// ModelOptions::stem:
//   "imagenet": the model as is. AdaptiveAvgPool2d((6, 6)) is the identity on the 6x6 map
//     of a 224 px input and an AvgPool when the map's side is a multiple of 6; other maps
//     are an error (torchvision's uneven adaptive windows are not an op here).
//   "small" (below 64 px, e.g. 28-32 px): features.0 is a 3x3/1 conv with padding 1 (an
//     11x11/4 one would leave a 28 px image 6x6 before three 3x3/2 pools), the pools are
//     kept, the map is averaged globally, and the classifier keeps its layout with widths
//     512: classifier.1 Linear(256, 512), classifier.4 Linear(512, 512), classifier.6
//     Linear(512, classes). A 28 px input leaves a 2x2 map, 32 px 3x3. Its convs draw their
//     weights from He et al.'s kaiming_normal(fan_in, relu), biases 0: with PyTorch's
//     default init the five plain convs shrink the signal so much that on Fashion-MNIST
//     (28 px, batch 64, SGD lr 0.01 momentum 0.9, cost-aware) the loss was still 2.296 and
//     the test accuracy 9.4% after 200 steps, as VGG-16's small variant (models/vgg.cc).
#include "models/layers.h"
#include "models/models.h"

namespace campo {

ValueId build_alexnet(Builder& b, ValueId images, const ModelOptions& o) {
  const Shape s = b.shape(images);
  CAMPO_CHECK(s.size() == 4, "alexnet expects images [N, C, H, W], got ", shape_str(s));
  CAMPO_CHECK(o.num_classes > 0, "alexnet: num_classes must be positive, got ", o.num_classes);
  const bool small = uses_small_variant(o, s);
  // The smallest input whose three 3x3/2 pools leave at least one pixel.
  const int64_t min_side = small ? 15 : 63;
  CAMPO_CHECK(s[2] >= min_side && s[3] >= min_side, "alexnet (", small ? "small" : "imagenet",
              " variant) needs images of at least ", min_side, "x", min_side, ", got ",
              shape_str(s));
  ValueId x = images;
  {
    auto features = b.scope("features");
    auto conv = [&](int64_t out, int kernel, int stride, int pad, int index) {
      layers::Conv c{.out_channels = out, .kernel = kernel, .stride = stride, .pad = pad};
      if (small)  // He et al.'s forward form, see the note at the top
        c.weight_init = Init::kaiming_normal(b.shape(x)[1] / b.array_size() * kernel * kernel);
      x = b.relu(layers::conv2d(b, x, c, std::to_string(index)));
    };
    if (small)
      conv(64, 3, 1, 1, 0);
    else
      conv(64, 11, 4, 2, 0);
    x = b.max_pool(x, 3, 2);
    conv(192, 5, 1, 2, 3);
    x = b.max_pool(x, 3, 2);
    conv(384, 3, 1, 1, 6);
    conv(256, 3, 1, 1, 8);
    conv(256, 3, 1, 1, 10);
    x = b.max_pool(x, 3, 2);
  }
  const int64_t width = small ? 512 : 4096;
  if (small) {
    x = b.global_avg_pool(x);
  } else {
    const Shape f = b.shape(x);
    CAMPO_CHECK(f[2] == f[3] && f[2] % 6 == 0,
                "alexnet: the imagenet head pools the feature map "
                "to 6x6, which needs a square map whose side is a multiple of 6 (224 px input "
                "gives 6x6); got ",
                shape_str(f), " from input ", shape_str(s),
                " (use stem \"small\" for small images)");
    if (f[2] != 6) x = b.avg_pool(x, int(f[2] / 6), int(f[2] / 6));  // AdaptiveAvgPool2d((6, 6))
  }
  x = b.flatten(x);
  auto classifier = b.scope("classifier");
  constexpr float kDropout = 0.5f;
  x = b.relu(layers::linear(b, b.dropout(x, kDropout), width, "1"));
  x = b.relu(layers::linear(b, b.dropout(x, kDropout), width, "4"));
  return layers::linear(b, x, o.num_classes, "6");
}

}  // namespace campo
