// ResNet-18 and ResNet-50 as torchvision builds them (torchvision.models.resnet, "v1.5":
// the bottleneck strides on its 3x3 conv), with torchvision's state_dict names:
//   conv1, bn1, [maxpool], layer1..layer4 (blocks "layerL.B": conv1/bn1, conv2/bn2,
//   [conv3/bn3], downsample.0 (1x1 conv) / downsample.1 (BN)), global average pool, fc.
// Stems (ModelOptions::stem): "imagenet" = 7x7/2 conv pad 3, BN, ReLU, 3x3/2 max-pool pad 1;
// "small" = 3x3/1 conv pad 1, BN, ReLU, no max-pool (the usual CIFAR adaptation; conv1
// keeps its name, only its kernel shrinks). Convolutions have no bias.
// Initialisation as torchvision: convs kaiming_normal(fan_out, relu), BN weight 1 bias 0,
// fc PyTorch's Linear default.
#include "models/layers.h"
#include "models/models.h"

namespace campo {
namespace {

enum class BlockKind { basic, bottleneck };

struct ResNetSpec {
  const char* name;
  BlockKind block;
  int blocks[4];
};

int expansion(BlockKind k) { return k == BlockKind::basic ? 1 : 4; }

// conv (no bias, He init) followed by batch norm, named "<conv>" and "<bn>".
ValueId conv_bn(Builder& b, ValueId x, int64_t out, int kernel, int stride, int pad,
                const std::string& conv, const std::string& bn) {
  x = layers::conv2d(b, x,
                     {.out_channels = out,
                      .kernel = kernel,
                      .stride = stride,
                      .pad = pad,
                      .bias = false,
                      .kaiming = true},
                     conv);
  return layers::batch_norm(b, x, bn);
}

// The identity path: x, or downsample = conv1x1(stride) + BN when the shape changes.
ValueId shortcut(Builder& b, ValueId x, int64_t out, int stride) {
  // Channels per model (a model array stacks its models' channels, graph/builder.h).
  if (stride == 1 && b.shape(x)[1] == out * b.array_size()) return x;
  auto scope = b.scope("downsample");
  return conv_bn(b, x, out, 1, stride, 0, "0", "1");
}

// BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), both convs 3x3.
ValueId basic_block(Builder& b, ValueId x, int64_t planes, int stride) {
  ValueId y = b.relu(conv_bn(b, x, planes, 3, stride, 1, "conv1", "bn1"));
  y = conv_bn(b, y, planes, 3, 1, 1, "conv2", "bn2");
  return b.relu(b.add(y, shortcut(b, x, planes, stride)));
}

// Bottleneck (v1.5): 1x1 (planes) -> 3x3/stride (planes) -> 1x1 (4 planes), + shortcut.
ValueId bottleneck_block(Builder& b, ValueId x, int64_t planes, int stride) {
  ValueId y = b.relu(conv_bn(b, x, planes, 1, 1, 0, "conv1", "bn1"));
  y = b.relu(conv_bn(b, y, planes, 3, stride, 1, "conv2", "bn2"));
  y = conv_bn(b, y, planes * 4, 1, 1, 0, "conv3", "bn3");
  return b.relu(b.add(y, shortcut(b, x, planes * 4, stride)));
}

ValueId build_resnet(const ResNetSpec& spec, Builder& b, ValueId images, const ModelOptions& o) {
  const Shape s = b.shape(images);
  CAMPO_CHECK(s.size() == 4, spec.name, " expects images [N, C, H, W], got ", shape_str(s));
  CAMPO_CHECK(o.num_classes > 0, spec.name, ": num_classes must be positive, got ", o.num_classes);
  const bool small = uses_small_variant(o, s);
  ValueId x = small ? conv_bn(b, images, 64, 3, 1, 1, "conv1", "bn1")
                    : conv_bn(b, images, 64, 7, 2, 3, "conv1", "bn1");
  x = b.relu(x);
  if (!small) x = b.max_pool(x, 3, 2, 1);
  const int64_t planes[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    auto layer_scope = b.scope("layer" + std::to_string(stage + 1));
    for (int i = 0; i < spec.blocks[stage]; ++i) {
      auto block_scope = b.scope(std::to_string(i));
      const int stride = stage > 0 && i == 0 ? 2 : 1;
      x = spec.block == BlockKind::basic ? basic_block(b, x, planes[stage], stride)
                                         : bottleneck_block(b, x, planes[stage], stride);
    }
  }
  x = b.flatten(b.global_avg_pool(x));
  CAMPO_CHECK(b.shape(x)[1] == 512 * expansion(spec.block) * b.array_size(),
              "internal: ", spec.name, " features have ", b.shape(x)[1], " channels");
  return layers::linear(b, x, o.num_classes, "fc");
}

}  // namespace

ValueId build_resnet18(Builder& b, ValueId images, const ModelOptions& o) {
  return build_resnet({"resnet18", BlockKind::basic, {2, 2, 2, 2}}, b, images, o);
}

ValueId build_resnet50(Builder& b, ValueId images, const ModelOptions& o) {
  return build_resnet({"resnet50", BlockKind::bottleneck, {3, 4, 6, 3}}, b, images, o);
}

}  // namespace campo
