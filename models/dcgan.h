// DCGAN (Radford et al. 2016) as PyTorch's examples/dcgan/main.py builds it, in one
// VariableStore: the generator's variables are named "netG." + its state_dict name and the
// discriminator's "netD." + its state_dict name ("netG.main.0.weight", "netD.main.3.bias"),
// so a PyTorch checkpoint maps over by stripping the prefix.
//
// Generator G(z), z ~ N(0, 1) of shape [N, nz, 1, 1] (or [N, nz]), for S = 64:
//   main.0  ConvTranspose2d(nz, 8 ngf, 4, 1, 0)      -> 4x4     main.1 BN, main.2 ReLU
//   main.3  ConvTranspose2d(8 ngf, 4 ngf, 4, 2, 1)   -> 8x8     main.4 BN, main.5 ReLU
//   main.6  ConvTranspose2d(4 ngf, 2 ngf, 4, 2, 1)   -> 16x16   main.7 BN, main.8 ReLU
//   main.9  ConvTranspose2d(2 ngf, ngf, 4, 2, 1)     -> 32x32   main.10 BN, main.11 ReLU
//   main.12 ConvTranspose2d(ngf, nc, 4, 2, 1)        -> 64x64   main.13 Tanh
// Discriminator D(x) for S = 64:
//   main.0  Conv2d(nc, ndf, 4, 2, 1)                 -> 32x32   main.1 LeakyReLU(0.2)
//   main.2  Conv2d(ndf, 2 ndf, 4, 2, 1)              -> 16x16   main.3 BN, main.4 LeakyReLU
//   main.5  Conv2d(2 ndf, 4 ndf, 4, 2, 1)            -> 8x8     main.6 BN, main.7 LeakyReLU
//   main.8  Conv2d(4 ndf, 8 ndf, 4, 2, 1)            -> 4x4     main.9 BN, main.10 LeakyReLU
//   main.11 Conv2d(8 ndf, 1, 4, 1, 0)                -> 1x1     (the example's main.12
//           Sigmoid is left out: D returns logits [N] for SigmoidCrossEntropyWithLogits)
// Other power-of-two sizes add or drop one 2x up/down-sampling stage per factor of two
// and keep the widths of the stages nearest the image: S = 32 is G: ConvT(nz, 4 ngf) at 4x4,
// 2 ngf at 8x8, ngf at 16x16, nc at 32x32; D: ndf at 16x16, 2 ndf at 8x8, 4 ndf at 4x4,
// 1 logit; numbering continues the same way (G main.0..main.10, D main.0..main.8).
// No convolution has a bias. Initialisation as the example's weights_init: conv weights
// N(0, 0.02), BN weight N(1, 0.02), BN bias 0.
// With nz 100, ngf = ndf = 64, nc 3 and S 64: G has 3,576,704 parameters, D 2,765,568.
#pragma once

#include <string>
#include <vector>

#include "graph/builder.h"

namespace campo {

inline constexpr const char* kGeneratorScope = "netG";
inline constexpr const char* kDiscriminatorScope = "netD";
// The DCGAN paper's Adam beta1 (beta2 stays 0.999).
inline constexpr float kDcganAdamBeta1 = 0.5f;

struct DcganOptions {
  int image_size = 64;  // S: a power of two, 16..256 (the paper's 64, or 32)
  int channels = 3;     // nc
  int nz = 100;         // latent size
  int ngf = 64;         // generator width
  int ndf = 64;         // discriminator width
};

// Throws a campo::Error naming the first bad option.
void check_dcgan_options(const DcganOptions& o);

// z [N, nz, 1, 1] or [N, nz] -> images [N, nc, S, S] in (-1, 1). Opens the "netG" scope.
ValueId build_dcgan_generator(Builder& b, ValueId z, const DcganOptions& o);
// images [N, nc, S, S] -> logits [N] (D's probability is their sigmoid). Opens "netD".
// In a model array of M models (Builder::array_size, train/model_array.h) both stack the
// models along axis 1: G takes z [N, M nz(, 1, 1)] and returns [N, M nc, S, S], D takes
// [N, M nc, S, S] and returns logits [N, M].
ValueId build_dcgan_discriminator(Builder& b, ValueId images, const DcganOptions& o);

// The parameter names of one network ("netG" or "netD") in the store, in creation order.
std::vector<std::string> dcgan_parameter_names(const VariableStore& vars, const std::string& net);

}  // namespace campo
