// CUDA kernel of AllFinite {g1, ..., gk} -> f32 scalar flag: 1 when every element of every
// input is finite, 0 when any is inf or NaN (ops/all_finite.cc; the CPU kernel,
// ops/cpu/all_finite.cc, tests the raw bits: all exponent bits set). Inputs may mix f32,
// f16 and bf16. Nothing is unscaled here: the loss scaler only needs the flag, which the
// optimizer updates read on the device (skip_if_not_finite).
//
// One pass over all inputs, a multi-tensor launch (ops/cuda/tensor_table.cuh): the inputs'
// addresses and formats travel as the kernel's parameter, up to kTensorsPerLaunch per launch,
// and a block walks its chunk with 16-byte loads. A block that finds a non-finite value sets a
// device word (every writer stores the same 1, so no float atomics and no order dependence); a last
// one-thread kernel turns the word into the f32 flag. The host never waits.
#include <cstdint>

#include "ops/cuda/context.h"
#include "ops/cuda/tensor_table.cuh"

namespace campo {
namespace {

constexpr int kTensorsPerLaunch = 96;
constexpr int64_t kChunk = 16384;  // elements per block task

// Exponent masks of the formats, on the raw bits.
constexpr uint32_t kF32Exponent = 0x7f800000u;
constexpr uint32_t kF16Exponent = 0x7c00u;
constexpr uint32_t kBf16Exponent = 0x7f80u;

struct TensorTable {
  const void* data[kTensorsPerLaunch];
  uint32_t exponent[kTensorsPerLaunch];  // the format's exponent mask (16-bit: low half)
  cuda::ChunkIndex<kTensorsPerLaunch> chunks;
};
static_assert(sizeof(TensorTable) <= cuda::kMaxTableBytes, "kernel parameters must fit in 4 KiB");

__device__ __forceinline__ bool word_bad_f32(uint32_t w) {
  return (w & kF32Exponent) == kF32Exponent;
}
// Two 16-bit values in one word.
__device__ __forceinline__ bool word_bad_16(uint32_t w, uint32_t mask) {
  return (w & mask) == mask || ((w >> 16) & mask) == mask;
}

__device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

__global__ void all_finite_kernel(const TensorTable table, int* found) {
  __shared__ int decided;
  const int64_t chunks = table.chunks.chunks();
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    // Already decided (by any block): skip the rest. One read for the block, so all of its
    // threads leave together.
    if (threadIdx.x == 0) decided = *static_cast<volatile int*>(found);
    __syncthreads();
    if (decided) return;
    const cuda::TableChunk at = table.chunks.locate(c, kChunk);
    const int t = at.t;
    const int64_t begin = at.begin, end = at.end;
    const uint32_t mask = table.exponent[t];
    bool bad = false;
    if (mask == kF32Exponent) {
      const uint32_t* p = static_cast<const uint32_t*>(table.data[t]);
      // 16-byte loads over the whole quads of the chunk where it starts 16-byte aligned (a
      // tensor of its own: the allocator aligns to 64 bytes and kChunk is a multiple of 8;
      // a view into a gradient buffer may not be), then the tail one element at a time.
      const int64_t quads = is_aligned16(p + begin) ? (end - begin) / 4 : 0;
      const uint4* q = reinterpret_cast<const uint4*>(p + begin);
      for (int64_t i = threadIdx.x; i < quads; i += blockDim.x) {
        const uint4 v = q[i];
        bad |= word_bad_f32(v.x) | word_bad_f32(v.y) | word_bad_f32(v.z) | word_bad_f32(v.w);
      }
      for (int64_t i = begin + quads * 4 + threadIdx.x; i < end; i += blockDim.x)
        bad |= word_bad_f32(p[i]);
    } else {
      const uint16_t* p = static_cast<const uint16_t*>(table.data[t]);
      const int64_t octs = is_aligned16(p + begin) ? (end - begin) / 8 : 0;
      const uint4* q = reinterpret_cast<const uint4*>(p + begin);
      for (int64_t i = threadIdx.x; i < octs; i += blockDim.x) {
        const uint4 v = q[i];
        bad |= word_bad_16(v.x, mask) | word_bad_16(v.y, mask) | word_bad_16(v.z, mask) |
               word_bad_16(v.w, mask);
      }
      for (int64_t i = begin + octs * 8 + threadIdx.x; i < end; i += blockDim.x)
        bad |= (uint32_t(p[i]) & mask) == mask;
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *static_cast<volatile int*>(found) = 1;
  }
}

__global__ void all_finite_flag_kernel(const int* found, float* flag) {
  *flag = *found ? 0.0f : 1.0f;
}

uint32_t exponent_mask(DType t) {
  switch (t) {
    case DType::f32:
      return kF32Exponent;
    case DType::f16:
      return kF16Exponent;
    case DType::bf16:
      return kBf16Exponent;
    default:
      CAMPO_FAIL("AllFinite: the CUDA kernel takes f32, f16 or bf16 inputs, got ", dtype_name(t));
  }
}

class AllFiniteKernel final : public Kernel {
 public:
  AllFiniteKernel(const KernelSpec& spec, ExecContext& ctx)
      : found_(cuda_backend(ctx).allocate(sizeof(int))),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {
    for (const TensorDesc& d : spec.inputs) exponent_mask(d.dtype);  // fails at compile time
  }

  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    cudaStream_t stream = cuda_stream(ctx);
    int* found = static_cast<int*>(found_.get());
    CAMPO_CUDA_CHECK(cudaMemsetAsync(found, 0, sizeof(int), stream));
    TensorTable table{};
    auto launch = [&] {
      if (table.chunks.count == 0) return;
      all_finite_kernel<<<table.chunks.blocks(multiprocessors_), cuda::kThreads, 0, stream>>>(
          table, found);
      cuda::check_launch("AllFinite");
      table = TensorTable{};
    };
    for (const Tensor& t : in) {
      if (t.numel() == 0) continue;
      const int i = table.chunks.add(t.numel(), kChunk);
      table.data[i] = t.device_data();
      table.exponent[i] = exponent_mask(t.dtype());
      if (table.chunks.full()) launch();
    }
    launch();
    all_finite_flag_kernel<<<1, 1, 0, stream>>>(found, out[0].device_data<float>());
    cuda::check_launch("AllFinite flag");
  }

 private:
  std::shared_ptr<void> found_;  // device int: 1 once a non-finite value is seen
  int multiprocessors_;
};

std::unique_ptr<Kernel> make_all_finite(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<AllFiniteKernel>(spec, ctx);
}

// AllFinite is on the fp32 list (its node's compute type is f32); whatever its inputs' types.
KernelRegistrar all_finite_f32(OpKind::AllFinite, Device::cuda, DType::f32, make_all_finite);

}  // namespace
}  // namespace campo
