// CUDA kernels of BiasAdd and BiasAddGrad on [N, C, S...] tensors (S = product of the axes
// after 1; 1 for [N, C]), plain layout only (nChw8c is a CPU layout). f32 / f16 / bf16
// storage, f32 math (ops/cpu/bias.cc is the specification).
//
// BiasAdd: the channel map (ops/cuda/elementwise.cuh), y[i] = x[i] + bias[(i / S) % C],
// bit for bit the CPU's sum.
// BiasAddGrad: dbias[c] = sum over n, s of dy[n, c, s], deterministic: the reduction is cut
// into a fixed grid of (channel, split) pieces fixed at construction, each summed in f32 by
// one block in a fixed order (a shared-memory tree), and the splits of a channel added in
// order by a second kernel that rounds once into dbias. The CPU sums in another order (f32
// rows, double across N), so the two agree to rounding, not bit for bit.
#include "ops/cuda/elementwise.cuh"

namespace campo {
namespace {

struct ChannelView {
  int64_t outer, channels, inner;
  explicit ChannelView(const Shape& s)
      : outer(s[0]), channels(s[1]), inner(shape_numel(s) / std::max<int64_t>(1, s[0] * s[1])) {}
};

void check_bias_spec(const KernelSpec& spec) {
  const Shape& s = spec.inputs[0].shape;
  CAMPO_CHECK(s.size() >= 2, op_name(spec.kind), " '", spec.node_name, "': x of shape ",
              shape_str(s), " has no channel axis (rank >= 2)");
  for (const TensorDesc& d : spec.inputs)
    CAMPO_CHECK(d.layout == Layout::plain, op_name(spec.kind), " '", spec.node_name,
                "': the CUDA kernel takes plain (NCHW) data only, not ", layout_name(d.layout));
  for (const TensorDesc& d : spec.outputs)
    CAMPO_CHECK(d.layout == Layout::plain, op_name(spec.kind), " '", spec.node_name,
                "': the CUDA kernel writes plain (NCHW) data only, not ", layout_name(d.layout));
}

// x + b in f32, one rounding (as the CPU: no contraction to worry about here).
struct AddBiasF {
  __device__ float operator()(float x, float b) const { return __fadd_rn(x, b); }
};

template <typename T>
class BiasAddKernel : public Kernel {
 public:
  explicit BiasAddKernel(const KernelSpec& spec)
      : v_((check_bias_spec(spec), spec.inputs[0].shape)) {
    CAMPO_CHECK(spec.inputs[1].shape == Shape{v_.channels}, "BiasAdd '", spec.node_name,
                "': bias of shape ", shape_str(spec.inputs[1].shape), " for x of shape ",
                shape_str(spec.inputs[0].shape));
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (v_.channels == 0 || v_.inner == 0) return;  // no elements
    cuda::launch_channel_map(
        "BiasAdd", cuda_stream(ctx), cuda_backend(ctx).multiprocessors(),
        static_cast<const T*>(in[0].device_data()), static_cast<const T*>(in[1].device_data()),
        static_cast<T*>(out[0].device_data()), out[0].numel(), v_.inner, v_.channels, AddBiasF{});
  }

 private:
  ChannelView v_;
};

// ---- BiasAddGrad ----

// Sum of `value` over the block's threads (blockDim.x * blockDim.y <= 1024, a power of two),
// in a fixed tree order; the result in thread 0.
__device__ float block_sum(float value, float* shared) {
  const int tid = threadIdx.y * blockDim.x + threadIdx.x, n = blockDim.x * blockDim.y;
  shared[tid] = value;
  __syncthreads();
  for (int half = n / 2; half > 0; half /= 2) {
    if (tid < half) shared[tid] = __fadd_rn(shared[tid], shared[tid + half]);
    __syncthreads();
  }
  return shared[0];
}

constexpr int kReduceThreads = 256;

// S > 1: block (c, split) sums dy[n, c, s] over the split's share of the N * S (n, s) pairs
// (consecutive s are consecutive addresses: coalesced). partial[split * C + c].
template <typename T>
__global__ void bias_grad_planes_kernel(const T* __restrict__ dy, float* __restrict__ partial,
                                        int64_t N, int64_t C, int64_t S, int64_t per_split) {
  __shared__ float shared[kReduceThreads];
  const int64_t c = blockIdx.x, split = blockIdx.y;
  const int64_t begin = split * per_split,
                end = begin + per_split < N * S ? begin + per_split : N * S;
  float sum = 0.0f;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const int64_t n = j / S, s = j - n * S;
    sum = __fadd_rn(sum, cuda::to_float(dy[(n * C + c) * S + s]));
  }
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) partial[split * C + c] = sum;
}

// S == 1 ([N, C]): a block of 32 columns x 8 row lanes; block (column group, split) sums
// its split's rows for 32 consecutive channels (consecutive threads read consecutive
// channels: coalesced), then adds the 8 row lanes in order.
constexpr int kColumns = 32, kRowLanes = 8;

