// Scaling recipes and the per-step quantization of a GEMM operand (runtime/gemm_quant.h).
#include "runtime/gemm_quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/check.h"
#include "runtime/chunked_for.h"
#include "runtime/hash.h"
#include "runtime/mx.h"

namespace campo {

namespace {

constexpr size_t kParallelThreshold = size_t(1) << 15;
constexpr size_t kChunk = size_t(1) << 14;
// A counted cast's chunk: minifloat's (runtime/minifloat.cc), so that an operand splits over
// the team as evenly as encode() alone splits it.
constexpr size_t kCountedChunk = size_t(1) << 13;
// Steps are counted in an f32 state element: exact below 2^24.
constexpr float kMaxStepCount = 16777216.0f;

// A stream per (operand, step): SplitMix64 at the operand's key advanced `step` times, so
// that no two steps or operands share random bits.
uint64_t step_stream(uint64_t key, uint64_t step) {
  return splitmix64(key + step * 0x9e3779b97f4a7c15ull);
}

// Adds a chunk's counts to the operand's (chunks of a parallel loop merge one at a time;
// counts and amax merge to the same record in any order).
void merge_counts(const NumericsCounts& chunk, NumericsCounts* counts) {
#pragma omp critical(campo_gemm_quant_numerics)
  counts->merge(chunk);
}

// dst[i] = decode(encode(x[i] * scale)): the element codes of the scaled operand as f32.
void cast_scaled(ElementFormat f, float scale, std::span<const float> x, std::span<float> dst,
                 std::span<uint8_t> codes, const EncodeOptions& options) {
  for_each_chunk(x.size(), kParallelThreshold, kChunk, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) dst[i] = x[i] * scale;
  });
  encode(f, std::span<const float>(dst.data(), dst.size()), codes, options);
  decode(f, std::span<const uint8_t>(codes.data(), codes.size()), dst);
}

// cast_scaled with --numerics' counts (a recording step): one chunk at a time is scaled,
// encoded, decoded and counted while it is in cache; element i of a chunk at `begin` draws index
// first_index + begin + i, so the codes are those of cast_scaled.
void cast_scaled_counted(ElementFormat f, float scale, std::span<const float> x,
                         std::span<float> dst, std::span<uint8_t> codes,
                         const EncodeOptions& options, NumericsCounts& counts) {
  const double limit = saturation_bound(f) / double(scale);
  for_each_chunk(x.size(), kParallelThreshold, kCountedChunk, [&](size_t begin, size_t end) {
    const size_t n = end - begin;
    for (size_t i = begin; i < end; ++i) dst[i] = x[i] * scale;
    EncodeOptions piece = options;
    piece.first_index = options.first_index + begin;
    encode(f, std::span<const float>(dst.subspan(begin, n)), codes.subspan(begin, n), piece);
    decode(f, std::span<const uint8_t>(codes.subspan(begin, n)), dst.subspan(begin, n));
    NumericsCounts chunk;
    chunk.elements = int64_t(n);
    for (size_t i = begin; i < end; ++i) chunk.count(x[i], dst[i], limit);
    merge_counts(chunk, &counts);
  });
}

// The counts of one MX block: element k of `values` became back[k], at the block's scale.
void count_mx_block(ElementFormat f, uint8_t scale, const float* values, const float* back,
                    int64_t count, NumericsCounts& counts) {
  const double limit = double(e8m0_to_f32(scale)) * saturation_bound(f);
  counts.elements += count;
  for (int64_t k = 0; k < count; ++k) counts.count(values[k], back[k], limit);
}

// MX blocks of 32 along axis.length for each (outer, inner): each block gathered, quantized
// (mx_quantize, element i of the block drawing index row * length + position for stochastic
// rounding), dequantized and scattered back. Blocks are independent, so the work splits over
// the team by blocks without changing a bit.
void mx_fake_quantize(ElementFormat f, const BlockAxis& axis, std::span<const float> x,
                      std::span<float> dst, const MxOptions& options, NumericsCounts* counts) {
  const int64_t blocks_per_row = (axis.length + int64_t(kMxBlockSize) - 1) / int64_t(kMxBlockSize);
  const int64_t rows = axis.outer * axis.inner;
  const size_t total = size_t(rows * blocks_per_row);
  for_each_chunk(total, kParallelThreshold / kMxBlockSize, 256, [&](size_t begin, size_t end) {
    float values[kMxBlockSize], back[kMxBlockSize];
    uint8_t codes[kMxBlockSize];
    uint8_t scale = 0;
    NumericsCounts chunk;
    for (size_t b = begin; b < end; ++b) {
      const int64_t row = int64_t(b) / blocks_per_row;
      const int64_t first = (int64_t(b) % blocks_per_row) * int64_t(kMxBlockSize);
      const int64_t count = std::min<int64_t>(int64_t(kMxBlockSize), axis.length - first);
      const int64_t o = row / axis.inner, in = row % axis.inner;
      const int64_t base = (o * axis.length + first) * axis.inner + in;
      for (int64_t k = 0; k < count; ++k) values[k] = x[size_t(base + k * axis.inner)];
      MxOptions block = options;
      block.first_index = options.first_index + uint64_t(row * axis.length + first);
      mx_quantize(f, {values, size_t(count)}, {&scale, 1}, {codes, size_t(count)}, block);
      mx_dequantize(f, {&scale, 1}, {codes, size_t(count)}, {back, size_t(count)});
      for (int64_t k = 0; k < count; ++k) dst[size_t(base + k * axis.inner)] = back[k];
      if (counts) count_mx_block(f, scale, values, back, count, chunk);
    }
    if (counts) merge_counts(chunk, counts);
  });
}

}  // namespace

