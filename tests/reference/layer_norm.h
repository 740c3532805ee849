// Naive layer-norm reference (the specification of LayerNorm / LayerNormGrad): normalise
// each row of the last axis, math in double, biased variance as PyTorch's nn.LayerNorm.
#pragma once

#include <cmath>
#include <vector>

#include "runtime/tensor.h"

namespace campo::reference {

struct LayerNormOut {
  Tensor y, mean, inv_std;
};

inline LayerNormOut layer_norm(const Tensor& x, const Tensor& scale, const Tensor& offset,
                               double eps) {
  const Shape& s = x.shape();
  const int64_t c = s.back(), rows = x.numel() / c;
  const Shape row_shape(s.begin(), s.end() - 1);
  LayerNormOut o{Tensor::empty(s, DType::f32), Tensor::empty(row_shape, DType::f32),
                 Tensor::empty(row_shape, DType::f32)};
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data_as<float>() + r * c;
    double m = 0, v = 0;
    for (int64_t i = 0; i < c; ++i) m += xr[i];
    m /= double(c);
    for (int64_t i = 0; i < c; ++i) v += (xr[i] - m) * (xr[i] - m);
    v /= double(c);
    const double inv_std = 1.0 / std::sqrt(v + eps);
    o.mean.data_as<float>()[r] = float(m);
    o.inv_std.data_as<float>()[r] = float(inv_std);
    for (int64_t i = 0; i < c; ++i)
      o.y.data_as<float>()[r * c + i] =
          float((xr[i] - m) * inv_std * scale.data_as<float>()[i] + offset.data_as<float>()[i]);
  }
  return o;
}

struct LayerNormGradOut {
  Tensor dx, dscale, doffset;
};

// The statistics are recomputed from x (in double); xhat = (x - mean) inv_std, g = dy scale:
//   dx = inv_std (g - mean(g) - xhat mean(g xhat)),  dscale = sum dy xhat,  doffset = sum dy.
inline LayerNormGradOut layer_norm_grad(const Tensor& dy, const Tensor& x, const Tensor& scale,
                                        double eps) {
  const int64_t c = x.shape().back(), rows = x.numel() / c;
  LayerNormGradOut o{Tensor::empty(x.shape(), DType::f32), Tensor::empty({c}, DType::f32),
                     Tensor::empty({c}, DType::f32)};
  std::vector<double> ds(static_cast<size_t>(c), 0.0), db(static_cast<size_t>(c), 0.0),
      xhat(static_cast<size_t>(c), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data_as<float>() + r * c;
    const float* gr = dy.data_as<float>() + r * c;
    double m = 0, v = 0;
    for (int64_t i = 0; i < c; ++i) m += xr[i];
    m /= double(c);
    for (int64_t i = 0; i < c; ++i) v += (xr[i] - m) * (xr[i] - m);
    v /= double(c);
    const double inv_std = 1.0 / std::sqrt(v + eps);
    double mean_g = 0, mean_gx = 0;
    for (int64_t i = 0; i < c; ++i) {
      xhat[size_t(i)] = (xr[i] - m) * inv_std;
      const double g = double(gr[i]) * scale.data_as<float>()[i];
      mean_g += g;
      mean_gx += g * xhat[size_t(i)];
      ds[size_t(i)] += double(gr[i]) * xhat[size_t(i)];
      db[size_t(i)] += gr[i];
    }
    mean_g /= double(c);
    mean_gx /= double(c);
    for (int64_t i = 0; i < c; ++i) {
      const double g = double(gr[i]) * scale.data_as<float>()[i];
      o.dx.data_as<float>()[r * c + i] = float(inv_std * (g - mean_g - xhat[size_t(i)] * mean_gx));
    }
  }
  for (int64_t i = 0; i < c; ++i) {
    o.dscale.data_as<float>()[i] = float(ds[size_t(i)]);
    o.doffset.data_as<float>()[i] = float(db[size_t(i)]);
  }
  return o;
}

}  // namespace campo::reference