template <typename T>
__global__ void bias_grad_rows_kernel(const T* __restrict__ dy, float* __restrict__ partial,
                                      int64_t N, int64_t C, int64_t per_split) {
  __shared__ float shared[kRowLanes][kColumns];
  const int64_t c = int64_t(blockIdx.x) * kColumns + threadIdx.x;
  const int64_t split = blockIdx.y;
  const int64_t begin = split * per_split, end = begin + per_split < N ? begin + per_split : N;
  float sum = 0.0f;
  if (c < C)
    for (int64_t n = begin + threadIdx.y; n < end; n += kRowLanes)
      sum = __fadd_rn(sum, cuda::to_float(dy[n * C + c]));
  shared[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float total = shared[0][threadIdx.x];
    for (int k = 1; k < kRowLanes; ++k) total = __fadd_rn(total, shared[k][threadIdx.x]);
    partial[split * C + c] = total;
  }
}

// db[c] = partial[0, c] + partial[1, c] + ..., in order, rounded once.
template <typename T>
__global__ void bias_grad_finish_kernel(const float* __restrict__ partial, T* __restrict__ db,
                                        int64_t C, int64_t splits) {
  CAMPO_CUDA_FOR(c, C) {
    float total = partial[c];
    for (int64_t k = 1; k < splits; ++k) total = __fadd_rn(total, partial[k * C + c]);
    db[c] = cuda::from_float<T>(total);
  }
}

template <typename T>
class BiasAddGradKernel : public Kernel {
 public:
  BiasAddGradKernel(const KernelSpec& spec, ExecContext& ctx)
      : v_((check_bias_spec(spec), spec.inputs[0].shape)) {
    const int64_t N = v_.outer, C = v_.channels, S = v_.inner;
    if (C == 0) return;
    // Enough blocks to fill the device (~4 per multiprocessor), each with a few thousand
    // elements at least; fixed here so the summation order never changes between runs.
    const int64_t target_blocks = 4 * int64_t(cuda_backend(ctx).multiprocessors());
    if (S == 1) {
      const int64_t groups = (C + kColumns - 1) / kColumns;
      const int64_t max_splits = std::max<int64_t>(1, N / (kRowLanes * 16));
      splits_ = std::clamp<int64_t>((target_blocks + groups - 1) / groups, 1, max_splits);
      per_split_ = (N + splits_ - 1) / splits_;
    } else {
      const int64_t max_splits = std::max<int64_t>(1, N * S / (kReduceThreads * 16));
      splits_ = std::clamp<int64_t>((target_blocks + C - 1) / C, 1, max_splits);
      per_split_ = (N * S + splits_ - 1) / splits_;
    }
    CAMPO_CHECK(splits_ <= 65535, "BiasAddGrad '", spec.node_name, "': too many splits");
    ctx.reserve_workspace(size_t(splits_ * C) * sizeof(float));
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const int64_t N = v_.outer, C = v_.channels, S = v_.inner;
    if (C == 0) return;
    cudaStream_t stream = cuda_stream(ctx);
    T* db = static_cast<T*>(out[0].device_data());
    if (N * S == 0) {  // an empty sum
      CAMPO_CUDA_CHECK(cudaMemsetAsync(db, 0, size_t(C) * sizeof(T), stream));
      return;
    }
    const T* dy = static_cast<const T*>(in[0].device_data());
    float* partial = static_cast<float*>(ctx.workspace());
    if (S == 1) {
      const dim3 grid{unsigned((C + kColumns - 1) / kColumns), unsigned(splits_)};
      bias_grad_rows_kernel<T>
          <<<grid, dim3(kColumns, kRowLanes), 0, stream>>>(dy, partial, N, C, per_split_);
    } else {
      CAMPO_CHECK(C <= 0x7fffffff, "BiasAddGrad: ", C, " channels");
      const dim3 grid{unsigned(C), unsigned(splits_)};
      bias_grad_planes_kernel<T>
          <<<grid, kReduceThreads, 0, stream>>>(dy, partial, N, C, S, per_split_);
    }
    cuda::check_launch("BiasAddGrad");
    bias_grad_finish_kernel<T>
        <<<cuda::grid_for(C, cuda_backend(ctx).multiprocessors()), cuda::kThreads, 0, stream>>>(
            partial, db, C, splits_);
    cuda::check_launch("BiasAddGrad");
  }

 private:
  ChannelView v_;
  int64_t splits_ = 1, per_split_ = 0;
};

template <typename T>
std::unique_ptr<Kernel> make_bias_add(const KernelSpec& spec, ExecContext&) {
  return std::make_unique<BiasAddKernel<T>>(spec);
}
template <typename T>
std::unique_ptr<Kernel> make_bias_add_grad(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<BiasAddGradKernel<T>>(spec, ctx);
}

// dbias is the node's dtype, as on the CPU (the sum rounded once).
KernelRegistrar bias_add_f32(OpKind::BiasAdd, Device::cuda, DType::f32, make_bias_add<float>);
KernelRegistrar bias_add_f16(OpKind::BiasAdd, Device::cuda, DType::f16, make_bias_add<__half>);
KernelRegistrar bias_add_bf16(OpKind::BiasAdd, Device::cuda, DType::bf16,
                              make_bias_add<__nv_bfloat16>);
KernelRegistrar bias_add_grad_f32(OpKind::BiasAddGrad, Device::cuda, DType::f32,
                                  make_bias_add_grad<float>);
KernelRegistrar bias_add_grad_f16(OpKind::BiasAddGrad, Device::cuda, DType::f16,
                                  make_bias_add_grad<__half>);
KernelRegistrar bias_add_grad_bf16(OpKind::BiasAddGrad, Device::cuda, DType::bf16,
                                   make_bias_add_grad<__nv_bfloat16>);

}  // namespace
}  // namespace campo
