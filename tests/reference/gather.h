// Naive references for GatherV2 (axis 0) and UnsortedSegmentSum on host f32 tensors with i32
// indices: every output element computed by its full index, one at a time; sums in double,
// in ascending order of the data row.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace campo::reference {

// y[i..., d...] = params[indices[i...], d...].
inline Tensor gather(const Tensor& params, const Tensor& indices) {
  Shape out = indices.shape();
  out.insert(out.end(), params.shape().begin() + 1, params.shape().end());
  const int64_t row = params.numel() / params.dim(0);
  Tensor y = Tensor::zeros(out, DType::f32);
  for (int64_t e = 0; e < y.numel(); ++e) {
    const int64_t i = e / row, d = e % row;  // which index, which element of its row
    const int32_t r = indices.data_as<int32_t>()[i];
    y.data_as<float>()[e] = params.data_as<float>()[r * row + d];
  }
  return y;
}

// y[s, d...] = sum over i with segment_ids[i...] == s of data[i..., d...].
inline Tensor unsorted_segment_sum(const Tensor& data, const Tensor& segment_ids,
                                   int64_t num_segments) {
  const int64_t n = segment_ids.numel();
  const int64_t row = n > 0 ? data.numel() / n : 0;
  Shape out = {num_segments};
  out.insert(out.end(), data.shape().begin() + std::ptrdiff_t(segment_ids.shape().size()),
             data.shape().end());
  Tensor y = Tensor::zeros(out, DType::f32);
  for (int64_t s = 0; s < num_segments; ++s)
    for (int64_t d = 0; d < row; ++d) {
      double sum = 0;
      for (int64_t i = 0; i < n; ++i)
        if (segment_ids.data_as<int32_t>()[i] == s) sum += data.data_as<float>()[i * row + d];
      y.data_as<float>()[s * row + d] = float(sum);
    }
  return y;
}

}  // namespace campo::reference
