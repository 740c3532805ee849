#include "models/layers.h"

#include <cmath>

namespace campo::layers {
namespace {

// Channels per model of x's axis 1 in a model array of b.array_size() models.
int64_t per_model(Builder& b, int64_t channels, const std::string& layer, const Shape& s) {
  const int n = b.array_size();
  CAMPO_CHECK(channels % n == 0, "layer '", b.scoped(layer), "': axis 1 of ", shape_str(s),
              " does not hold ", n, " models' equal blocks");
  return channels / n;
}

}  // namespace

ValueId linear(Builder& b, ValueId x, int64_t out_features, const std::string& name, bool bias,
               std::optional<Init> weight_init, std::optional<Init> bias_init) {
  const Shape s = b.shape(x);
  CAMPO_CHECK(s.size() == 2, "linear layer '", name, "' expects [N, features], got ", shape_str(s));
  const int64_t models = b.array_size();
  const int64_t in = per_model(b, s[1], name, s);
  auto scope = b.scope(name);
  const Init w_init = weight_init.value_or(Init::pytorch_default(in));
  ValueId y;
  if (models == 1) {
    y = b.matmul(x, b.variable("weight", {out_features, in}, w_init), false, true);
  } else {
    // A model array: x [N, models * in] -> [models, N, in], one batched product with the
    // stacked weights [models, out, in] (each model's slice its own nn.Linear weight), back to
    // [N, models * out].
    ValueId w = b.variable("weight", {models, out_features, in}, w_init);
    ValueId xm = b.transpose(b.reshape(x, {s[0], models, in}), {1, 0, 2});
    ValueId ym = b.batch_matmul(xm, w, false, true);
    y = b.reshape(b.transpose(ym, {1, 0, 2}), {s[0], models * out_features});
  }
  if (bias)
    y = b.bias_add(y, b.variable("bias", {models * out_features},
                                 bias_init.value_or(Init::pytorch_default(in))));
  return y;
}

ValueId conv2d(Builder& b, ValueId x, const Conv& c, const std::string& name) {
  const Shape s = b.shape(x);
  CAMPO_CHECK(s.size() == 4, "conv layer '", name, "' expects NCHW input, got ", shape_str(s));
  // A model array of n models is one convolution with n times the groups over the stacked
  // channels: weight [n * out, in / groups, kh, kw], model i's filters in slice i.
  const int64_t models = b.array_size();
  const int64_t in = per_model(b, s[1], name, s);
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
  ValueId w = b.variable("weight", {models * c.out_channels, in / c.groups, kh, kw}, w_init);
  ConvAttrs a;
  a.stride_h = a.stride_w = c.stride;
  a.pad_h = ph;
  a.pad_w = pw;
  a.dilation_h = a.dilation_w = c.dilation;
  a.groups = int(models) * c.groups;
  ValueId y = b.conv2d(x, w, a);
  if (c.bias) {
    Init b_init = c.kaiming || c.weight_init ? Init::zeros() : Init::pytorch_default(fan_in);
    y = b.bias_add(y, b.variable("bias", {models * c.out_channels}, b_init));
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
  // A model array: groups n over the stacked channels, weight [n * in, out, k, k].
  const int64_t models = b.array_size();
  const int64_t in = per_model(b, s[1], name, s);
  auto scope = b.scope(name);
  // PyTorch computes ConvTranspose2d's fan_in from weight.size(1) * k * k = out * k * k.
  const int64_t fan = c.out_channels * c.kernel * c.kernel;
  ValueId w = b.variable("weight", {models * in, c.out_channels, c.kernel, c.kernel},
                         c.weight_init.value_or(Init::pytorch_default(fan)));
  ConvAttrs a;
  a.stride_h = a.stride_w = c.stride;
  a.pad_h = a.pad_w = c.pad;
  a.groups = int(models);
  a.output_shape = {s[0], models * c.out_channels, ho, wo};
  ValueId y = b.conv2d_transpose(x, w, a);
  if (c.bias) {
    Init b_init = c.weight_init ? Init::zeros() : Init::pytorch_default(fan);
    y = b.bias_add(y, b.variable("bias", {models * c.out_channels}, b_init));
  }
  return y;
}

// Batch norm's statistics are per channel, so a model array's stacked channels [n * C] are
// already n independent batch norms.
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
  CAMPO_CHECK(b.array_size() == 1, "layer_norm '", b.scoped(name),
              "': model arrays do not support layer normalisation (it normalises over the "
              "last axis, across the stacked models)");
  const int64_t c = s.back();
  auto scope = b.scope(name);
  ValueId scale = b.variable("weight", {c}, Init::ones());
  ValueId offset = b.variable("bias", {c}, Init::zeros());
  return b.layer_norm(x, scale, offset, eps);
}

}  // namespace campo::layers
