// CPU kernel of Transpose: a gather by element size (one kernel for f32, bf16, f16 and i32
// data), y[i_0, ..., i_{r-1}] = x[j] with j[perm[d]] = i_d.
// At construction the permutation is simplified (ops/transpose_plan.h). Then y is [rows, n]
// with n its last (merged) dim:
//  - when that dim is x's last too, each row is one contiguous run of n elements in x:
//    one memcpy per row (BERT's {0, 2, 1, 3}: rows of d elements);
//  - else row element k sits n's stride apart in x: a strided copy by element type.
// Rows are split over OpenMP threads when the tensor is large enough; each row finds its
// offset in x from its index (a few divisions, once per row, not per element).
#include <cstring>
#include <utility>

#include "ops/kernel.h"
#include "ops/transpose_plan.h"

namespace campo {
namespace {

// Tensors smaller than this are copied on one thread.
constexpr int64_t kParallelBytes = int64_t(256) << 10;

class TransposeKernel : public Kernel {
 public:
  TransposeKernel(const KernelSpec& spec, ExecContext&) : elem_(dtype_size(spec.inputs[0].dtype)) {
    const Shape& in = spec.inputs[0].shape;
    const std::vector<int>& perm = attrs_as<TransposeAttrs>(spec.attrs).perm;
    TransposePlan plan = make_transpose_plan(in, perm);
    dims_ = std::move(plan.dims);
    strides_ = std::move(plan.strides);
    numel_ = 1;
    for (int64_t s : in) numel_ *= s;
    contiguous_last_ = dims_.empty() || strides_.back() == 1;
    row_ = dims_.empty() ? 1 : dims_.back();
  }

  void run(ExecContext&, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    const auto* x = static_cast<const char*>(in[0].device_data());
    auto* y = static_cast<char*>(out[0].device_data());
    if (numel_ == 0) return;
    if (dims_.size() <= 1) {  // the identity on memory
      std::memcpy(y, x, size_t(numel_) * elem_);
      return;
    }
    switch (contiguous_last_ ? 0 : elem_) {
      case 0:
        return copy_rows(x, y);
      case 2:
        return gather<uint16_t>(x, y);
      case 4:
        return gather<uint32_t>(x, y);
      case 8:
        return gather<uint64_t>(x, y);
      default:
        CAMPO_FAIL("Transpose: no kernel for ", elem_, "-byte elements");
    }
  }

 private:
  // Offset in x (elements) of the first element of output row `r`.
  int64_t row_offset(int64_t r) const {
    int64_t offset = 0;
    for (size_t d = dims_.size() - 1; d-- > 0;) {
      offset += (r % dims_[d]) * strides_[d];
      r /= dims_[d];
    }
    return offset;
  }

  void copy_rows(const char* x, char* y) const {
    const int64_t rows = numel_ / row_;
    const size_t row_bytes = size_t(row_) * elem_;
#pragma omp parallel for schedule(static) if (numel_ * int64_t(elem_) >= kParallelBytes)
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(y + size_t(r) * row_bytes, x + size_t(row_offset(r)) * elem_, row_bytes);
  }

  template <typename T>
  void gather(const char* xb, char* yb) const {
    const T* x = reinterpret_cast<const T*>(xb);
    T* y = reinterpret_cast<T*>(yb);
    const int64_t rows = numel_ / row_, n = row_, stride = strides_.back();
#pragma omp parallel for schedule(static) if (numel_ * int64_t(elem_) >= kParallelBytes)
    for (int64_t r = 0; r < rows; ++r) {
      const T* src = x + row_offset(r);
      T* dst = y + r * n;
      for (int64_t k = 0; k < n; ++k) dst[k] = src[k * stride];
    }
  }

  size_t elem_;
  std::vector<int64_t> dims_, strides_;  // y's simplified dims, and their strides in x
  int64_t numel_ = 0, row_ = 1;
  bool contiguous_last_ = true;
};

std::unique_ptr<Kernel> make_transpose(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<TransposeKernel>(spec, ctx);
}

KernelRegistrar transpose_f32(OpKind::Transpose, Device::cpu, DType::f32, make_transpose);
KernelRegistrar transpose_f16(OpKind::Transpose, Device::cpu, DType::f16, make_transpose);
KernelRegistrar transpose_bf16(OpKind::Transpose, Device::cpu, DType::bf16, make_transpose);

}  // namespace
}  // namespace campo
