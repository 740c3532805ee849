// CPU kernels of GatherV2 and UnsortedSegmentSum (ops/gather.cc). Both see their tensors as
// rows: params / y of GatherV2 and data / y of UnsortedSegmentSum are [rows, D] with D the
// product of the dims after the leading ones; indices / segment ids are a flat list.
//  GatherV2: y[i, :] = params[indices[i], :], one byte copy per row (one kernel for f32, bf16
//    and f16, never emulated), rows spread over OpenMP threads. The indices are checked
//    first: one outside [0, V) is an error naming the node, the index, its position and V.
//  UnsortedSegmentSum: y[s, :] = sum_{i : ids[i] == s} data[i, :], zeros where no id points.
//    Deterministic without atomics: the ids are sorted by a stable counting sort into each
//    segment's row list (ascending i), then each thread owns a contiguous range of segments
//    and sums each one's rows in that order, in f32 (a block of columns at a time in a local
//    f32 accumulator), storing each output element once. Templated on the element type:
//    float, or bfloat16 (ops/cpu/low_precision.h: exact loads, f32 sums, one rounding per
//    output); f16 is emulated (the f32 kernel on widened data: the same f32 sums, one
//    rounding). The same result whatever the thread count.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "ops/cpu/low_precision.h"
#include "ops/kernel.h"

namespace campo {
namespace {

// Copies / sums smaller than this (bytes written) run on one thread.
constexpr int64_t kParallelBytes = int64_t(256) << 10;

// Product of the dims of `s` from `first` on (the row length).
int64_t trailing_numel(const Shape& s, size_t first) {
  int64_t n = 1;
  for (size_t d = first; d < s.size(); ++d) n *= s[d];
  return n;
}

// "[1, 2]": the position of flat element `flat` in a tensor of `shape` (for error messages).
std::string position_of(int64_t flat, const Shape& shape) {
  Shape pos(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    pos[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return shape_str(pos);
}

// Checks every id against [0, limit); the first one outside is an error.
void check_ids(const int32_t* ids, const Shape& ids_shape, int64_t limit, const char* op,
               const std::string& node, const char* what, const char* limit_name) {
  const int64_t n = shape_numel(ids_shape);
  for (int64_t i = 0; i < n; ++i)
    CAMPO_CHECK(ids[i] >= 0 && ids[i] < limit, op, " '", node, "': ", what, " ", ids[i],
                " at position ", position_of(i, ids_shape), " is outside [0, ", limit, ") (",
                limit_name, " ", limit, ")");
}

// inputs {params [V, D...], indices [I...] i32} -> y [I..., D...].
class GatherKernel : public Kernel {
 public:
  GatherKernel(const KernelSpec& spec, ExecContext&)
      : node_(spec.node_name),
        indices_shape_(spec.inputs[1].shape),
        rows_(spec.inputs[0].shape[0]),
        row_bytes_(trailing_numel(spec.inputs[0].shape, 1) *
                   int64_t(dtype_size(spec.inputs[0].dtype))) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const char* params = static_cast<const char*>(in[0].device_data());
    const int32_t* indices = in[1].device_data<int32_t>();
    char* y = static_cast<char*>(out[0].device_data());
    check_ids(indices, indices_shape_, rows_, "GatherV2", node_, "index", "params has V =");
    const int64_t n = shape_numel(indices_shape_);
    const size_t bytes = size_t(row_bytes_);
#pragma omp parallel for schedule(static) if (n * row_bytes_ >= kParallelBytes)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(y + i * row_bytes_, params + int64_t(indices[i]) * row_bytes_, bytes);
  }

 private:
  std::string node_;
  Shape indices_shape_;
  int64_t rows_, row_bytes_;
};

// inputs {data [I..., D...], segment_ids [I...] i32} -> y [S, D...].
template <typename T>
class UnsortedSegmentSumKernel : public Kernel {
 public:
  UnsortedSegmentSumKernel(const KernelSpec& spec, ExecContext&)
      : node_(spec.node_name),
        ids_shape_(spec.inputs[1].shape),
        segments_(attrs_as<UnsortedSegmentSumAttrs>(spec.attrs).num_segments),
        width_(trailing_numel(spec.inputs[0].shape, spec.inputs[1].shape.size())),
        first_row_(size_t(segments_) + 1),
        rows_(size_t(shape_numel(spec.inputs[1].shape))) {}

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const T* data = static_cast<const T*>(in[0].device_data());
    const int32_t* ids = in[1].device_data<int32_t>();
    T* y = static_cast<T*>(out[0].device_data());
    check_ids(ids, ids_shape_, segments_, "UnsortedSegmentSum", node_, "segment id",
              "num_segments");
    // Stable counting sort: rows_[first_row_[s] .. first_row_[s + 1]) are segment s's rows,
    // ascending.
    const int64_t n = int64_t(rows_.size());
    std::fill(first_row_.begin(), first_row_.end(), 0);
    for (int64_t i = 0; i < n; ++i) ++first_row_[size_t(ids[i]) + 1];
    for (size_t s = 0; s < size_t(segments_); ++s) first_row_[s + 1] += first_row_[s];
    for (int64_t i = 0; i < n; ++i) rows_[size_t(first_row_[size_t(ids[i])]++)] = i;
    // first_row_[s] now holds segment s's end, the start of s + 1: shift back.
    for (size_t s = size_t(segments_); s > 0; --s) first_row_[s] = first_row_[s - 1];
    first_row_[0] = 0;

    const int64_t D = width_;
    const int64_t* first = first_row_.data();
    const int64_t* rows = rows_.data();
    const bool parallel = (segments_ + n) * D * int64_t(sizeof(T)) >= kParallelBytes;
    parallel_for<T>(segments_, parallel, [=](int64_t s) {
      T* ys = y + s * D;
      float acc[kBlock];
      for (int64_t c0 = 0; c0 < D; c0 += kBlock) {
        const int64_t w = std::min(kBlock, D - c0);
        for (int64_t j = 0; j < w; ++j) acc[j] = 0.0f;
        for (int64_t k = first[s]; k < first[s + 1]; ++k) {
          const T* row = data + rows[k] * D + c0;
          for (int64_t j = 0; j < w; ++j) acc[j] += float(row[j]);
        }
        for (int64_t j = 0; j < w; ++j) ys[c0 + j] = acc[j];
      }
    });
  }

 private:
  // Columns summed at a time: one f32 accumulator block on the stack (4 KiB).
  static constexpr int64_t kBlock = 1024;

  std::string node_;
  Shape ids_shape_;
  int64_t segments_, width_;
  std::vector<int64_t> first_row_;  // segment s's rows start at first_row_[s]; sized S + 1
  std::vector<int64_t> rows_;       // data rows sorted by segment
};

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<K>(spec, ctx);
}

KernelRegistrar gather_f32(OpKind::GatherV2, Device::cpu, DType::f32, make<GatherKernel>);
KernelRegistrar gather_bf16(OpKind::GatherV2, Device::cpu, DType::bf16, make<GatherKernel>);
KernelRegistrar gather_f16(OpKind::GatherV2, Device::cpu, DType::f16, make<GatherKernel>);
KernelRegistrar segment_sum_f32(OpKind::UnsortedSegmentSum, Device::cpu, DType::f32,
                                make<UnsortedSegmentSumKernel<float>>);
KernelRegistrar segment_sum_bf16(OpKind::UnsortedSegmentSum, Device::cpu, DType::bf16,
                                 native_bf16_loops<make<UnsortedSegmentSumKernel<bfloat16>>>);

}  // namespace
}  // namespace campo