const char* scaling_name(Scaling s) {
  switch (s) {
    case Scaling::delayed:
      return "delayed";
    case Scaling::current:
      return "current";
    case Scaling::mx:
      return "mx";
    case Scaling::none:
      return "none";
  }
  return "?";
}

const char* amax_reduction_name(AmaxReduction r) {
  return r == AmaxReduction::max ? "max" : "most_recent";
}

std::string ScalingRecipe::describe() const {
  std::string s = scaling_name(scaling);
  if (scaling == Scaling::delayed)
    s += " (history " + std::to_string(history) + ", " + amax_reduction_name(amax) + ", margin " +
         std::to_string(margin) + ")";
  else if (scaling == Scaling::current && margin != 0)
    s += " (margin " + std::to_string(margin) + ")";
  if (saturation == Saturation::non_saturating) s += ", non-saturating";
  return s;
}

std::string GemmQuant::describe() const {
  std::string s = format + " " + element_format_name(element[0]);
  if (element[1] != element[0]) s += std::string(" x ") + element_format_name(element[1]);
  s += ", " + recipe.describe();
  if (rounding == Rounding::stochastic) s += ", stochastic";
  return s;
}

int64_t gemm_quant_state_size(const ScalingRecipe& recipe) {
  return 2 + (recipe.scaling == Scaling::delayed ? recipe.history : 0);
}

std::string gemm_quant_state_name(const std::string& node, int operand) {
  return node + (operand == 0 ? "/quant.a" : "/quant.b");
}

float tensor_amax(std::span<const float> x) {
  float amax = 0.0f;
  bool finite = true;
#pragma omp parallel for reduction(max : amax) reduction(&& : finite) if (x.size() >= kParallelThreshold)
  for (size_t i = 0; i < x.size(); ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && std::isfinite(a);
    amax = std::max(amax, std::isfinite(a) ? a : 0.0f);
  }
  return finite ? amax : std::numeric_limits<float>::infinity();
}

float push_amax_history(std::span<float> history, float amax, AmaxReduction reduction) {
  CAMPO_CHECK(!history.empty(), "internal: an empty amax history");
  std::copy_backward(history.begin(), history.end() - 1, history.end());
  history[0] = amax;
  if (reduction == AmaxReduction::most_recent) return amax;
  return *std::max_element(history.begin(), history.end());
}

float quantize_gemm_operand(const GemmQuant& q, int operand, std::span<float> state,
                            std::span<const float> x, std::span<float> dst,
                            std::span<uint8_t> codes, const BlockAxis& axis, uint64_t seed,
                            uint64_t stream_key, CastNumerics* numerics) {
  const ScalingRecipe& r = q.recipe;
  CAMPO_CHECK(operand == 0 || operand == 1, "internal: GEMM operand ", operand);
  CAMPO_CHECK(int64_t(state.size()) == gemm_quant_state_size(r), "internal: a GEMM operand's ",
              "quantization state has ", state.size(), " elements, expected ",
              gemm_quant_state_size(r));
  CAMPO_CHECK(dst.size() == x.size() && codes.size() >= x.size(),
              "internal: GEMM operand buffers of the wrong size");
  const float steps = state[1];
  CAMPO_CHECK(steps >= 0 && steps < kMaxStepCount, "a quantized GEMM operand counts its steps ",
              "in f32, exact below 2^24 steps; this one is at ", steps);
  const uint64_t stream = step_stream(stream_key ^ uint64_t(operand), uint64_t(steps));
  state[1] = steps + 1.0f;
  const ElementFormat f = q.element[size_t(operand)];
  if (r.scaling == Scaling::mx) {
    CAMPO_CHECK(int64_t(x.size()) == axis.outer * axis.length * axis.inner,
                "internal: MX block axis does not cover the operand");
    if (numerics) *numerics = {};  // no per-tensor scale: NaN
    mx_fake_quantize(f, axis, x, dst, {.rounding = q.rounding, .seed = seed, .stream = stream},
                     numerics ? &numerics->counts : nullptr);
    state[0] = 1.0f;
    return 1.0f;
  }
  const EncodeOptions options{
      .rounding = q.rounding, .saturation = r.saturation, .seed = seed, .stream = stream};
  const float max_finite = element_format_info(f).max_finite;
  float scale = 1.0f;
  switch (r.scaling) {
    case Scaling::none:
      break;
    case Scaling::current:
      scale = scale_from_amax(tensor_amax(x), max_finite, r.margin, 1.0f);
      break;
    case Scaling::delayed:
      scale = state[0] > 0.0f ? state[0] : 1.0f;
      break;
    case Scaling::mx:
      break;
  }
  if (numerics) {
    *numerics = {.counts = {}, .scale = scale};
    cast_scaled_counted(f, scale, x, dst, codes.first(x.size()), options, numerics->counts);
  } else {
    cast_scaled(f, scale, x, dst, codes.first(x.size()), options);
  }
  if (r.scaling == Scaling::delayed) {
    // A non-finite operand (an overflowed step the loss scaler skips) leaves the history and
    // the scale as they are.
    const float amax_now = tensor_amax(x);
    if (std::isfinite(amax_now)) {
      const float amax = push_amax_history(state.subspan(2), amax_now, r.amax);
      state[0] = scale_from_amax(amax, max_finite, r.margin, scale);
    }
  } else {
    state[0] = scale;
  }
  return 1.0f / scale;
}

}  // namespace campo
