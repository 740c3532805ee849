// CUDA kernels of GatherV2 and UnsortedSegmentSum (ops/gather.cc; the CPU kernels in
// ops/cpu/gather.cc are the specification). Both see their tensors as rows: params / y of
// GatherV2 and data / y of UnsortedSegmentSum are [rows, D]; indices / segment ids a flat list.
//  GatherV2: y[i, :] = params[indices[i], :], a copy by the widest word (16, 8, 4, 2 bytes)
//    dividing the row bytes; one kernel for f32, bf16 and f16.
//  UnsortedSegmentSum: y[s, :] = sum_{i : ids[i] == s} data[i, :], zeros where no id points.
//    Deterministic without atomics, and in the CPU kernel's order: the (id, row) pairs are
//    sorted by id with CUB's radix sort, which is stable, so each segment's rows stay in
//    ascending order; then one thread per output element sums its segment's rows in that
//    order in f32 and stores once (one rounding for f16 / bf16). The f32 result is the CPU's
//    bit for bit (the same additions in the same order). The sort's scratch (keys, rows,
//    segment bounds, CUB's temporary storage) is allocated at construction.
//
// Out-of-range ids (outside [0, V) for GatherV2, [0, S) for UnsortedSegmentSum). The CPU
// kernel checks them on the host before any work and throws naming the node, the id and its
// position. The ids live on the device here, and reading them back would synchronize the
// stream every step, so the check runs inside the kernels instead: an out-of-range index
// gathers a zero row, an out-of-range segment id is left out of every sum (TensorFlow's GPU
// behaviour), and the first offender (its position and value) is written to a flag in mapped
// host memory. Every run() of the kernel first reads that flag and throws the CPU kernel's
// error, saying it happened in an earlier run: the first run() issued after the faulty run
// has finished on the device (after the step's synchronization, the next step's) reports it.
// So the error comes late (the faulty run's outputs are the ones just described), never
// silently dropped.
#include <cub/device/device_radix_sort.cuh>

#include <climits>
#include <memory>

#include "ops/cuda/context.h"
#include "ops/cuda/device_math.cuh"

namespace campo {
namespace {

// An out-of-range id seen by a kernel: claimed by the first offender, then position and value
// written, then `reported` set (after a system-wide fence, so the host sees all three).
struct BadId {
  int32_t claimed;
  int32_t value;
  int64_t position;
  volatile int32_t reported;
};

__device__ void report_bad_id(BadId* flag, int64_t position, int32_t value) {
  if (atomicCAS(&flag->claimed, 0, 1) != 0) return;
  flag->value = value;
  flag->position = position;
  __threadfence_system();
  flag->reported = 1;
}

// The flag, in pinned host memory mapped into the device's address space.
class BadIdFlag {
 public:
  BadIdFlag() {
    void* p = nullptr;
    CAMPO_CUDA_CHECK(cudaHostAlloc(&p, sizeof(BadId), cudaHostAllocMapped));
    host_.reset(static_cast<BadId*>(p));
    *host_ = BadId{};
    void* d = nullptr;
    CAMPO_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    device_ = static_cast<BadId*>(d);
  }
  BadId* device() const { return device_; }

  // Throws when an earlier run reported an id outside [0, limit), and clears the flag.
  void check(const char* op, const std::string& node, const char* what, const Shape& ids_shape,
             int64_t limit, const char* limit_name) {
    if (!host_->reported) return;
    const int32_t value = host_->value;
    const int64_t position = host_->position;
    *host_ = BadId{};
    CAMPO_FAIL(op, " '", node, "': ", what, " ", value, " at position ",
               position_of(position, ids_shape), " is outside [0, ", limit, ") (", limit_name, " ",
               limit, "); seen on the device in an earlier run, whose output had ",
               (std::string(op) == "GatherV2" ? "a zero row" : "that row left out"), " there");
  }

