// FP8 and MX as GEMM operand formats (docs/formats.md, "FP8 and MX GEMMs"): the scaling
// recipes and the per-step quantization of one GEMM operand, emulated on the CPU.
//
// A quantized GEMM node (graph/graph.h Node::quant) multiplies its two operands after
// quantizing each (as Transformer Engine does): the operand's amax, a scale, a cast of
// x * scale to the element format; the GEMM then multiplies the decoded codes (exact in
// bf16 and f32), accumulates in f32 and multiplies the result by the product of the two
// inverse scales. MX operands are dequantized per 32-element block instead (no scale after).
//
// The scale of a per-tensor recipe (delayed, current), TE's rule:
//   scale = (max_finite / amax) / 2^margin        in f32, where amax > 0 and finite;
//   otherwise the previous scale is kept (1 at the start, and always 1 for current scaling).
// - delayed: the scale of step t comes from the amax history before step t (its `history`
//   last amaxes, reduced by max or most_recent); step t's own amax is pushed after the cast.
// - current: amax is the operand's own, this step.
// - none:    scale 1 (raw saturation of the element format).
// - mx:      the OCP MX v1.0 block scale of runtime/mx.h, blocks along the reduction axis.
//
// Invariants: an operand's state is a flat f32 tensor (gemm_quant_state_size) that the
// kernel updates in place every step and checkpoints save (graph/checkpoint.h):
//   [0] the scale the next step uses, [1] the steps quantized so far (exact below 2^24),
//   [2 .. 2 + history) the amax history, most recent first (delayed only).
// Stochastic rounding draws philox_bits64(seed, stream, i) with a stream that is a pure
// function of (node name, operand, step count): the same bits on any thread count and
// after a resume.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "runtime/minifloat.h"
#include "runtime/numerics.h"

namespace campo {

enum class Scaling : uint8_t { delayed, current, mx, none };
enum class AmaxReduction : uint8_t { max, most_recent };
const char* scaling_name(Scaling s);               // "delayed", "current", "mx", "none"
const char* amax_reduction_name(AmaxReduction r);  // "max", "most_recent"

inline constexpr int kDefaultAmaxHistory = 1024;  // Transformer Engine's default

struct ScalingRecipe {
  Scaling scaling = Scaling::delayed;
  int history = kDefaultAmaxHistory;        // delayed: amaxes kept
  AmaxReduction amax = AmaxReduction::max;  // delayed: how the history gives the amax
  int margin = 0;                           // delayed, current: scale / 2^margin
  Saturation saturation = Saturation::saturating;
  // "delayed (history 1024, max, margin 0)", "mx", ...
  std::string describe() const;
};

// The operand format of a quantized GEMM node. Operand i of the node (its inputs 0 and 1)
// is cast to element[i]; `blocks`: MX blocks of 32 along the reduction axis.
struct GemmQuant {
  bool enabled = false;
  bool blocks = false;
  std::array<ElementFormat, 2> element = {ElementFormat::e4m3, ElementFormat::e4m3};
  ScalingRecipe recipe;
  Rounding rounding = Rounding::nearest_even;
  std::string format;  // the policy's name for it: "fp8", "mxfp4", ...
  // "fp8 e4m3 x e5m2, delayed (history 1024, max, margin 0), nearest"
  std::string describe() const;
};

// Elements of one operand's state tensor (see the file comment).
int64_t gemm_quant_state_size(const ScalingRecipe& recipe);
// The VariableStore name of operand `operand`'s state of node `node`: "<node>/quant.a", ".b".
std::string gemm_quant_state_name(const std::string& node, int operand);

// Host and device: the rules below that the CUDA kernels share (ops/cuda/quantized_gemm.cu).
#if defined(__CUDACC__)
#define CAMPO_HOST_DEVICE __host__ __device__
#else
#define CAMPO_HOST_DEVICE
#endif

// TE's scale rule above, in f32 (the CPU's and the GPU's scales are the same bits: two
// correctly rounded divisions by exact powers of two and an amax that is exact).
CAMPO_HOST_DEVICE inline float scale_from_amax(float amax, float max_finite, int margin,
                                               float previous) {
  constexpr float kMaxF32 = 3.40282346638528859812e+38f;
  if (!(amax > 0.0f && amax <= kMaxF32)) return previous;  // 0, inf or NaN
  float two_to_margin = 1.0f;                              // exact: a power of two
  for (int i = 0; i < margin; ++i) two_to_margin *= 2.0f;
  for (int i = 0; i > margin; --i) two_to_margin *= 0.5f;
  const float scale = (max_finite / amax) / two_to_margin;
  // An amax so small that the scale overflows f32 keeps the previous scale too (TE would
  // store inf and cast everything to NaN).
  return scale > 0.0f && scale <= kMaxF32 ? scale : previous;
}
// max |x_i|; +inf when some x_i is not finite (NaN included).
float tensor_amax(std::span<const float> x);
// Pushes `amax` into `history` (most recent first, the oldest dropped) and returns the amax
// the next scale is computed from: the history's max, or `amax` itself for most_recent.
float push_amax_history(std::span<float> history, float amax, AmaxReduction reduction);

// How operand values map onto MX blocks: the tensor viewed as [outer, length, inner]
// (row-major), blocks of 32 consecutive elements along `length` for each (outer, inner).
struct BlockAxis {
  int64_t outer = 1, length = 1, inner = 1;
};

// One step of one operand: quantizes x into `dst` (same size) with the node's format and
// updates `state` (gemm_quant_state_size floats). Per-tensor recipes write the decoded codes
// of x * scale (not unscaled) and return 1 / scale, by which the GEMM's result is to be
// multiplied; MX writes the dequantized values and returns 1. `codes`: scratch of x.size()
// bytes. `stream_key` identifies the operand (node and input) for stochastic rounding.
// `numerics` (--numerics, runtime/numerics.h; null: not counted): what the cast lost and the
// scale it used, counted chunk by chunk inside the cast's own pass (same bits either way).
float quantize_gemm_operand(const GemmQuant& q, int operand, std::span<float> state,
                            std::span<const float> x, std::span<float> dst,
                            std::span<uint8_t> codes, const BlockAxis& axis, uint64_t seed,
                            uint64_t stream_key, CastNumerics* numerics = nullptr);

}  // namespace campo
