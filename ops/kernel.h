// Kernels and their registry. A kernel is created once per graph node at compile time
// (shapes known, so oneDNN primitives are built there) and run every step. Kernels see
// tensors, never graphs. A kernel is registered for (op, device, dtype); the dtype is the
// node's compute type. A missing entry is an error naming all three — no silent fallback.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/op.h"
#include "runtime/backend.h"
#include "runtime/device.h"
#include "runtime/gemm_quant.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace campo {

class Communicator;

// The physical arrangement of a tensor's elements in memory. The graph's semantics are
// always the logical (row-major) ones; a layout other than `plain` is a compile-time choice
// of the executor (graph/layout.h) for 4-D activations [N, C, H, W] between kernels that
// accept it.
//  - plain:  row-major, NCHW for 4-D data.
//  - nChw8c, nChw16c: oneDNN's blocked aBcd8b / aBcd16b: with B = 8 or 16, element
//            (n, c, h, w) at (((n * C/B + c/B) * H + h) * W + w) * B + c % B, for C % B == 0
//            only (so the bytes are exactly those of the plain tensor, permuted).
enum class Layout : uint8_t { plain, nChw8c, nChw16c };
const char* layout_name(Layout layout);
// The channel block of a blocked layout: 8, 16; 0 for plain.
constexpr int channel_block(Layout layout) {
  return layout == Layout::nChw16c ? 16 : layout == Layout::nChw8c ? 8 : 0;
}
// The blocked layout the CPU's convolution kernels read and write natively on this machine:
// nChw16c where oneDNN runs AVX-512 code (its kernels there work on 16-channel blocks, and
// would reorder nChw8c data in and out of every convolution), nChw8c below (AVX2). Follows
// ONEDNN_MAX_CPU_ISA.
Layout cpu_blocked_layout();

// A grouped convolution (`filter` [O, C / groups, kh, kw]) whose groups have an input or output
// channel count that is not a multiple of 8 runs as one oneDNN primitive per group on the
// CPU, on strided views of the group's channels: oneDNN 2.6 has only its GEMM-based
// implementation for such groups, 10-50x slower than its direct kernels on the same groups
// one at a time (a model array of LeNets, whose convolutions have 1, 6 and 16 channels per
// model; docs/kernels.md, "Grouped convolutions"). Its activations stay plain (the layout pass
// leaves it out).
inline bool runs_per_group(const ConvAttrs& a, const Shape& filter) {
  return a.groups > 1 && (filter[1] % 8 != 0 || (filter[0] / a.groups) % 8 != 0);
}

struct TensorDesc {
  Shape shape;
  DType dtype = DType::f32;
  Layout layout = Layout::plain;  // decided at compile time; kernels build for it
};

// The channel block of a kernel operand's layout (channel_block: 0 for plain), checked: a
// blocked operand is 4-D with C % B == 0. `kernel` names the kernel in the internal error.
inline int checked_channel_block(const TensorDesc& d, const char* kernel) {
  const int b = channel_block(d.layout);
  CAMPO_CHECK(b == 0 || (d.shape.size() == 4 && d.shape[1] % b == 0), "internal: ", kernel, " on ",
              layout_name(d.layout), " data of shape ", shape_str(d.shape));
  return b;
}

// Calls f.template operator()<B>() with B = `block` (16, 8, or 0 for plain data), so that a
// CPU kernel's loops over a block's channels have a constant trip count.
template <typename F>
void with_channel_block(int block, F&& f) {
  if (block == 16) return f.template operator()<16>();
  if (block == 8) return f.template operator()<8>();
  CAMPO_CHECK(block == 0, "internal: a channel block of ", block);
  f.template operator()<0>();
}

// Everything a kernel factory may look at. An input's or output's layout is `plain` unless
// the kernel accepts blocked data for it (graph/layout.cc, layout_role).
struct KernelSpec {
  OpKind kind;
  Attrs attrs;
  DType dtype;  // compute type of the node
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  std::string node_name;  // for error messages
  int pad_to = 0;         // the node's padding request (graph/graph.h Node::pad_to)
  // A quantized GEMM (graph/graph.h Node::quant): its operand format and, per operand, the
  // state tensor its kernel updates in place every step (a variable of the store).
  GemmQuant quant;
  std::vector<Tensor> quant_state;
};

