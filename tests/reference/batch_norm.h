// Naive batch-norm reference (the specification of FusedBatchNorm / FusedBatchNormGrad):
// plain loops over [N, C, S] (S = H * W, or 1 for [N, C]) in double.
#pragma once

#include <cmath>
#include <vector>

#include "runtime/tensor.h"

namespace campo::reference {

struct BatchNormForward {
  Tensor y;             // x's shape
  Tensor mean;          // [C] batch mean (training) or running mean (inference)
  Tensor inv_std;       // [C] 1 / sqrt(var + eps), var biased (training) or running
  Tensor unbiased_var;  // [C] batch variance * M / (M - 1) (training only)
};

inline void bn_dims(const Tensor& x, int64_t& n, int64_t& c, int64_t& s) {
  n = x.dim(0);
  c = x.dim(1);
  s = x.rank() == 4 ? x.dim(2) * x.dim(3) : 1;
}

// Training: statistics of the batch. Inference: running_mean / running_var.
inline BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& scale,
                                           const Tensor& offset, const Tensor& running_mean,
                                           const Tensor& running_var, double eps,
                                           bool is_training) {
  int64_t N, C, S;
  bn_dims(x, N, C, S);
  const std::vector<float> xv = x.to_float_vector(), g = scale.to_float_vector(),
                           b = offset.to_float_vector(), rm = running_mean.to_float_vector(),
                           rv = running_var.to_float_vector();
  std::vector<float> y(xv.size()), mean(C), inv_std(C), unbiased(C);
  const double m = double(N * S);
  for (int64_t c = 0; c < C; ++c) {
    double mu = rm[c], var = rv[c];
    if (is_training) {
      double sum = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) sum += xv[(n * C + c) * S + s];
      mu = sum / m;
      double sq = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          double d = xv[(n * C + c) * S + s] - mu;
          sq += d * d;
        }
      var = sq / m;
      unbiased[c] = float(sq / (m - 1));
    }
    double istd = 1.0 / std::sqrt(var + eps);
    mean[c] = float(mu);
    inv_std[c] = float(istd);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        int64_t i = (n * C + c) * S + s;
        y[i] = float(g[c] * (xv[i] - mu) * istd + b[c]);
      }
  }
  return {Tensor::from_vector(y, x.shape()), Tensor::from_vector(mean, {C}),
          Tensor::from_vector(inv_std, {C}), Tensor::from_vector(unbiased, {C})};
}

struct BatchNormBackward {
  Tensor dx, dscale, doffset;
};

// xhat = (x - mean) * inv_std; doffset = sum dy; dscale = sum dy * xhat;
// training:  dx = scale * inv_std * (dy - doffset / M - xhat * dscale / M)
// inference: dx = scale * inv_std * dy
inline BatchNormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& scale,
                                             const Tensor& mean, const Tensor& inv_std,
                                             bool is_training) {
  int64_t N, C, S;
  bn_dims(x, N, C, S);
  const std::vector<float> dyv = dy.to_float_vector(), xv = x.to_float_vector(),
                           g = scale.to_float_vector(), mu = mean.to_float_vector(),
                           is = inv_std.to_float_vector();
  std::vector<float> dx(xv.size()), dscale(C), doffset(C);
  const double m = double(N * S);
  for (int64_t c = 0; c < C; ++c) {
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        int64_t i = (n * C + c) * S + s;
        sum_dy += dyv[i];
        sum_dy_xhat += dyv[i] * (xv[i] - double(mu[c])) * is[c];
      }
    dscale[c] = float(sum_dy_xhat);
    doffset[c] = float(sum_dy);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        int64_t i = (n * C + c) * S + s;
        double xhat = (xv[i] - double(mu[c])) * is[c];
        double d = is_training ? dyv[i] - sum_dy / m - xhat * sum_dy_xhat / m : dyv[i];
        dx[i] = float(double(g[c]) * is[c] * d);
      }
  }
  return {Tensor::from_vector(dx, x.shape()), Tensor::from_vector(dscale, {C}),
          Tensor::from_vector(doffset, {C})};
}

}  // namespace campo::reference