 private:
  // "[1, 2]": the position of flat element `flat` in a tensor of `shape` (as the CPU's errors).
  static std::string position_of(int64_t flat, const Shape& shape) {
    Shape pos(shape.size());
    for (size_t d = shape.size(); d-- > 0;) {
      pos[d] = shape[d] > 0 ? flat % shape[d] : 0;
      flat = shape[d] > 0 ? flat / shape[d] : 0;
    }
    return shape_str(pos);
  }
  struct FreeHost {
    void operator()(BadId* p) const { cudaFreeHost(p); }
  };
  std::unique_ptr<BadId, FreeHost> host_;
  BadId* device_ = nullptr;
};

int64_t trailing_numel(const Shape& s, size_t first) {
  int64_t n = 1;
  for (size_t d = first; d < s.size(); ++d) n *= s[d];
  return n;
}

// ---- GatherV2 ----

// y[i, k] = params[indices[i], k] for rows of `row` words; a zero row for a bad index.
template <typename W>
__global__ void gather_rows(const W* __restrict__ params, const int32_t* __restrict__ indices,
                            W* __restrict__ y, int64_t count, int64_t row, int64_t V, BadId* flag) {
  CAMPO_CUDA_FOR(t, count * row) {
    const int64_t i = t / row, k = t % row;
    const int32_t id = indices[i];
    if (id >= 0 && id < V) {
      y[t] = params[int64_t(id) * row + k];
    } else {
      y[t] = W{};
      if (k == 0) report_bad_id(flag, i, id);
    }
  }
}

// inputs {params [V, D...], indices [I...] i32} -> y [I..., D...].
class GatherCudaKernel : public Kernel {
 public:
  GatherCudaKernel(const KernelSpec& spec, ExecContext& ctx)
      : node_(spec.node_name),
        indices_shape_(spec.inputs[1].shape),
        rows_(spec.inputs[0].shape[0]),
        row_bytes_(trailing_numel(spec.inputs[0].shape, 1) * int64_t(dtype_size(spec.inputs[0].dtype))),
        count_(shape_numel(spec.inputs[1].shape)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {}

  void before_run(ExecContext&) override {  // an earlier run's indices
    flag_.check("GatherV2", node_, "index", indices_shape_, rows_, "params has V =");
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    if (count_ * row_bytes_ == 0) return;
    const uint64_t bits = uint64_t(row_bytes_) | reinterpret_cast<uintptr_t>(in[0].device_data()) |
                          reinterpret_cast<uintptr_t>(out[0].device_data());
    switch (std::min<uint64_t>(bits & (~bits + 1), 16)) {
      case 16:
        return launch<uint4>(ctx, in, out);
      case 8:
        return launch<uint2>(ctx, in, out);
      case 4:
        return launch<uint32_t>(ctx, in, out);
      case 2:
        return launch<uint16_t>(ctx, in, out);
      default:
        return launch<uint8_t>(ctx, in, out);
    }
  }

 private:
  template <typename W>
  void launch(ExecContext& ctx, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
    const int64_t row = row_bytes_ / int64_t(sizeof(W));
    gather_rows<W><<<cuda::grid_for(count_ * row, multiprocessors_), cuda::kThreads, 0, cuda_stream(ctx)>>>(
        static_cast<const W*>(in[0].device_data()), in[1].device_data<int32_t>(),
        static_cast<W*>(out[0].device_data()), count_, row, rows_, flag_.device());
    cuda::check_launch("GatherV2 gather_rows");
  }

  std::string node_;
  Shape indices_shape_;
  int64_t rows_, row_bytes_, count_;
  int multiprocessors_;
  BadIdFlag flag_;
};

// ---- UnsortedSegmentSum ----

// keys[i] = ids[i] (S for a bad id: sorted past every segment, summed nowhere), rows[i] = i.
__global__ void segment_keys(const int32_t* __restrict__ ids, uint32_t* __restrict__ keys,
                             int32_t* __restrict__ rows, int64_t n, int64_t S, BadId* flag) {
  CAMPO_CUDA_FOR(i, n) {
    const int32_t id = ids[i];
    const bool valid = id >= 0 && id < S;
    keys[i] = valid ? uint32_t(id) : uint32_t(S);
    rows[i] = int32_t(i);
    if (!valid) report_bad_id(flag, i, id);
  }
}

// first[s] = the first position of sorted `keys` with a key >= s, for s in [0, S].
__global__ void segment_bounds(const uint32_t* __restrict__ keys, int32_t* __restrict__ first,
                               int64_t n, int64_t S) {
  CAMPO_CUDA_FOR(s, S + 1) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (int64_t(keys[mid]) < s)
        lo = mid + 1;
      else
        hi = mid;
    }
    first[s] = int32_t(lo);
  }
}

// y[s, c] = sum over k in [first[s], first[s + 1]) of data[rows[k], c], in that order, in f32.
template <typename T>
__global__ void segment_sums(const T* __restrict__ data, const int32_t* __restrict__ rows,
                             const int32_t* __restrict__ first, T* __restrict__ y, int64_t S,
                             int64_t D) {
  CAMPO_CUDA_FOR(t, S * D) {
    const int64_t s = t / D, c = t % D;
    float acc = 0.0f;
    for (int32_t k = first[s]; k < first[s + 1]; ++k) acc += cuda::to_float(data[int64_t(rows[k]) * D + c]);
    y[t] = cuda::from_float<T>(acc);
  }
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// inputs {data [I..., D...], segment_ids [I...] i32} -> y [S, D...].
template <typename T>
class UnsortedSegmentSumCudaKernel : public Kernel {
 public:
  UnsortedSegmentSumCudaKernel(const KernelSpec& spec, ExecContext& ctx)
      : node_(spec.node_name),
        ids_shape_(spec.inputs[1].shape),
        segments_(attrs_as<UnsortedSegmentSumAttrs>(spec.attrs).num_segments),
        width_(trailing_numel(spec.inputs[0].shape, spec.inputs[1].shape.size())),
        n_(shape_numel(spec.inputs[1].shape)),
        multiprocessors_(cuda_backend(ctx).multiprocessors()) {
    CAMPO_CHECK(n_ < INT32_MAX && segments_ < INT32_MAX, "UnsortedSegmentSum '", node_, "': ", n_,
                " ids into ", segments_, " segments; the CUDA kernel takes fewer than 2^31 of each");
    // Radix-sort only the bits a key in [0, S] has.
    while ((int64_t(1) << end_bit_) <= segments_) ++end_bit_;
    const size_t n = size_t(n_);
    if (n > 0)
      CAMPO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes_, static_cast<const uint32_t*>(nullptr),
                                                       static_cast<uint32_t*>(nullptr),
                                                       static_cast<const int32_t*>(nullptr),
                                                       static_cast<int32_t*>(nullptr), int(n_), 0, end_bit_,
                                                       cuda_stream(ctx)));
    // keys, sorted keys, rows, sorted rows, segment bounds, CUB's temporary storage.
    const size_t keys = align256(n * sizeof(uint32_t)), rows = align256(n * sizeof(int32_t));
    const size_t bounds = align256(size_t(segments_ + 1) * sizeof(int32_t));
    scratch_ = ctx.backend().allocate(2 * keys + 2 * rows + bounds + align256(temp_bytes_));
    char* p = static_cast<char*>(scratch_.get());
    keys_ = reinterpret_cast<uint32_t*>(p);
    sorted_keys_ = reinterpret_cast<uint32_t*>(p + keys);
    rows_ = reinterpret_cast<int32_t*>(p + 2 * keys);
    sorted_rows_ = reinterpret_cast<int32_t*>(p + 2 * keys + rows);
    first_ = reinterpret_cast<int32_t*>(p + 2 * keys + 2 * rows);
    temp_ = p + 2 * keys + 2 * rows + bounds;
  }