// Per-run state handed to kernels: the backend they run on (its memory, queue, and for
// CPU kernels the oneDNN engine and stream, ops/cpu/context.h), the RNG for dropout, the
// current step, and kernel workspace. Owned by the executor (one per executable); no
// globals.
class ExecContext {
 public:
  // A context on a new CPU backend (tests, tools).
  ExecContext();
  explicit ExecContext(std::shared_ptr<Backend> backend);
  ~ExecContext();
  Backend& backend() { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const { return backend_; }

  Rng rng{0};
  int64_t step = 0;
  // The run's --seed (CompileOptions::seed): the key of the quantized GEMMs' stochastic
  // rounding (runtime/gemm_quant.h).
  uint64_t seed = 0;
  // Whether low-precision kernels created with this context may use their native
  // implementation (consulted at kernel creation; false: they run as f32 emulation). Starts
  // as the backend allows (CAMPO_CPU_BF16 on the CPU); tests flip it to compare both.
  bool native_bf16 = true;
  // The same for f16 (CAMPO_CPU_F16 on the CPU).
  bool native_f16 = true;
  // --numerics (runtime/numerics.h): while armed, the kernels of the tensors it watches (the
  // CPU's quantized GEMMs and Casts) write what their casts lost; null: nothing recorded.
  std::shared_ptr<NumericsRecorder> numerics;

  // One staging buffer shared by the kernels of a context (the kernels of a context run one
  // at a time, so a buffer as large as the largest need serves them all), from the
  // backend's memory: what a kernel needs only while it runs (oneDNN scratchpads, reorder
  // buffers, staged operands). Grown only when a kernel is created; run() takes the current
  // address (a later, larger reservation moves it). Returns the offset of the kernel's
  // `bytes` in it: 0, or past what an enclosing kernel keeps there while it runs the one
  // being created (WorkspaceFloor). One reservation per kernel: a second one would get the
  // same offset.
  size_t reserve_workspace(size_t bytes);
  void* workspace() { return workspace_.get(); }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // While it lives, kernels created with `ctx` reserve workspace after its first `bytes`
  // (an emulated low-precision kernel stages its operands there around its f32 kernel).
  class WorkspaceFloor {
   public:
    WorkspaceFloor(ExecContext& ctx, size_t bytes) : ctx_(ctx), saved_(ctx.workspace_floor_) {
      ctx.workspace_floor_ = bytes;
    }
    ~WorkspaceFloor() { ctx_.workspace_floor_ = saved_; }
    WorkspaceFloor(const WorkspaceFloor&) = delete;
    WorkspaceFloor& operator=(const WorkspaceFloor&) = delete;

   private:
    ExecContext& ctx_;
    size_t saved_;
  };

  // Buffers a kernel keeps for itself from one step to the next (zeroed padding, per-thread
  // partial sums), counted by the kernels that allocate them for the executable's memory
  // report.
  void count_kernel_buffer(size_t bytes) { kernel_buffer_bytes_ += bytes; }
  size_t kernel_buffer_bytes() const { return kernel_buffer_bytes_; }

  // A data-parallel run's ranks (runtime/communicator.h), which AllReduceStart and
  // AllReduceWait reduce gradient buckets over; null: one process.
  std::shared_ptr<Communicator> communicator;

  // AllReduceStart's and AllReduceWait's bookkeeping, shared by every device: start the sum
  // of `count` floats at `bucket` (`stream`: the device's queue, null on the CPU) and
  // remember its ticket; then finish the bucket's sum (on `stream`: a device waits there,
  // the host does not; null: the host waits, and the wait is counted) and count its bytes.
  void start_reduction(float* bucket, int64_t count, Device device, void* stream);
  void finish_reduction(const float* bucket, int64_t bytes, void* stream);

 private:
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<void> workspace_;
  size_t workspace_bytes_ = 0;
  size_t workspace_floor_ = 0;
  size_t kernel_buffer_bytes_ = 0;
  // The buckets whose sums are under way, by their data: the ticket to finish.
  std::map<const void*, int64_t> reductions_in_flight_;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // inputs/outputs have exactly the shapes and dtypes of the spec. Outputs are
  // preallocated (planned); a kernel never allocates in run() except through scratch
  // it sized at construction.
  virtual void run(ExecContext& ctx, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs) = 0;

  // A step may be captured once and replayed (CUDA graphs, Backend::begin_capture): then
  // run() is called once, while capturing, and its host code does not run again; only the
  // device work it issued is replayed. What must happen at every step on the host goes in
  // these two, which the executor calls around every run and every replay (eagerly: right
  // before and after run(); replaying: every kernel's before_run in schedule order, the
  // replay, then every after_run), never while capturing:
  //  - before_run: checks of what an earlier run found on the device (deferred errors),
  //    values drawn on the host that the device work reads (Dropout's seed), issued on the
  //    queue ahead of the step's work;
  //  - after_run: work that marks the step's end on the queue (the event behind a deferred
  //    error's copy).
  virtual void before_run(ExecContext&) {}
  virtual void after_run(ExecContext&) {}
  // Why run()'s device work cannot be recorded for replay (its host code must run at every
  // step: a data-parallel reduction's host bookkeeping); empty when it can.
  virtual std::string capture_blocker() const { return {}; }
};

// One eager run with its host hooks: before_run, run, after_run (what the executor does for
// a node that is not replayed; tools and tests that run a kernel directly call this).
inline void run_kernel(Kernel& kernel, ExecContext& ctx, const std::vector<Tensor>& inputs,
                       const std::vector<Tensor>& outputs) {
  kernel.before_run(ctx);
  kernel.run(ctx, inputs, outputs);
  kernel.after_run(ctx);
}

using KernelFactory = std::unique_ptr<Kernel> (*)(const KernelSpec& spec, ExecContext& ctx);

void register_kernel(OpKind kind, Device device, DType dtype, KernelFactory factory);
// On a backend that emulates low precision (the CPU), an op with an f32 kernel also has
// f16 and bf16 kernels: the registered native one, else the f32 kernel emulated
// (ops/cpu/low_precision.h).
// `emulates_low_precision`: the backend's lookup rule (Backend::emulates_low_precision).
bool has_kernel(OpKind kind, Device device, DType dtype, bool emulates_low_precision);
bool has_kernel(OpKind kind, const Backend& backend, DType dtype);
// The kernel for (op, the context's backend, dtype); throws, naming op, device and dtype,
// when neither a registered kernel nor the backend's rule gives one.
std::unique_ptr<Kernel> create_kernel(const KernelSpec& spec, ExecContext& ctx);

// The kernel of every quantized GEMM (KernelSpec::quant: MatMul, BatchMatMulV2, Conv2D and
// its backprops) on `device`; create_kernel sends a spec with quant.enabled there. The CPU
// registers its emulation (ops/cpu/quantized_gemm.cc), a CUDA build its GPU kernel
// (ops/cuda/quantized_gemm.cu: cuBLASLt FP8 or emulated, ops/quantized_gemm_route.h);
// elsewhere create_kernel refuses such a node.
void register_quantized_gemm_kernel(Device device, KernelFactory factory);
bool has_quantized_gemm_kernel(Device device);
// The ops a quantized GEMM format may apply to.
bool is_quantizable_gemm(OpKind kind);

// Static registration helper: `static KernelRegistrar r(OpKind::Relu, Device::cpu, DType::f32, f);`
struct KernelRegistrar {
  KernelRegistrar(OpKind kind, Device device, DType dtype, KernelFactory factory) {
    register_kernel(kind, device, dtype, factory);
  }
};

// A kernel that copies a 4-D tensor from one layout to another (the executor's layout
// conversions, graph/layout.h): inputs {x in from.layout}, outputs {x in to.layout}; `from`
// and `to` differ only in layout. CPU only (a oneDNN reorder).
std::unique_ptr<Kernel> create_layout_conversion(const TensorDesc& from, const TensorDesc& to,
                                                 ExecContext& ctx);

// Runs one op eagerly on tensors of the context's backend: creates the kernel, allocates
// zeroed outputs there, runs it. For tests and tools; the executor does not use it.
std::vector<Tensor> run_op_eager(OpKind kind, const Attrs& attrs, DType dtype,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<TensorDesc>& output_descs, ExecContext& ctx);

}  // namespace campo
