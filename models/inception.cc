// Inception-v3 as torchvision builds it (Szegedy et al. 2016), with torchvision's
// state_dict names: BasicConv2d blocks (`<name>.conv` without bias, `<name>.bn` with eps
// 0.001, ReLU), the stem Conv2d_1a_3x3 .. Conv2d_4a_3x3 with two 3x3/2 max-pools, Mixed_5b
// .. Mixed_5d (InceptionA), Mixed_6a (InceptionB), Mixed_6b .. Mixed_6e (InceptionC),
// AuxLogits (InceptionAux, on Mixed_6e's map), Mixed_7a (InceptionD), Mixed_7b, Mixed_7c
// (InceptionE), global average pooling, Dropout(0.5) and fc. 27,161,264 parameters with the
// auxiliary classifier for 1000 classes (23,834,568 without).
// The branches of a block are concatenated along channels in torchvision's order; its
// average-pool branch pools 3x3/1 with padding 1 counting the padding (PyTorch's
// count_include_pad default).
// Initialisation as torchvision's init_weights: every conv and linear weight from a normal
// of std 0.1 (AuxLogits.conv1 0.01, AuxLogits.fc 0.001) truncated to [-2, 2] -- at these
// stds the truncation never bites, so it is drawn as a plain normal; biases of the two
// linear layers keep PyTorch's default; BN weight 1, bias 0.
// The auxiliary classifier pools Mixed_6e's map 5x5/3 and convolves it 5x5, so it needs
// that map to be at least 17x17: inputs of 299 px or more (torchvision's size). It is built
// when ModelOptions::aux_logits is set and the input is that large (smaller inputs give
// torchvision's aux_logits=False model); a training graph adds its loss to the main one
// with weight 0.4, as torchvision's reference recipe, and inference graphs drop it.
// Inputs below 75 px are refused (the stem and the two reduction blocks need them).
#include "models/layers.h"
#include "models/models.h"

