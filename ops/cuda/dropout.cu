// CUDA kernel of Dropout with the CPU kernel's exact mask (ops/cpu/elementwise.cc,
// DropoutKernel, is the specification): outputs {y, mask}, mask = u >= rate ? 1 / (1 - rate)
// : 0, y = x * mask, one rounding on store. One 64-bit seed is drawn from ctx.rng per run
// (as on the CPU, so the same context state gives the same mask on both devices), in
// before_run, and stored by a one-thread kernel into a device word that the mask kernel reads,
// so that a captured step (CUDA graphs) replays with each step's seed; block b
// of 4096 elements draws its uniforms in order from its own xoshiro256** generator seeded
// with seed ^ (b * 0xd1b54a32d192ed03) (runtime/rng.h, replicated here bit for bit). The
// mask is a function of (seed, b, position in b) only, but the draws within a block are
// sequential, so each block is one thread's work.
//
// Layout of the work: a warp owns 32 consecutive blocks, lane L generating block L. So that
// loads and stores stay coalesced, the lanes generate 32 consecutive masks each into a
// shared tile, then the warp writes the tile out block by block, 32 consecutive elements at
// a time. Parallelism is numel / 4096 threads: latency bound for small tensors (a few
// hundred microseconds at most), memory bound from ~100M elements.
//
// Per-slice rates (DropoutAttrs::slice_rates): x seen as [outer, S, inner], element i in
// slice (i / inner) % S; the rates and their scales live in a small device buffer made at
// construction.
#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

constexpr int64_t kBlock = 4096;  // elements per generator, as the CPU kernel
constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 4;

// runtime/rng.h's Rng: splitmix64 seeding, xoshiro256**, 24-bit uniforms.
struct DeviceRng {
  uint64_t s[4];
  __device__ explicit DeviceRng(uint64_t seed) {
    uint64_t x = seed;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x += 0x9e3779b97f4a7c15ull;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      s[k] = z ^ (z >> 31);
    }
  }
  static __device__ uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  __device__ uint64_t next() {
    const uint64_t result = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
  }
  // float(next >> 40) * 2^-24: exact (24 bits), as Rng::uniform.
  __device__ float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }
};

struct DropoutArgs {
  const uint64_t* seed;  // device word, stored by store_seed before the step
  int64_t n;
  int64_t inner;        // elements per (outer, slice) run
  int64_t slices;       // 1 for a scalar rate
  const float* rates;   // [slices]
  const float* scales;  // [slices]: 1 / (1 - rate), computed on the host as the CPU does
};

// The seed travels by value in the launch's parameters, so the host's copy may change at once.
__global__ void store_seed(uint64_t* word, uint64_t seed) { *word = seed; }

template <typename T>
__global__ void dropout_kernel(DropoutArgs a, const T* __restrict__ x, T* __restrict__ y,
                               T* __restrict__ mask) {
  __shared__ float tile[kWarpsPerBlock][kWarp][kWarp + 1];  // [warp][block lane][element]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t blocks = (a.n + kBlock - 1) / kBlock;
  const int64_t first_block = (int64_t(blockIdx.x) * kWarpsPerBlock + warp) * kWarp;
  if (first_block >= blocks) return;  // the whole warp leaves together
  const int64_t my_block = first_block + lane;
  DeviceRng rng(*a.seed ^ (uint64_t(my_block) * 0xd1b54a32d192ed03ull));
  const bool single_rate = a.slices == 1;
  const float rate0 = a.rates[0], scale0 = a.scales[0];
  float(*t)[kWarp + 1] = tile[warp];
  for (int64_t offset = 0; offset < kBlock; offset += kWarp) {
    // Each lane draws the next 32 masks of its own block (in order, like the CPU).
    if (my_block < blocks) {
      for (int j = 0; j < kWarp; ++j) {
        const int64_t i = my_block * kBlock + offset + j;
        if (i >= a.n) break;  // the CPU draws nothing past the end
        float rate = rate0, scale = scale0;
        if (!single_rate) {
          const int64_t s = (i / a.inner) % a.slices;
          rate = a.rates[s];
          scale = a.scales[s];
        }
        t[lane][j] = rng.uniform() >= rate ? scale : 0.0f;
      }
    }
    __syncwarp();
    // The warp writes 32 consecutive elements of each of its blocks.
    for (int b = 0; b < kWarp; ++b) {
      const int64_t i = (first_block + b) * kBlock + offset + lane;
      if (first_block + b < blocks && i < a.n) {
        const float m = t[b][lane];
        mask[i] = cuda::from_float<T>(m);
        y[i] = cuda::from_float<T>(__fmul_rn(cuda::to_float(x[i]), m));
      }
    }
    __syncwarp();
  }
}

