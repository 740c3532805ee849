// CPU kernel of Cast between f32, f16 and bf16 through campo::convert (vectorised,
// multithreaded, round to nearest even). Registered under every source dtype, since a
// Cast node's compute dtype is its source dtype (ops/cast.cc); the conversion itself is
// driven by the actual input and output types.
//
// --numerics all: at a step the context's recorder is armed for, a watched Cast (f32 to f16 or
// bf16) counts what it lost (runtime/numerics.h) in a second pass over its input and output,
// at those steps only (convert's vector code has no place for the counts).
#include "ops/kernel.h"
#include "runtime/chunked_for.h"

namespace campo {
namespace {

constexpr size_t kParallelThreshold = size_t(1) << 15;
constexpr size_t kChunk = size_t(1) << 14;

// What casting x (f32) to y (f16 or bf16 bits) lost: overflow to inf, flush to zero.
CastNumerics count_cast(const float* x, const uint16_t* y, DType to, size_t n) {
  const bool f16 = to == DType::f16;
  const double limit = f16 ? 65504.0 : double(bf16_bits_to_f32(0x7f7f));  // the largest finite
  CastNumerics out;
  for_each_chunk(n, kParallelThreshold, kChunk, [&](size_t begin, size_t end) {
    NumericsCounts chunk;
    chunk.elements = int64_t(end - begin);
    for (size_t i = begin; i < end; ++i)
      chunk.count(x[i], f16 ? f16_bits_to_f32(y[i]) : bf16_bits_to_f32(y[i]), limit);
#pragma omp critical(campo_cast_numerics)
    out.counts.merge(chunk);
  });
  return out;
}

class CastKernel : public Kernel {
 public:
  CastKernel(const KernelSpec& spec, ExecContext&)
      : from_(spec.inputs[0].dtype), to_(spec.outputs[0].dtype), node_(spec.node_name) {
    CAMPO_CHECK(is_floating(from_) && is_floating(to_), "Cast '", spec.node_name,
                "': ", dtype_name(from_), " -> ", dtype_name(to_), " is not supported");
  }
  void run(ExecContext& ctx, const std::vector<Tensor>& in,
           const std::vector<Tensor>& out) override {
    const size_t n = size_t(in[0].numel());
    convert(in[0].device_data(), from_, out[0].device_data(), to_, n);
    if (const int entry = numerics_entry(ctx); entry >= 0)
      ctx.numerics->write(
          entry, count_cast(in[0].device_data<float>(), out[0].device_data<uint16_t>(), to_, n));
  }

 private:
  // This Cast's --numerics entry for this step: -1 unless the context's recorder is armed and
  // watches it (looked up once per recorder).
  int numerics_entry(const ExecContext& ctx) {
    const NumericsRecorder* r = ctx.numerics.get();
    if (!r || !r->armed()) return -1;
    if (r != recorder_) {
      recorder_ = r;
      entry_ = r->find(node_, "x");
      CAMPO_CHECK(entry_ < 0 || (from_ == DType::f32 && is_low_precision(to_)),
                  "internal: --numerics watches Cast '", node_, "' from ", dtype_name(from_),
                  " to ", dtype_name(to_));
    }
    return entry_;
  }

  DType from_, to_;
  std::string node_;
  const NumericsRecorder* recorder_ = nullptr;
  int entry_ = -1;
};

std::unique_ptr<Kernel> make_cast(const KernelSpec& spec, ExecContext& ctx) {
  return std::make_unique<CastKernel>(spec, ctx);
}

KernelRegistrar cast_f32(OpKind::Cast, Device::cpu, DType::f32, make_cast);
KernelRegistrar cast_f16(OpKind::Cast, Device::cpu, DType::f16, make_cast);
KernelRegistrar cast_bf16(OpKind::Cast, Device::cpu, DType::bf16, make_cast);

}  // namespace
}  // namespace campo
