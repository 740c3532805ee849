#include "models/layers.h"

#include <cmath>

namespace campo::layers {

ValueId linear(Builder& b, ValueId x, int64_t out_features, const std::string& name, bool bias,
               std::optional<Init> weight_init, std::optional<Init> bias_init) {
  const Shape s = b.shape(x);
  CAMPO_CHECK(s.size() == 2, "linear layer '", name, "' expects [N, features], got ", shape_str(s));
  const int64_t in = s[1];
  auto scope = b.scope(name);
  ValueId w =
      b.variable("weight", {out_features, in}, weight_init.value_or(Init::pytorch_default(in)));
  ValueId y = b.matmul(x, w, false, true);
  if (bias)
    y = b.bias_add(
        y, b.variable("bias", {out_features}, bias_init.value_or(Init::pytorch_default(in))));
  return y;
}

ValueId conv2d(Builder& b, ValueId x, const Conv& c, const std::string& name) {
  const Shape s = b.shape(x);
  CAMPO_CHECK(s.size() == 4, "conv layer '", name, "' expects NCHW input, got ", shape_str(s));
  const int64_t in = s[1];
  CAMPO_CHECK(in % c.groups == 0 && c.out_channels % c.groups == 0, "conv layer '", name,
              "': groups ", c.groups, " must divide in (", in, ") and out (", c.out_channels,
              ") channels");
  const int kh = c.kernel_h.value_or(c.kernel), kw = c.kernel_w.value_or(c.kernel);
  const int ph = c.pad_h.value_or(c.pad), pw = c.pad_w.value_or(c.pad);
  CAMPO_CHECK(kh >= 1 && kw >= 1 && ph >= 0 && pw >= 0, "conv layer '", name, "': kernel ", kh, "x",
              kw, " must be positive and padding ", ph, "x", pw, " non-negative");
  auto scope = b.scope(name);
  const int64_t fan_in = in / c.groups * kh * kw;
  const int64_t fan_out = c.out_channels / c.groups * kh * kw;
  Init w_init = c.weight_init ? *c.weight_init
                : c.kaiming   ? Init::kaiming_normal(fan_out)
                              : Init::pytorch_default(fan_in);
  ValueId w = b.variable("weight", {c.out_channels, in / c.groups, kh, kw}, w_init);
  ConvAttrs a;
  a.stride_h = a.stride_w = c.stride;
  a.pad_h = ph;
  a.pad_w = pw;
  a.dilation_h = a.dilation_w = c.dilation;
  a.groups = c.groups;
  ValueId y = b.conv2d(x, w, a);
  if (c.bias) {
    Init b_init = c.kaiming || c.weight_init ? Init::zeros() : Init::pytorch_default(fan_in);
    y = b.bias_add(y, b.variable("bias", {c.out_channels}, b_init));
  }
  return y;
}

ValueId conv_transpose2d(Builder& b, ValueId x, const ConvTranspose& c, const std::string& name) {
  const Shape s = b.shape(x);
  CAMPO_CHECK(s.size() == 4, "transposed conv layer '", name, "' expects NCHW input, got ",
              shape_str(s));
  CAMPO_CHECK(c.kernel >= 1 && c.stride >= 1 && c.pad >= 0 && c.out_channels >= 1,
              "transposed conv layer '", name, "': bad geometry (kernel ", c.kernel, ", stride ",
              c.stride, ", pad ", c.pad, ", out_channels ", c.out_channels, ")");
  const int64_t ho = (s[2] - 1) * c.stride - 2 * c.pad + c.kernel;
  const int64_t wo = (s[3] - 1) * c.stride - 2 * c.pad + c.kernel;
  CAMPO_CHECK(ho > 0 && wo > 0, "transposed conv layer '", name, "': input ", shape_str(s),
              " with kernel ", c.kernel, ", stride ", c.stride, ", pad ", c.pad,
              " gives an empty output");
  auto scope = b.scope(name);
  // PyTorch computes ConvTranspose2d's fan_in from weight.size(1) * k * k = out * k * k.
  const int64_t fan = c.out_channels * c.kernel * c.kernel;
  ValueId w = b.variable("weight", {s[1], c.out_channels, c.kernel, c.kernel},
                         c.weight_init.value_or(Init::pytorch_default(fan)));
  ConvAttrs a;
  a.stride_h = a.stride_w = c.stride;
  a.pad_h = a.pad_w = c.pad;
  a.output_shape = {s[0], c.out_channels, ho, wo};
  ValueId y = b.conv2d_transpose(x, w, a);
  if (c.bias) {
    Init b_init = c.weight_init ? Init::zeros() : Init::pytorch_default(fan);
    y = b.bias_add(y, b.variable("bias", {c.out_channels}, b_init));
  }
  return y;
}

ValueId batch_norm(Builder& b, ValueId x, const std::string& name, float eps, float momentum,
                   Init scale_init) {
  const int64_t c = b.shape(x).at(1);
  auto scope = b.scope(name);
  ValueId scale = b.variable("weight", {c}, scale_init);
  ValueId offset = b.variable("bias", {c}, Init::zeros());
  ValueId mean = b.variable("running_mean", {c}, Init::zeros(), VariableKind::buffer);
  ValueId var = b.variable("running_var", {c}, Init::ones(), VariableKind::buffer);
  return b.batch_norm(x, scale, offset, mean, var, eps, momentum);
}

ValueId layer_norm(Builder& b, ValueId x, const std::string& name, float eps) {
  const Shape& s = b.shape(x);
  CAMPO_CHECK(!s.empty(), "layer_norm '", b.scoped(name),
              "': x must have at least one dimension (normalised over the last), got a scalar");
  const int64_t c = s.back();
  auto scope = b.scope(name);
  ValueId scale = b.variable("weight", {c}, Init::ones());
  ValueId offset = b.variable("bias", {c}, Init::zeros());
  return b.layer_norm(x, scale, offset, eps);
}

}  // namespace campo::layers
