// The model zoo: each model is a function that emits its forward graph through the
// Builder and returns the logits. Parameter names follow PyTorch's state_dict
// (torchvision's for ResNet and VGG).
#pragma once

#include <string>
#include <vector>

#include "graph/builder.h"

namespace campo {

struct ModelOptions {
  int in_channels = 1;
  int image_size = 28;
  int num_classes = 10;
  float dropout = 0.0f;  // where the model has a configurable dropout (mlp)
  // The input-size variant of the ImageNet models: "imagenet" is torchvision's model as
  // is; "small" suits 28-32 px images (ResNet: a 3x3/1 stem conv and no max-pool; VGG:
  // no final max-pool, global average pooling and a 512-512-classes classifier); "auto"
  // picks "imagenet" for images of at least 64 px and "small" below.
  std::string stem = "auto";
  // inception_v3: build the auxiliary classifier (torchvision's aux_logits) where the input
  // allows it (299 px or more).
  bool aux_logits = true;
};

// What a model emits: its logits, and auxiliary classifier heads (Inception-v3's AuxLogits)
// whose losses a training graph adds to the main loss with their weights. Inference uses
// only `logits` (dead-code elimination drops the heads).
struct ModelOutputs {
  struct Auxiliary {
    ValueId logits = kNoValue;
    float loss_weight = 0.0f;
  };
  ValueId logits = kNoValue;
  std::vector<Auxiliary> auxiliary;
};

// images: [N, C, H, W] f32. Returns logits [N, num_classes].
ValueId build_model(const std::string& name, Builder& b, ValueId images, const ModelOptions& o);
// The same with the auxiliary heads, for training graphs.
ModelOutputs build_model_outputs(const std::string& name, Builder& b, ValueId images,
                                 const ModelOptions& o);
// Names build_model accepts.
std::vector<std::string> model_names();
bool is_known_model(const std::string& name);

// Whether the "small" variant applies to images of the given shape under o.stem (checks
// o.stem; throws on an unknown value).
bool uses_small_variant(const ModelOptions& o, const Shape& image_shape);

// Individual models.
ValueId build_mlp(Builder& b, ValueId images, const ModelOptions& o);
ValueId build_lenet(Builder& b, ValueId images, const ModelOptions& o);
// torchvision resnet18 / resnet50 (v1.5: the bottleneck strides on its 3x3 conv).
ValueId build_resnet18(Builder& b, ValueId images, const ModelOptions& o);
ValueId build_resnet50(Builder& b, ValueId images, const ModelOptions& o);
// torchvision alexnet.
ValueId build_alexnet(Builder& b, ValueId images, const ModelOptions& o);
// torchvision inception_v3 (with AuxLogits as ModelOptions::aux_logits says).
ModelOutputs build_inception_v3(Builder& b, ValueId images, const ModelOptions& o);
// torchvision vgg16 / vgg16_bn (configuration "D").
ValueId build_vgg16(Builder& b, ValueId images, const ModelOptions& o);
ValueId build_vgg16_bn(Builder& b, ValueId images, const ModelOptions& o);

}  // namespace campo
