// CUDA kernel of Transpose: y[i_0, ..., i_{r-1}] = x[j] with j[perm[d]] = i_d, by element
// size (one kernel for f32, f16, bf16 and i32 data), as the CPU kernel (ops/cpu/transpose.cc).
// At construction the permutation is simplified as on the CPU (ops/transpose_plan.h), so y is
// [d_0, ..., d_{n-1}] with each simplified dim's stride in x. Then, on the stream, one of:
//  - n <= 1: the identity on memory, one device copy;
//  - the last dim contiguous in x (stride 1; BERT's {0, 2, 1, 3}): an element-wise copy,
//    coalesced on both sides;
//  - the second-to-last output dim contiguous in x (a batched matrix transpose, {0, 1, 3, 2}
//    and the 2-D transpose): 32 x 32 tiles through shared memory, so reads and writes are
//    both coalesced;
//  - else a gather by element (reads strided).
// Index arithmetic is int64; up to kMaxDims simplified dims (a clear error beyond).
#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"
#include "ops/transpose_plan.h"

namespace campo {
namespace {

constexpr int kMaxDims = 16;
constexpr int kTile = 32, kTileRows = 8;

struct Dims {
  int rank = 0;
  int64_t size[kMaxDims];
  int64_t stride[kMaxDims];  // in x, elements
};

// Offset in x of y's element whose index in the first `rank` dims of `d` is `flat`.
__device__ __forceinline__ int64_t x_offset(const Dims& d, int rank, int64_t flat) {
  int64_t offset = 0;
  for (int k = rank - 1; k >= 0; --k) {
    offset += (flat % d.size[k]) * d.stride[k];
    flat /= d.size[k];
  }
  return offset;
}

// Any permutation: y[i] = x[offset of i].
template <typename T>
__global__ void gather_kernel(const T* __restrict__ x, T* __restrict__ y, Dims d, int64_t n) {
  CAMPO_CUDA_FOR(i, n) y[i] = x[x_offset(d, d.rank, i)];
}

// Last dim contiguous in x: y[r, k] = x[offset of row r + k], rows of `row` elements.
template <typename T>
__global__ void rows_kernel(const T* __restrict__ x, T* __restrict__ y, Dims d, int64_t row, int64_t n) {
  CAMPO_CUDA_FOR(i, n) y[i] = x[x_offset(d, d.rank - 1, i / row) + i % row];
}

// y [batch..., R, C] with R contiguous in x (stride 1) and C of stride c_stride:
// y[b, r, c] = x[offset(b) + r + c * c_stride]. Block (32, 8) per 32 x 32 tile; the grid's z
// walks the batch (grid-stride: it may exceed the z limit).
template <typename T>
__global__ void tiled_kernel(const T* __restrict__ x, T* __restrict__ y, Dims d, int64_t batch) {
  __shared__ T tile[kTile][kTile + 1];  // +1: no bank conflicts on the transposed read
  const int n = d.rank;
  const int64_t R = d.size[n - 2], C = d.size[n - 1], c_stride = d.stride[n - 1];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z) {
    const int64_t base = x_offset(d, n - 2, b);
    // Read along r (stride 1 in x).
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t r = r0 + threadIdx.x, c = c0 + j;
      if (r < R && c < C) tile[j][threadIdx.x] = x[base + r + c * c_stride];
    }
    __syncthreads();
    // Write along c (y is row-major).
    T* yb = y + b * R * C;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t r = r0 + j, c = c0 + threadIdx.x;
      if (r < R && c < C) yb[r * C + c] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

class TransposeCudaKernel : public Kernel {
 public:
  TransposeCudaKernel(const KernelSpec& spec, ExecContext& ctx)
      : elem_(dtype_size(spec.inputs[0].dtype)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {
    const Shape& in = spec.inputs[0].shape;
    const std::vector<int>& perm = attrs_as<TransposeAttrs>(spec.attrs).perm;
    const TransposePlan plan = make_transpose_plan(in, perm);
    CAMPO_CHECK(plan.dims.size() <= size_t(kMaxDims), "Transpose '", spec.node_name, "' of ",
                shape_str(in), ": ", plan.dims.size(),
                " dims remain after merging; the CUDA kernel takes at most ", kMaxDims);
    dims_.rank = int(plan.dims.size());
    for (size_t k = 0; k < plan.dims.size(); ++k) {
      dims_.size[k] = plan.dims[k];
      dims_.stride[k] = plan.strides[k];
    }
    numel_ = shape_numel(in);
    CAMPO_CHECK(elem_ == 2 || elem_ == 4 || elem_ == 8, "Transpose '", spec.node_name,
                "': no CUDA kernel for ", elem_, "-byte elements (", dtype_name(spec.inputs[0].dtype), ")");
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) override {
    if (numel_ == 0) return;
    cudaStream_t stream = cuda_stream(ctx);
    if (dims_.rank <= 1) {  // the identity on memory
      CAMPO_CUDA_CHECK(cudaMemcpyAsync(out[0].device_data(), in[0].device_data(),
                                       size_t(numel_) * elem_, cudaMemcpyDeviceToDevice, stream));
      return;
    }
    switch (elem_) {
      case 2:
        return launch<uint16_t>(in[0], out[0], stream);
      case 4:
        return launch<uint32_t>(in[0], out[0], stream);
      default:
        return launch<uint64_t>(in[0], out[0], stream);
    }
  }

 private:
  template <typename T>
  void launch(const Tensor& xt, const Tensor& yt, cudaStream_t stream) const {
    const T* x = static_cast<const T*>(xt.device_data());
    T* y = static_cast<T*>(yt.device_data());
    const int n = dims_.rank;
    const unsigned grid = cuda::grid_for(numel_, multiprocessors_);
    if (dims_.stride[n - 1] == 1) {
      rows_kernel<T><<<grid, cuda::kThreads, 0, stream>>>(x, y, dims_, dims_.size[n - 1], numel_);
      cuda::check_launch("Transpose rows_kernel");
    } else if (dims_.stride[n - 2] == 1) {
      const int64_t R = dims_.size[n - 2], C = dims_.size[n - 1];
      const int64_t batch = numel_ / (R * C);
      CAMPO_CHECK((R + kTile - 1) / kTile <= 65535, "Transpose: ", R,
                  " rows exceed the tiled kernel's grid");
      const dim3 blocks(unsigned((C + kTile - 1) / kTile), unsigned((R + kTile - 1) / kTile),
                        unsigned(std::min<int64_t>(batch, 65535)));
      tiled_kernel<T><<<blocks, dim3(kTile, kTileRows), 0, stream>>>(x, y, dims_, batch);
      cuda::check_launch("Transpose tiled_kernel");
    } else {
      gather_kernel<T><<<grid, cuda::kThreads, 0, stream>>>(x, y, dims_, numel_);
      cuda::check_launch("Transpose gather_kernel");
    }
  }

  size_t elem_;
  int multiprocessors_;
  Dims dims_;  // y's simplified dims and their strides in x
  int64_t numel_ = 0;
};

std::unique_ptr<Kernel> make_transpose(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<TransposeCudaKernel>(spec, ctx);
}

KernelRegistrar transpose_f32(OpKind::Transpose, Device::cuda, DType::f32, make_transpose);
KernelRegistrar transpose_f16(OpKind::Transpose, Device::cuda, DType::f16, make_transpose);
KernelRegistrar transpose_bf16(OpKind::Transpose, Device::cuda, DType::bf16, make_transpose);

}  // namespace
}  // namespace campo
