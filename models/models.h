// The model zoo: each model is a function that emits its forward graph through the
// Builder and returns the logits. Parameter names follow PyTorch's state_dict.
#pragma once

#include <string>
#include <vector>

#include "graph/builder.h"

namespace campo {

struct ModelOptions {
  int in_channels = 1;
  int image_size = 28;
  int num_classes = 10;
  float dropout = 0.0f;  // where the model has dropout (mlp)
};

// images: [N, C, H, W] f32. Returns logits [N, num_classes].
ValueId build_model(const std::string& name, Builder& b, ValueId images, const ModelOptions& o);
// Names build_model accepts.
std::vector<std::string> model_names();
bool is_known_model(const std::string& name);

// Individual models.
ValueId build_mlp(Builder& b, ValueId images, const ModelOptions& o);
ValueId build_lenet(Builder& b, ValueId images, const ModelOptions& o);

}  // namespace campo
