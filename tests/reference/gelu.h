// Naive references (the specification) for Gelu / GeluGrad, exact (erf) and approximate
// (tanh): element by element over host f32 tensors, math in double.
#pragma once

#include <cmath>

#include "runtime/tensor.h"

namespace campo::reference {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)

// Exact: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)));
// approximate: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline double gelu(double x, bool approximate) {
  if (approximate) return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}
inline double gelu_derivative(double x, bool approximate) {
  if (approximate) {
    const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + t) +
           0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
  }
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * pdf;
}
inline Tensor gelu(const Tensor& x, bool approximate) {
  Tensor y = Tensor::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i)
    y.data_as<float>()[i] = float(gelu(double(x.data_as<float>()[i]), approximate));
  return y;
}
// inputs dY, X: dX = dY * gelu'(X).
inline Tensor gelu_grad(const Tensor& dy, const Tensor& x, bool approximate) {
  Tensor dx = Tensor::empty(x.shape(), DType::f32);
  for (int64_t i = 0; i < x.numel(); ++i)
    dx.data_as<float>()[i] = float(double(dy.data_as<float>()[i]) *
                                   gelu_derivative(double(x.data_as<float>()[i]), approximate));
  return dx;
}

}  // namespace campo::reference
