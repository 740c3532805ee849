// Layer helpers shared by the models: each creates its variables under PyTorch's names
// (weight, bias, running_mean, ...) in the current builder scope and emits the nodes.
#pragma once

#include <optional>
#include <string>

#include "graph/builder.h"

namespace campo::layers {

// nn.Linear: x [N, in] -> [N, out]; weight [out, in] (so y = x W^T + b). PyTorch's default
// initialisation U(-1/sqrt(in), 1/sqrt(in)) unless `weight_init` / `bias_init` are given.
ValueId linear(Builder& b, ValueId x, int64_t out_features, const std::string& name,
               bool bias = true, std::optional<Init> weight_init = std::nullopt,
               std::optional<Init> bias_init = std::nullopt);

struct Conv {
  int64_t out_channels;
  int kernel = 3, stride = 1, pad = 0, dilation = 1, groups = 1;
  bool bias = true;
  bool kaiming = false;  // He-normal (fan_out, ReLU), bias 0, instead of PyTorch's default
  std::optional<Init> weight_init;  // overrides both (DCGAN's N(0, 0.02)); bias then 0
  // Rectangular kernels and padding (Inception-v3's 1x7 with padding (0, 3)): each one
  // given replaces `kernel` / `pad` along its axis. Last, so designated initialisers that
  // name only the fields above stay valid.
  std::optional<int> kernel_h, kernel_w, pad_h, pad_w;
};
// nn.Conv2d on NCHW x; weight [out, in / groups, kh, kw] with kh = kernel_h or kernel and
// kw = kernel_w or kernel; padding pad_h / pad_w (or pad). PyTorch's default init and the
// He-normal one use the real fans: fan_in = in / groups * kh * kw,
// fan_out = out / groups * kh * kw.
ValueId conv2d(Builder& b, ValueId x, const Conv& c, const std::string& name);

struct ConvTranspose {
  int64_t out_channels;
  int kernel = 4, stride = 1, pad = 0;
  bool bias = false;
  std::optional<Init> weight_init;  // default: PyTorch's U(-1/sqrt(fan), 1/sqrt(fan))
};
// nn.ConvTranspose2d (groups 1, dilation 1, output_padding 0) as a Conv2DBackpropInput:
// x [N, in, H, W] -> [N, out, (H - 1) stride - 2 pad + k, ...]; weight [in, out, k, k].
ValueId conv_transpose2d(Builder& b, ValueId x, const ConvTranspose& c, const std::string& name);

// nn.BatchNorm2d / BatchNorm1d: weight (scale) `scale_init` (PyTorch: 1), bias (offset) 0,
// running_mean 0, running_var 1; training or inference follows the builder.
ValueId batch_norm(Builder& b, ValueId x, const std::string& name, float eps = 1e-5f,
                   float momentum = 0.1f, Init scale_init = Init::ones());

// nn.LayerNorm(C) over the last axis of x [..., C]: weight (scale) ones and bias (offset)
// zeros, both [C]; BERT uses eps = 1e-12.
ValueId layer_norm(Builder& b, ValueId x, const std::string& name, float eps = 1e-5f);

}  // namespace campo::layers
