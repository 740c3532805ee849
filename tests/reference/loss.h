// Naive references (the specification) for the losses, in double.
//  softmax cross entropy: loss_n = log(sum_c exp(x_nc)) - x_n,label (with max subtraction),
//    backprop = softmax(x) - onehot(label);
//  sigmoid cross entropy: loss = -z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x)), in the
//    stable form max(x, 0) - x z + log(1 + exp(-|x|)); gradient dloss (sigmoid(x) - z).
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>

#include "runtime/tensor.h"

namespace campo::reference {

// Returns {loss [N], backprop [N, C]}.
inline std::pair<Tensor, Tensor> sparse_softmax_cross_entropy(const Tensor& logits,
                                                              const Tensor& labels) {
  const int64_t N = logits.dim(0), C = logits.dim(1);
  Tensor loss = Tensor::empty({N}, DType::f32);
  Tensor backprop = Tensor::empty({N, C}, DType::f32);
  const float* x = logits.data_as<float>();
  for (int64_t n = 0; n < N; ++n) {
    double m = x[n * C];
    for (int64_t c = 1; c < C; ++c) m = std::max(m, double(x[n * C + c]));
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += std::exp(double(x[n * C + c]) - m);
    const int32_t label = labels.data_as<int32_t>()[n];
    loss.data_as<float>()[n] = float(std::log(s) + m - double(x[n * C + label]));
    for (int64_t c = 0; c < C; ++c)
      backprop.data_as<float>()[n * C + c] =
          float(std::exp(double(x[n * C + c]) - m) / s - (c == label ? 1.0 : 0.0));
  }
  return {loss, backprop};
}

inline Tensor sigmoid_cross_entropy(const Tensor& logits, const Tensor& targets) {
  Tensor loss = Tensor::empty(logits.shape(), DType::f32);
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const double x = logits.data_as<float>()[i], z = targets.data_as<float>()[i];
    loss.data_as<float>()[i] =
        float(std::max(x, 0.0) - x * z + std::log1p(std::exp(-std::fabs(x))));
  }
  return loss;
}

inline Tensor sigmoid_cross_entropy_grad(const Tensor& dloss, const Tensor& logits,
                                         const Tensor& targets) {
  Tensor dx = Tensor::empty(logits.shape(), DType::f32);
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const double x = logits.data_as<float>()[i], z = targets.data_as<float>()[i];
    const double sigmoid = 1.0 / (1.0 + std::exp(-x));
    dx.data_as<float>()[i] = float(dloss.data_as<float>()[i] * (sigmoid - z));
  }
  return dx;
}

}  // namespace campo::reference
