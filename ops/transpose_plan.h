// The plan of a Transpose, shared by the CPU and CUDA kernels: dims of size 1 are dropped
// and output dims that are consecutive in x as well are merged ({0, 2, 1, 3} on [B, T, H, d]
// stays 4-D, but {0, 1, 3, 2} on [B, H, T, d] becomes [B*H, d, T] from [B*H, T, d]). y is
// then dims[0] x ... x dims[k-1], row-major, and y's dim d steps strides[d] elements in x.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace campo {

struct TransposePlan {
  std::vector<int64_t> dims;     // y's simplified dims
  std::vector<int64_t> strides;  // their strides in x
};

inline TransposePlan make_transpose_plan(const Shape& in, const std::vector<int>& perm) {
  std::vector<int64_t> x_stride(in.size(), 1);
  for (int d = int(in.size()) - 2; d >= 0; --d)
    x_stride[size_t(d)] = x_stride[size_t(d) + 1] * in[size_t(d) + 1];
  // Output dims (as x's dim indices) without size-1 dims; output dim p joins the group
  // before it when it lies right inside that group's last dim in x's memory.
  std::vector<std::vector<int>> groups;
  for (int p : perm) {
    if (in[size_t(p)] == 1) continue;
    if (!groups.empty() &&
        x_stride[size_t(groups.back().back())] == x_stride[size_t(p)] * in[size_t(p)])
      groups.back().push_back(p);
    else
      groups.push_back({p});
  }
  // Each group's size, and its stride in x (that of its last dim).
  TransposePlan plan;
  for (const auto& g : groups) {
    int64_t size = 1;
    for (int d : g) size *= in[size_t(d)];
    plan.dims.push_back(size);
    plan.strides.push_back(x_stride[size_t(g.back())]);
  }
  return plan;
}

}  // namespace campo
