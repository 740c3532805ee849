// Layer helpers shared by the models: each creates its variables under PyTorch's names
// (weight, bias, running_mean, ...) in the current builder scope and emits the nodes.
#pragma once

#include <string>

#include "graph/builder.h"

namespace campo::layers {

// nn.Linear: x [N, in] -> [N, out]; weight [out, in] (so y = x W^T + b), PyTorch's default
// initialisation unless `init` is given.
ValueId linear(Builder& b, ValueId x, int64_t out_features, const std::string& name,
               bool bias = true);

struct Conv {
  int64_t out_channels;
  int kernel = 3, stride = 1, pad = 0, dilation = 1, groups = 1;
  bool bias = true;
  bool kaiming = false;  // He-normal (fan_out, ReLU) instead of PyTorch's default
};
// nn.Conv2d on NCHW x; weight [out, in / groups, k, k].
ValueId conv2d(Builder& b, ValueId x, const Conv& c, const std::string& name);

// nn.BatchNorm2d / BatchNorm1d: weight (scale) 1, bias (offset) 0, running_mean 0,
// running_var 1; training or inference follows the builder.
ValueId batch_norm(Builder& b, ValueId x, const std::string& name, float eps = 1e-5f,
                   float momentum = 0.1f);

}  // namespace campo::layers
