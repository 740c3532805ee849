// CUDA kernel of BatchMatMulV2: z[b] = adj(x[b]) adj(y[b]) for every batch index, one strided
// batched cuBLASLt GEMM planned at construction (ops/cuda/gemm.h: f32 compute for every
// dtype, no TF32). The batch dims are flattened into one, B = prod(dims before the last two)
// (1 for rank 2); x, y and z have equal batch dims (ops/batch_matmul.cc refuses TensorFlow's
// broadcasting, and so does the CPU kernel), so each side's matrices lie densely one after
// another. adj is the GEMM's transpose, no copy. Padding (KernelSpec::pad_to) is MatMul's
// alone (amp/padding.h): a request here is refused, as on the CPU.
#include <memory>

#include "ops/cuda/context.h"
#include "ops/cuda/gemm.h"

namespace campo {
namespace {

// inputs {x, y}, output z.
class BatchMatMulCudaKernel : public Kernel {
 public:
  BatchMatMulCudaKernel(const KernelSpec& spec, ExecContext& ctx) {
    const auto& t = attrs_as<BatchMatMulAttrs>(spec.attrs);
    const std::string what = "BatchMatMulV2 '" + spec.node_name + "'";
    CAMPO_CHECK(spec.pad_to == 0, what, ": padding (pad_to = ", spec.pad_to,
                ") is implemented for MatMul only; leave pad_to at 0");
    const Shape& x = spec.inputs[0].shape;
    const Shape& y = spec.inputs[1].shape;
    const Shape& z = spec.outputs[0].shape;
    const size_t r = z.size();
    CAMPO_CHECK(r >= 2 && x.size() == r && y.size() == r, what, ": ranks differ or are below 2: ",
                shape_str(x), " x ", shape_str(y), " -> ", shape_str(z));
    int64_t B = 1;
    for (size_t d = 0; d + 2 < r; ++d) {
      CAMPO_CHECK(x[d] == z[d] && y[d] == z[d], what, ": batch dims must be equal (no broadcasting): ",
                  shape_str(x), " x ", shape_str(y));
      B *= z[d];
    }
    cuda::GemmShape s;
    s.dtype = spec.dtype;
    s.M = z[r - 2];
    s.N = z[r - 1];
    s.K = t.adj_x ? x[r - 2] : x[r - 1];
    s.transpose_a = t.adj_x;
    s.transpose_b = t.adj_y;
    s.batch = B;
    s.stride_a = s.M * s.K;
    s.stride_b = s.K * s.N;
    s.stride_c = s.M * s.N;
    gemm_ = std::make_unique<cuda::Gemm>(s, ctx, what);
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    gemm_->run(ctx, in[0].device_data(), in[1].device_data(), out[0].device_data());
  }

 private:
  std::unique_ptr<cuda::Gemm> gemm_;
};

std::unique_ptr<Kernel> make_batch_matmul(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<BatchMatMulCudaKernel>(spec, ctx);
}

KernelRegistrar batch_matmul_f32(OpKind::BatchMatMulV2, Device::cuda, DType::f32, make_batch_matmul);
KernelRegistrar batch_matmul_f16(OpKind::BatchMatMulV2, Device::cuda, DType::f16, make_batch_matmul);
KernelRegistrar batch_matmul_bf16(OpKind::BatchMatMulV2, Device::cuda, DType::bf16, make_batch_matmul);

}  // namespace
}  // namespace campo
