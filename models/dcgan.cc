#include "models/dcgan.h"

#include "models/layers.h"

namespace campo {
namespace {

constexpr float kInitStd = 0.02f;
constexpr float kLeakySlope = 0.2f;

// log2(S) - 2: G's ConvTranspose+BN+ReLU layers before its final one (4x4 up to S/2), and
// D's strided convs before its final one (S/2 down to 4x4; all but the first with BN).
// S = 64 gives 4, S = 32 gives 3.
int num_stages(int image_size) {
  int stages = 0;
  for (int s = image_size; s > 4; s /= 2) ++stages;
  return stages;
}

ValueId bn(Builder& b, ValueId x, int index) {
  return layers::batch_norm(b, x, std::to_string(index), 1e-5f, 0.1f, Init::normal(1.0f, kInitStd));
}

}  // namespace

void check_dcgan_options(const DcganOptions& o) {
  const int s = o.image_size;
  CAMPO_CHECK(s >= 16 && s <= 256 && (s & (s - 1)) == 0,
              "DCGAN image size must be a power of two from 16 to 256 (64 as in the paper, or "
              "32), got ",
              s);
  CAMPO_CHECK(o.channels >= 1, "DCGAN channels must be positive, got ", o.channels);
  CAMPO_CHECK(o.nz >= 1, "DCGAN latent size nz must be positive, got ", o.nz);
  CAMPO_CHECK(o.ngf >= 1 && o.ndf >= 1, "DCGAN widths ngf/ndf must be positive, got ngf ", o.ngf,
              ", ndf ", o.ndf);
}

ValueId build_dcgan_generator(Builder& b, ValueId z, const DcganOptions& o) {
  check_dcgan_options(o);
  const Shape zs = b.shape(z);
  // A model array (Builder::array_size) stacks its models' noise along axis 1.
  const int64_t nz = int64_t(b.array_size()) * o.nz;
  CAMPO_CHECK((zs.size() == 2 && zs[1] == nz) ||
                  (zs.size() == 4 && zs[1] == nz && zs[2] == 1 && zs[3] == 1),
              "DCGAN generator expects noise [N, ", nz, ", 1, 1] or [N, ", nz, "], got ",
              shape_str(zs));
  auto net = b.scope(kGeneratorScope);
  auto main = b.scope("main");
  ValueId x = zs.size() == 2 ? b.reshape(z, {zs[0], nz, 1, 1}) : z;
  const int stages = num_stages(o.image_size);
  const Init w_init = Init::normal(0.0f, kInitStd);
  int index = 0;
  for (int i = 0; i < stages; ++i) {
    const int64_t width = int64_t(o.ngf) << (stages - 1 - i);  // ..., 4 ngf, 2 ngf, ngf
    // The first layer maps 1x1 to 4x4 (stride 1, no padding); later ones double the size.
    const bool first = i == 0;
    x = layers::conv_transpose2d(b, x,
                                 {.out_channels = width,
                                  .kernel = 4,
                                  .stride = first ? 1 : 2,
                                  .pad = first ? 0 : 1,
                                  .weight_init = w_init},
                                 std::to_string(index));
    x = b.relu(bn(b, x, index + 1));
    index += 3;
  }
  x = layers::conv_transpose2d(
      b, x, {.out_channels = o.channels, .kernel = 4, .stride = 2, .pad = 1, .weight_init = w_init},
      std::to_string(index));
  return b.tanh(x);
}

ValueId build_dcgan_discriminator(Builder& b, ValueId images, const DcganOptions& o) {
  check_dcgan_options(o);
  const Shape s = b.shape(images);
  // A model array stacks its models' images along axis 1 and returns logits [N, models].
  const int64_t models = b.array_size();
  const int64_t channels = models * o.channels;
  CAMPO_CHECK(s.size() == 4 && s[1] == channels && s[2] == o.image_size && s[3] == o.image_size,
              "DCGAN discriminator expects images [N, ", channels, ", ", o.image_size, ", ",
              o.image_size, "], got ", shape_str(s));
  const int64_t n = s[0];
  auto net = b.scope(kDiscriminatorScope);
  auto main = b.scope("main");
  const int stages = num_stages(o.image_size);
  const Init w_init = Init::normal(0.0f, kInitStd);
  ValueId x = layers::conv2d(b, images,
                             {.out_channels = o.ndf,
                              .kernel = 4,
                              .stride = 2,
                              .pad = 1,
                              .bias = false,
                              .weight_init = w_init},
                             "0");
  x = b.leaky_relu(x, kLeakySlope);
  int index = 2;
  for (int i = 1; i < stages; ++i) {
    const int64_t width = int64_t(o.ndf) << i;  // 2 ndf, 4 ndf, ...
    x = layers::conv2d(b, x,
                       {.out_channels = width,
                        .kernel = 4,
                        .stride = 2,
                        .pad = 1,
                        .bias = false,
                        .weight_init = w_init},
                       std::to_string(index));
    x = b.leaky_relu(bn(b, x, index + 1), kLeakySlope);
    index += 3;
  }
  x = layers::conv2d(
      b, x,
      {.out_channels = 1, .kernel = 4, .stride = 1, .pad = 0, .bias = false, .weight_init = w_init},
      std::to_string(index));
  CAMPO_CHECK(b.shape(x) == Shape({n, models, 1, 1}), "internal: DCGAN discriminator output ",
              shape_str(b.shape(x)));
  return models == 1 ? b.reshape(x, {n}) : b.reshape(x, {n, models});
}

std::vector<std::string> dcgan_parameter_names(const VariableStore& vars, const std::string& net) {
  const std::string prefix = net + ".";
  std::vector<std::string> out;
  for (const std::string& name : vars.names_of_kind(VariableKind::parameter))
    if (name.compare(0, prefix.size(), prefix) == 0) out.push_back(name);
  return out;
}

}  // namespace campo
