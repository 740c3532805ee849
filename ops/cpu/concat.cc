// CPU kernels of ConcatV2 and SplitV: byte copies, one kernel for every dtype (f32, bf16,
// f16, and integer inputs of an f32 node), never emulated.
// Seen around its axis, the whole tensor (ConcatV2's output, SplitV's input) is [outer, row]
// with outer = prod(dims before axis) and a row of sum_i part_i bytes, where part i (input i
// of ConcatV2, output i of SplitV) supplies part_i = dim_i * prod(dims after axis) * element
// bytes of every row:
//   whole[o, offset_i : offset_i + part_i] = part_i[o, :].
// The copies are cut into pieces of at most kPieceBytes and spread over OpenMP threads.
// Against oneDNN 2.6's concat primitive on Inception-v3's channel concatenations (ConcatBench,
// bench/kernels/concat_bench.cc; docs/kernels.md "Concat"): f32 within the run-to-run noise
// of it, while on a CPU without AVX-512 its bf16 / f16 concat of plain nchw tensors is
// 400-1500x slower than these copies; so one plain copy serves every dtype.
#include <algorithm>
#include <cstring>

#include "ops/kernel.h"

namespace campo {
namespace {

// Pieces short enough to balance threads, long enough that a memcpy runs at full speed.
constexpr int64_t kPieceBytes = int64_t(64) << 10;
// Copies smaller than this in total run on one thread.
constexpr int64_t kParallelBytes = int64_t(256) << 10;

class PartCopies {
 public:
  // `whole`: the joined shape; `parts`: the pieces' shapes; both of `element_bytes` elements.
  PartCopies(const Shape& whole, const std::vector<Shape>& parts, int axis, size_t element_bytes) {
    for (int d = 0; d < axis; ++d) outer_ *= whole[size_t(d)];
    int64_t inner = int64_t(element_bytes);
    for (size_t d = size_t(axis) + 1; d < whole.size(); ++d) inner *= whole[d];
    for (const Shape& p : parts) {
      const int64_t bytes = p[size_t(axis)] * inner;
      part_bytes_.push_back(bytes);
      part_offset_.push_back(row_bytes_);
      row_bytes_ += bytes;
      first_piece_.push_back(pieces_per_row_);
      pieces_per_row_ += (bytes + kPieceBytes - 1) / kPieceBytes;
    }
    first_piece_.push_back(pieces_per_row_);
  }

  // to_whole: whole[o, offset_i + ...] = part_i[o, ...] (ConcatV2); else the reverse (SplitV).
  void run(char* whole, const std::vector<char*>& parts, bool to_whole) const {
    const int64_t pieces = outer_ * pieces_per_row_;
    const bool parallel = outer_ * row_bytes_ >= kParallelBytes;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t t = 0; t < pieces; ++t) {
      const int64_t o = t / pieces_per_row_, in_row = t % pieces_per_row_;
      const size_t i = size_t(std::upper_bound(first_piece_.begin(), first_piece_.end(), in_row) -
                              first_piece_.begin() - 1);
      const int64_t begin = (in_row - first_piece_[i]) * kPieceBytes;
      const int64_t bytes = std::min(kPieceBytes, part_bytes_[i] - begin);
      char* w = whole + o * row_bytes_ + part_offset_[i] + begin;
      char* p = parts[i] + o * part_bytes_[i] + begin;
      if (to_whole)
        std::memcpy(w, p, size_t(bytes));
      else
        std::memcpy(p, w, size_t(bytes));
    }
  }

 private:
  int64_t outer_ = 1, row_bytes_ = 0, pieces_per_row_ = 0;
  std::vector<int64_t> part_bytes_, part_offset_;
  std::vector<int64_t> first_piece_;  // index of part i's first piece in a row; then the count
};

int normalised(int axis, size_t rank) { return axis < 0 ? axis + int(rank) : axis; }

// inputs {x_0 ... x_{N-1}} -> output y.
class ConcatKernel : public Kernel {
 public:
  ConcatKernel(const KernelSpec& spec, ExecContext&)
      : copies_(spec.outputs[0].shape, shapes_of(spec.inputs),
                normalised(attrs_as<ConcatAttrs>(spec.attrs).axis, spec.outputs[0].shape.size()),
                dtype_size(spec.outputs[0].dtype)) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    std::vector<char*> parts;
    for (const Tensor& t : in) parts.push_back(static_cast<char*>(t.device_data()));
    copies_.run(static_cast<char*>(out[0].device_data()), parts, true);
  }

  static std::vector<Shape> shapes_of(const std::vector<TensorDesc>& descs) {
    std::vector<Shape> s;
    for (const TensorDesc& d : descs) s.push_back(d.shape);
    return s;
  }

 private:
  PartCopies copies_;
};

// input x -> outputs {y_0 ... y_{N-1}}.
class SplitKernel : public Kernel {
 public:
  SplitKernel(const KernelSpec& spec, ExecContext&)
      : copies_(spec.inputs[0].shape, ConcatKernel::shapes_of(spec.outputs),
                normalised(attrs_as<SplitAttrs>(spec.attrs).axis, spec.inputs[0].shape.size()),
                dtype_size(spec.inputs[0].dtype)) {}
  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    std::vector<char*> parts;
    for (const Tensor& t : out) parts.push_back(static_cast<char*>(t.device_data()));
    copies_.run(static_cast<char*>(in[0].device_data()), parts, false);
  }

 private:
  PartCopies copies_;
};

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<K>(spec, ctx);
}

KernelRegistrar concat_f32(OpKind::ConcatV2, Device::cpu, DType::f32, make<ConcatKernel>);
KernelRegistrar concat_f16(OpKind::ConcatV2, Device::cpu, DType::f16, make<ConcatKernel>);
KernelRegistrar concat_bf16(OpKind::ConcatV2, Device::cpu, DType::bf16, make<ConcatKernel>);
KernelRegistrar split_f32(OpKind::SplitV, Device::cpu, DType::f32, make<SplitKernel>);
KernelRegistrar split_f16(OpKind::SplitV, Device::cpu, DType::f16, make<SplitKernel>);
KernelRegistrar split_bf16(OpKind::SplitV, Device::cpu, DType::bf16, make<SplitKernel>);

}  // namespace
}  // namespace campo
