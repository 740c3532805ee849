// Kernels and their registry. A kernel is created once per graph node at compile time
// (shapes known, so oneDNN primitives are built there) and run every step. Kernels see
// tensors, never graphs. A kernel is registered for (op, device, dtype); the dtype is the
// node's compute type. A missing entry is an error naming all three — no silent fallback.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ops/op.h"
#include "runtime/device.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace dnnl {
struct engine;
struct stream;
}  // namespace dnnl

namespace campo {

struct TensorDesc {
  Shape shape;
  DType dtype = DType::f32;
};

// Everything a kernel factory may look at.
struct KernelSpec {
  OpKind kind;
  Attrs attrs;
  DType dtype;  // compute type of the node
  std::vector<TensorDesc> inputs;
  std::vector<TensorDesc> outputs;
  std::string node_name;  // for error messages
  int pad_to = 0;         // the node's padding request (graph/graph.h Node::pad_to)
};

// Per-run state handed to kernels: the oneDNN engine/stream (CPU), the RNG for dropout,
// the current step, and the low-precision settings (ops/cpu/low_precision.h). Owned by the
// executor; no globals.
struct CpuContext {
  // Reads CAMPO_CPU_BF16 (unset or `native`: native bf16 kernels where the CPU has them;
  // `emulate`: every bf16 kernel runs as f32 emulation); throws on any other value.
  CpuContext();
  ~CpuContext();
  dnnl::engine& engine();
  dnnl::stream& stream();
  Rng rng{0};
  int64_t step = 0;
  // Whether bf16 kernels created with this context may use their native implementation
  // (consulted at kernel creation; tests flip it to compare native and emulated kernels).
  bool native_bf16 = true;

  // One f32 staging buffer shared by the emulated low-precision kernels: the kernels of a
  // context run one at a time, so a buffer as large as the largest need serves them all.
  // Grown only when a kernel is created; run() takes the current address (a later,
  // larger reservation moves it).
  void reserve_emulation_workspace(size_t bytes);
  void* emulation_workspace();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // inputs/outputs have exactly the shapes and dtypes of the spec. Outputs are
  // preallocated (planned); a kernel never allocates in run() except through scratch
  // it sized at construction.
  virtual void run(CpuContext& ctx, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& outputs) = 0;
};

using KernelFactory = std::unique_ptr<Kernel> (*)(const KernelSpec& spec, CpuContext& ctx);

void register_kernel(OpKind kind, Device device, DType dtype, KernelFactory factory);
// An op with an f32 CPU kernel also has (op, cpu, f16) and (op, cpu, bf16) kernels: the
// registered native one, else the f32 kernel emulated (ops/cpu/low_precision.h).
bool has_kernel(OpKind kind, Device device, DType dtype);
// Throws, naming op, device and dtype, when nothing is registered.
std::unique_ptr<Kernel> create_kernel(const KernelSpec& spec, Device device, CpuContext& ctx);

// Static registration helper: `static KernelRegistrar r(OpKind::Relu, Device::cpu, DType::f32, f);`
struct KernelRegistrar {
  KernelRegistrar(OpKind kind, Device device, DType dtype, KernelFactory factory) {
    register_kernel(kind, device, dtype, factory);
  }
};

// Runs one op eagerly on host tensors: creates the kernel, allocates outputs, runs it.
// For tests and tools; the executor does not use it.
std::vector<Tensor> run_op_eager(OpKind kind, const Attrs& attrs, DType dtype,
                                 const std::vector<Tensor>& inputs,
                                 const std::vector<TensorDesc>& output_descs, CpuContext& ctx);

}  // namespace campo