template <typename T>
class DropoutKernel : public Kernel {
 public:
  DropoutKernel(const KernelSpec& spec, ExecContext& ctx) {
    const auto& a = attrs_as<DropoutAttrs>(spec.attrs);
    CAMPO_CHECK(spec.inputs[0].layout == Layout::plain, "Dropout '", spec.node_name,
                "': the CUDA kernel takes plain layouts only, not ",
                layout_name(spec.inputs[0].layout));
    std::vector<float> rates = a.slice_rates.empty() ? std::vector<float>{a.rate} : a.slice_rates;
    std::vector<float> table = rates;  // rates, then scales
    for (float r : rates) table.push_back(1.0f / (1.0f - r));
    slices_ = int64_t(rates.size());
    const Shape& s = spec.inputs[0].shape;
    numel_ = shape_numel(s);
    if (!a.slice_rates.empty() && numel_ > 0)
      CAMPO_CHECK(s.size() >= 2 && s[1] % slices_ == 0, "Dropout '", spec.node_name,
                  "': x of shape ", shape_str(s), " does not split into ", slices_,
                  " slices along axis 1");
    inner_ = a.slice_rates.empty() || numel_ == 0 ? std::max<int64_t>(numel_, 1)
                                                  : numel_ / (s[0] * slices_);
    table_ = ctx.backend().to_device(Tensor::from_vector(table, {int64_t(table.size())}));
    seed_ = ctx.backend().allocate(sizeof(uint64_t));
  }
  void before_run(ExecContext& ctx) override {
    // The seed is drawn even for an empty tensor, as on the CPU, so the streams stay in step.
    const uint64_t seed = ctx.rng.next_u64();
    if (numel_ == 0) return;
    store_seed<<<1, 1, 0, cuda_stream(ctx)>>>(static_cast<uint64_t*>(seed_.get()), seed);
    cuda::check_launch("Dropout store_seed");
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (numel_ == 0) return;
    const float* table = table_.device_data<float>();
    const DropoutArgs args{
        static_cast<const uint64_t*>(seed_.get()), numel_, inner_, slices_, table, table + slices_};
    const int64_t blocks = (numel_ + kBlock - 1) / kBlock;
    const int64_t per_cuda_block = int64_t(kWarp) * kWarpsPerBlock;
    const int64_t grid = (blocks + per_cuda_block - 1) / per_cuda_block;
    CAMPO_CHECK(grid <= 0x7fffffff, "Dropout: ", numel_, " elements");
    dropout_kernel<T><<<unsigned(grid), kWarp * kWarpsPerBlock, 0, cuda_stream(ctx)>>>(
        args, static_cast<const T*>(in[0].device_data()), static_cast<T*>(out[0].device_data()),
        static_cast<T*>(out[1].device_data()));
    cuda::check_launch("Dropout");
  }

 private:
  int64_t numel_ = 0, inner_ = 1, slices_ = 1;
  Tensor table_;  // device: slices rates, then slices scales
  std::shared_ptr<void> seed_;  // device: this step's seed
};

template <typename T>
std::unique_ptr<Kernel> make_dropout(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<DropoutKernel<T>>(spec, ctx);
}

KernelRegistrar dropout_f32(OpKind::Dropout, Device::cuda, DType::f32, make_dropout<float>);
KernelRegistrar dropout_f16(OpKind::Dropout, Device::cuda, DType::f16, make_dropout<__half>);
KernelRegistrar dropout_bf16(OpKind::Dropout, Device::cuda, DType::bf16,
                             make_dropout<__nv_bfloat16>);

}  // namespace
}  // namespace campo