  void before_run(ExecContext&) override {  // an earlier run's segment ids
    flag_.check("UnsortedSegmentSum", node_, "segment id", ids_shape_, segments_, "num_segments");
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const int64_t total = segments_ * width_;
    if (total == 0) return;
    cudaStream_t stream = cuda_stream(ctx);
    if (n_ == 0) {  // no rows: every segment is empty
      CAMPO_CUDA_CHECK(cudaMemsetAsync(out[0].device_data(), 0, out[0].nbytes(), stream));
      return;
    }
    segment_keys<<<cuda::grid_for(n_, multiprocessors_), cuda::kThreads, 0, stream>>>(
        in[1].device_data<int32_t>(), keys_, rows_, n_, segments_, flag_.device());
    cuda::check_launch("UnsortedSegmentSum segment_keys");
    size_t temp_bytes = temp_bytes_;
    CAMPO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp_, temp_bytes, keys_, sorted_keys_, rows_,
                                                     sorted_rows_, int(n_), 0, end_bit_, stream));
    segment_bounds<<<cuda::grid_for(segments_ + 1, multiprocessors_), cuda::kThreads, 0, stream>>>(
        sorted_keys_, first_, n_, segments_);
    cuda::check_launch("UnsortedSegmentSum segment_bounds");
    segment_sums<T><<<cuda::grid_for(total, multiprocessors_), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(in[0].device_data()), sorted_rows_, first_,
        static_cast<T*>(out[0].device_data()), segments_, width_);
    cuda::check_launch("UnsortedSegmentSum segment_sums");
  }

 private:
  std::string node_;
  Shape ids_shape_;
  int64_t segments_, width_, n_;
  int multiprocessors_;
  int end_bit_ = 1;
  size_t temp_bytes_ = 0;
  std::shared_ptr<void> scratch_;
  uint32_t *keys_ = nullptr, *sorted_keys_ = nullptr;
  int32_t *rows_ = nullptr, *sorted_rows_ = nullptr, *first_ = nullptr;
  void* temp_ = nullptr;
  BadIdFlag flag_;
};

template <typename K>
std::unique_ptr<Kernel> make(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<K>(spec, ctx);
}

KernelRegistrar gather_f32(OpKind::GatherV2, Device::cuda, DType::f32, make<GatherCudaKernel>);
KernelRegistrar gather_f16(OpKind::GatherV2, Device::cuda, DType::f16, make<GatherCudaKernel>);
KernelRegistrar gather_bf16(OpKind::GatherV2, Device::cuda, DType::bf16, make<GatherCudaKernel>);
KernelRegistrar segment_sum_f32(OpKind::UnsortedSegmentSum, Device::cuda, DType::f32,
                                make<UnsortedSegmentSumCudaKernel<float>>);
KernelRegistrar segment_sum_f16(OpKind::UnsortedSegmentSum, Device::cuda, DType::f16,
                                make<UnsortedSegmentSumCudaKernel<__half>>);
KernelRegistrar segment_sum_bf16(OpKind::UnsortedSegmentSum, Device::cuda, DType::bf16,
                                 make<UnsortedSegmentSumCudaKernel<__nv_bfloat16>>);

}  // namespace
}  // namespace campo
