// Small models for quick runs and tests.
//  mlp:   flatten -> fc1 (256) -> ReLU -> dropout -> fc2 (128) -> ReLU -> fc3 (classes)
//  lenet: LeNet-5 with ReLU and max-pooling (as the classic PyTorch tutorial version):
//         conv1 5x5x6 (pad 2 at 28 px) -> ReLU -> pool 2 -> conv2 5x5x16 -> ReLU -> pool 2
//         -> fc1 120 -> ReLU -> fc2 84 -> ReLU -> fc3 classes.
#include "models/layers.h"
#include "models/models.h"

namespace campo {

ValueId build_mlp(Builder& b, ValueId images, const ModelOptions& o) {
  ValueId x = b.flatten(images);
  x = b.relu(layers::linear(b, x, 256, "fc1"));
  x = o.array_dropout.empty() ? b.dropout(x, o.dropout) : b.dropout(x, o.array_dropout);
  x = b.relu(layers::linear(b, x, 128, "fc2"));
  return layers::linear(b, x, o.num_classes, "fc3");
}

ValueId build_lenet(Builder& b, ValueId images, const ModelOptions& o) {
  const Shape& s = b.shape(images);
  CAMPO_CHECK(s[2] >= 28 && s[3] >= 28, "lenet needs images of at least 28x28, got ", shape_str(s));
  // Padding 2 on 28 px inputs gives LeNet's classic 32 px receptive layout.
  const int pad = s[2] < 32 ? 2 : 0;
  ValueId x =
      b.relu(layers::conv2d(b, images, {.out_channels = 6, .kernel = 5, .pad = pad}, "conv1"));
  x = b.max_pool(x, 2, 2);
  x = b.relu(layers::conv2d(b, x, {.out_channels = 16, .kernel = 5}, "conv2"));
  x = b.max_pool(x, 2, 2);
  x = b.flatten(x);
  x = b.relu(layers::linear(b, x, 120, "fc1"));
  x = b.relu(layers::linear(b, x, 84, "fc2"));
  return layers::linear(b, x, o.num_classes, "fc3");
}

}  // namespace campo