namespace campo {
namespace {

constexpr float kBnEps = 0.001f;

// BasicConv2d: conv (no bias) + BN(eps 0.001) + ReLU under `name`.
struct Basic {
  int64_t out;
  int kh = 1, kw = 1;
  int stride = 1;
  int ph = 0, pw = 0;
  float stddev = 0.1f;
};

ValueId basic_conv(Builder& b, ValueId x, const std::string& name, const Basic& c) {
  auto scope = b.scope(name);
  layers::Conv conv{.out_channels = c.out,
                    .stride = c.stride,
                    .bias = false,
                    .weight_init = Init::normal(0.0f, c.stddev),
                    .kernel_h = c.kh,
                    .kernel_w = c.kw,
                    .pad_h = c.ph,
                    .pad_w = c.pw};
  x = layers::conv2d(b, x, conv, "conv");
  return b.relu(layers::batch_norm(b, x, "bn", kBnEps));
}

Basic k1(int64_t out) { return {.out = out}; }
Basic k3(int64_t out, int stride = 1, int pad = 0) {
  return {.out = out, .kh = 3, .kw = 3, .stride = stride, .ph = pad, .pw = pad};
}
Basic k1x7(int64_t out) { return {.out = out, .kh = 1, .kw = 7, .ph = 0, .pw = 3}; }
Basic k7x1(int64_t out) { return {.out = out, .kh = 7, .kw = 1, .ph = 3, .pw = 0}; }
Basic k1x3(int64_t out) { return {.out = out, .kh = 1, .kw = 3, .ph = 0, .pw = 1}; }
Basic k3x1(int64_t out) { return {.out = out, .kh = 3, .kw = 1, .ph = 1, .pw = 0}; }

// F.avg_pool2d(x, 3, stride 1, padding 1), padding counted.
ValueId pool_3x3_same(Builder& b, ValueId x) {
  return b.avg_pool(x, 3, 1, 1, /*count_include_pad=*/true);
}

ValueId inception_a(Builder& b, ValueId x, const std::string& name, int64_t pool_features) {
  auto scope = b.scope(name);
  ValueId b1 = basic_conv(b, x, "branch1x1", k1(64));
  ValueId b5 = basic_conv(b, x, "branch5x5_1", k1(48));
  b5 = basic_conv(b, b5, "branch5x5_2", {.out = 64, .kh = 5, .kw = 5, .ph = 2, .pw = 2});
  ValueId b3 = basic_conv(b, x, "branch3x3dbl_1", k1(64));
  b3 = basic_conv(b, b3, "branch3x3dbl_2", k3(96, 1, 1));
  b3 = basic_conv(b, b3, "branch3x3dbl_3", k3(96, 1, 1));
  ValueId bp = basic_conv(b, pool_3x3_same(b, x), "branch_pool", k1(pool_features));
  return b.concat({b1, b5, b3, bp}, 1);
}

ValueId inception_b(Builder& b, ValueId x, const std::string& name) {
  auto scope = b.scope(name);
  ValueId b3 = basic_conv(b, x, "branch3x3", k3(384, 2));
  ValueId bd = basic_conv(b, x, "branch3x3dbl_1", k1(64));
  bd = basic_conv(b, bd, "branch3x3dbl_2", k3(96, 1, 1));
  bd = basic_conv(b, bd, "branch3x3dbl_3", k3(96, 2));
  return b.concat({b3, bd, b.max_pool(x, 3, 2)}, 1);
}

ValueId inception_c(Builder& b, ValueId x, const std::string& name, int64_t c7) {
  auto scope = b.scope(name);
  ValueId b1 = basic_conv(b, x, "branch1x1", k1(192));
  ValueId b7 = basic_conv(b, x, "branch7x7_1", k1(c7));
  b7 = basic_conv(b, b7, "branch7x7_2", k1x7(c7));
  b7 = basic_conv(b, b7, "branch7x7_3", k7x1(192));
  ValueId bd = basic_conv(b, x, "branch7x7dbl_1", k1(c7));
  bd = basic_conv(b, bd, "branch7x7dbl_2", k7x1(c7));
  bd = basic_conv(b, bd, "branch7x7dbl_3", k1x7(c7));
  bd = basic_conv(b, bd, "branch7x7dbl_4", k7x1(c7));
  bd = basic_conv(b, bd, "branch7x7dbl_5", k1x7(192));
  ValueId bp = basic_conv(b, pool_3x3_same(b, x), "branch_pool", k1(192));
  return b.concat({b1, b7, bd, bp}, 1);
}

ValueId inception_d(Builder& b, ValueId x, const std::string& name) {
  auto scope = b.scope(name);
  ValueId b3 = basic_conv(b, x, "branch3x3_1", k1(192));
  b3 = basic_conv(b, b3, "branch3x3_2", k3(320, 2));
  ValueId b7 = basic_conv(b, x, "branch7x7x3_1", k1(192));
  b7 = basic_conv(b, b7, "branch7x7x3_2", k1x7(192));
  b7 = basic_conv(b, b7, "branch7x7x3_3", k7x1(192));
  b7 = basic_conv(b, b7, "branch7x7x3_4", k3(192, 2));
  return b.concat({b3, b7, b.max_pool(x, 3, 2)}, 1);
}

ValueId inception_e(Builder& b, ValueId x, const std::string& name) {
  auto scope = b.scope(name);
  ValueId b1 = basic_conv(b, x, "branch1x1", k1(320));
  ValueId b3 = basic_conv(b, x, "branch3x3_1", k1(384));
  b3 = b.concat(
      {basic_conv(b, b3, "branch3x3_2a", k1x3(384)), basic_conv(b, b3, "branch3x3_2b", k3x1(384))},
      1);
  ValueId bd = basic_conv(b, x, "branch3x3dbl_1", k1(448));
  bd = basic_conv(b, bd, "branch3x3dbl_2", k3(384, 1, 1));
  bd = b.concat({basic_conv(b, bd, "branch3x3dbl_3a", k1x3(384)),
                 basic_conv(b, bd, "branch3x3dbl_3b", k3x1(384))},
                1);
  ValueId bp = basic_conv(b, pool_3x3_same(b, x), "branch_pool", k1(192));
  return b.concat({b1, b3, bd, bp}, 1);
}

// InceptionAux on Mixed_6e's map: avg-pool 5x5/3, 1x1 conv to 128, 5x5 conv to 768,
// global average pooling, fc.
ValueId inception_aux(Builder& b, ValueId x, int64_t classes) {
  auto scope = b.scope("AuxLogits");
  x = b.avg_pool(x, 5, 3);
  x = basic_conv(b, x, "conv0", k1(128));
  x = basic_conv(b, x, "conv1", {.out = 768, .kh = 5, .kw = 5, .stddev = 0.01f});
  x = b.flatten(b.global_avg_pool(x));
  return layers::linear(b, x, classes, "fc", true, Init::normal(0.0f, 0.001f));
}

}  // namespace

ModelOutputs build_inception_v3(Builder& b, ValueId images, const ModelOptions& o) {
  const Shape s = b.shape(images);
  CAMPO_CHECK(s.size() == 4, "inception_v3 expects images [N, C, H, W], got ", shape_str(s));
  CAMPO_CHECK(o.num_classes > 0, "inception_v3: num_classes must be positive, got ", o.num_classes);
  CAMPO_CHECK(s[2] >= 75 && s[3] >= 75, "inception_v3 needs images of at least 75x75, got ",
              shape_str(s), " (use --image-size 75 or more; 299 is torchvision's size)");
  ValueId x = images;
  x = basic_conv(b, x, "Conv2d_1a_3x3", k3(32, 2));
  x = basic_conv(b, x, "Conv2d_2a_3x3", k3(32));
  x = basic_conv(b, x, "Conv2d_2b_3x3", k3(64, 1, 1));
  x = b.max_pool(x, 3, 2);
  x = basic_conv(b, x, "Conv2d_3b_1x1", k1(80));
  x = basic_conv(b, x, "Conv2d_4a_3x3", k3(192));
  x = b.max_pool(x, 3, 2);
  x = inception_a(b, x, "Mixed_5b", 32);
  x = inception_a(b, x, "Mixed_5c", 64);
  x = inception_a(b, x, "Mixed_5d", 64);
  x = inception_b(b, x, "Mixed_6a");
  x = inception_c(b, x, "Mixed_6b", 128);
  x = inception_c(b, x, "Mixed_6c", 160);
  x = inception_c(b, x, "Mixed_6d", 160);
  x = inception_c(b, x, "Mixed_6e", 192);
  ModelOutputs out;
  const Shape m = b.shape(x);
  if (o.aux_logits && m[2] >= 17 && m[3] >= 17)
    out.auxiliary.push_back({inception_aux(b, x, o.num_classes), 0.4f});
  x = inception_d(b, x, "Mixed_7a");
  x = inception_e(b, x, "Mixed_7b");
  x = inception_e(b, x, "Mixed_7c");
  x = b.dropout(b.flatten(b.global_avg_pool(x)), 0.5f);
  out.logits = layers::linear(b, x, o.num_classes, "fc", true, Init::normal(0.0f, 0.1f));
  return out;
}

}  // namespace campo
