// CUDA kernels of ConcatV2 and SplitV: byte copies, one kernel for every dtype (f32, bf16,
// f16, and integer inputs of an f32 node), as the CPU kernels (ops/cpu/concat.cc).
// Seen around its axis, the whole tensor (ConcatV2's output, SplitV's input) is [outer, row]
// with outer = prod(dims before axis) and a row of sum_i part_i bytes, where part i (input i
// of ConcatV2, output i of SplitV) supplies part_i = dim_i * prod(dims after axis) * element
// bytes of every row:
//   whole[o, offset_i : offset_i + part_i] = part_i[o, :].
// One launch copies up to kPartsPerLaunch parts (more parts: more launches), each thread one
// unit of the widest word (16, 8, 4, 2 or 1 bytes) that divides every part's row bytes and
// every address, so wide rows move as 16-byte words; the whole side is written (or read)
// coalesced along its rows.
#include <algorithm>

#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

constexpr int kPartsPerLaunch = 8;

// Parts [first, first + count) of a row, in units: part j covers row units
// [offset + begin[j], offset + begin[j + 1]) and has begin[j + 1] - begin[j] units per row.
struct PartGroup {
  int count = 0;
  int64_t offset = 0;                   // the group's first unit within a whole row
  int64_t begin[kPartsPerLaunch + 1] = {};  // relative to offset
  char* part[kPartsPerLaunch] = {};
};

template <typename W, bool kToWhole>
__global__ void copy_parts(char* whole_bytes, PartGroup g, int64_t outer, int64_t row_units) {
  W* whole = reinterpret_cast<W*>(whole_bytes);
  const int64_t width = g.begin[g.count];
  CAMPO_CUDA_FOR(t, outer * width) {
    const int64_t o = t / width, col = t % width;
    int j = 0;
    while (col >= g.begin[j + 1]) ++j;
    const int64_t units = g.begin[j + 1] - g.begin[j];
    W* p = reinterpret_cast<W*>(g.part[j]) + o * units + (col - g.begin[j]);
    W* w = whole + o * row_units + g.offset + col;
    if (kToWhole)
      *w = *p;
    else
      *p = *w;
  }
}

class PartCopies {
 public:
  PartCopies(const Shape& whole, const std::vector<TensorDesc>& parts, int axis, size_t element_bytes) {
    if (axis < 0) axis += int(whole.size());
    for (int d = 0; d < axis; ++d) outer_ *= whole[size_t(d)];
    int64_t inner = int64_t(element_bytes);
    for (size_t d = size_t(axis) + 1; d < whole.size(); ++d) inner *= whole[d];
    for (const TensorDesc& p : parts) {
      part_bytes_.push_back(p.shape[size_t(axis)] * inner);
      row_bytes_ += part_bytes_.back();
    }
  }

  void run(char* whole, const std::vector<char*>& parts, bool to_whole, int multiprocessors,
           cudaStream_t stream) const {
    if (outer_ * row_bytes_ == 0) return;
    // The widest word dividing every row length and address.
    uint64_t bits = uint64_t(row_bytes_) | reinterpret_cast<uintptr_t>(whole);
    for (size_t i = 0; i < parts.size(); ++i)
      bits |= uint64_t(part_bytes_[i]) | reinterpret_cast<uintptr_t>(parts[i]);
    const int64_t unit = int64_t(std::min<uint64_t>(bits & (~bits + 1), 16));
    switch (unit) {
      case 16:
        return launch<uint4>(whole, parts, to_whole, unit, multiprocessors, stream);
      case 8:
        return launch<uint2>(whole, parts, to_whole, unit, multiprocessors, stream);
      case 4:
        return launch<uint32_t>(whole, parts, to_whole, unit, multiprocessors, stream);
      case 2:
        return launch<uint16_t>(whole, parts, to_whole, unit, multiprocessors, stream);
      default:
        return launch<uint8_t>(whole, parts, to_whole, unit, multiprocessors, stream);
    }
  }

 private:
  template <typename W>
  void launch(char* whole, const std::vector<char*>& parts, bool to_whole, int64_t unit,
              int multiprocessors, cudaStream_t stream) const {
    const int64_t row_units = row_bytes_ / unit;
    int64_t offset = 0;
    for (size_t first = 0; first < parts.size(); first += kPartsPerLaunch) {
      PartGroup g;
      g.offset = offset;
      for (size_t i = first; i < std::min(parts.size(), first + kPartsPerLaunch); ++i) {
        g.part[g.count] = parts[i];
        g.begin[g.count + 1] = g.begin[g.count] + part_bytes_[i] / unit;
        ++g.count;
      }
      const int64_t width = g.begin[g.count];
      offset += width;
      if (width == 0) continue;
      const unsigned grid = cuda::grid_for(outer_ * width, multiprocessors);
      if (to_whole)
        copy_parts<W, true><<<grid, cuda::kThreads, 0, stream>>>(whole, g, outer_, row_units);
      else
        copy_parts<W, false><<<grid, cuda::kThreads, 0, stream>>>(whole, g, outer_, row_units);
      cuda::check_launch(to_whole ? "ConcatV2 copy_parts" : "SplitV copy_parts");
    }
  }

  int64_t outer_ = 1, row_bytes_ = 0;
  std::vector<int64_t> part_bytes_;
};

// inputs {x_0 ... x_{N-1}} -> output y.
class ConcatCudaKernel : public Kernel {
 public:
  ConcatCudaKernel(const KernelSpec& spec, ExecContext& ctx)
      : copies_(spec.outputs[0].shape, spec.inputs, attrs_as<ConcatAttrs>(spec.attrs).axis,
                dtype_size(spec.outputs[0].dtype)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    std::vector<char*> parts;
    for (const Tensor& t : in) parts.push_back(static_cast<char*>(t.device_data()));
    copies_.run(static_cast<char*>(out[0].device_data()), parts, true, multiprocessors_,
                cuda_stream(ctx));
  }

 private:
  PartCopies copies_;
  int multiprocessors_;
};

// input x -> outputs {y_0 ... y_{N-1}}.
class SplitCudaKernel : public Kernel {
 public:
  SplitCudaKernel(const KernelSpec& spec, ExecContext& ctx)
      : copies_(spec.inputs[0].shape, spec.outputs, attrs_as<SplitAttrs>(spec.attrs).axis,
                dtype_size(spec.inputs[0].dtype)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {}
  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    std::vector<char*> parts;
    for (const Tensor& t : out) parts.push_back(static_cast<char*>(t.device_data()));
    copies_.run(static_cast<char*>(in[0].device_data()), parts, false, multiprocessors_,
                cuda_stream(ctx));
  }

 private:
  PartCopies copies_;
  int multiprocessors_;
};

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<K>(spec, ctx);
}

KernelRegistrar concat_f32(OpKind::ConcatV2, Device::cuda, DType::f32, make<ConcatCudaKernel>);
KernelRegistrar concat_f16(OpKind::ConcatV2, Device::cuda, DType::f16, make<ConcatCudaKernel>);
KernelRegistrar concat_bf16(OpKind::ConcatV2, Device::cuda, DType::bf16, make<ConcatCudaKernel>);
KernelRegistrar split_f32(OpKind::SplitV, Device::cuda, DType::f32, make<SplitCudaKernel>);
KernelRegistrar split_f16(OpKind::SplitV, Device::cuda, DType::f16, make<SplitCudaKernel>);
KernelRegistrar split_bf16(OpKind::SplitV, Device::cuda, DType::bf16, make<SplitCudaKernel>);

}  // namespace
}  // namespace campo
