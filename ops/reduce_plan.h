// The plan of a reduction over ReduceAttrs.axes, shared by the CPU and CUDA kernels of Mean /
// Sum / MeanGrad / BroadcastTo: size-1 dims are dropped and adjacent dims of the same kind
// (kept / reduced) merged, so the input is a set of contiguous runs of `inner` elements. The
// innermost merged dim is either reduced (each output sums whole runs) or kept (each run adds
// element-wise into a row of `inner` outputs); the other dims become two offset tables, one
// over kept and one over reduced outer indices. Input element
//   kept_offsets[o] + reduced_offsets[r] + i   (i < inner)
// belongs to output o (inner reduced) or o * inner + i (inner kept).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace campo {

struct ReducePlan {
  bool input_is_empty = false;
  bool inner_is_reduced = true;
  int64_t inner = 1;                        // length of a contiguous run
  std::vector<int64_t> kept_offsets{0};     // input offset of each outer kept index (row-major)
  std::vector<int64_t> reduced_offsets{0};  // input offset of each outer reduced index
  int64_t count = 1;                        // input elements summed into one output
};

inline ReducePlan make_reduce_plan(const Shape& in, const std::vector<int>& axes) {
  const int rank = int(in.size());
  std::vector<bool> reduced(size_t(rank), axes.empty());
  for (int a : axes) reduced[size_t(a < 0 ? a + rank : a)] = true;
  ReducePlan p;
  for (int i = 0; i < rank; ++i)
    if (reduced[size_t(i)]) p.count *= in[size_t(i)];
  if (shape_numel(in) == 0) {
    p.input_is_empty = true;
    return p;
  }
  std::vector<std::pair<int64_t, bool>> dims;  // merged (size, is_reduced)
  for (int i = 0; i < rank; ++i) {
    if (in[size_t(i)] == 1) continue;
    if (!dims.empty() && dims.back().second == reduced[size_t(i)])
      dims.back().first *= in[size_t(i)];
    else
      dims.push_back({in[size_t(i)], reduced[size_t(i)]});
  }
  if (dims.empty()) return p;  // a single element
  p.inner = dims.back().first;
  p.inner_is_reduced = dims.back().second;
  std::vector<int64_t> stride(dims.size());
  int64_t s = 1;
  for (size_t j = dims.size(); j-- > 0;) {
    stride[j] = s;
    s *= dims[j].first;
  }
  auto offsets_of = [&](bool want_reduced) {
    std::vector<int64_t> offs{0};
    for (size_t j = 0; j + 1 < dims.size(); ++j) {
      if (dims[j].second != want_reduced) continue;
      std::vector<int64_t> next;
      next.reserve(offs.size() * size_t(dims[j].first));
      for (int64_t off : offs)
        for (int64_t k = 0; k < dims[j].first; ++k) next.push_back(off + k * stride[j]);
      offs = std::move(next);
    }
    return offs;
  };
  p.kept_offsets = offsets_of(false);
  p.reduced_offsets = offsets_of(true);
  return p;
}

}  // namespace campo
