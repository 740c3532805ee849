// Numerics telemetry (campo train --numerics, docs/mixed-precision.md): what casting a tensor
// to a narrow format lost, counted by the kernel that casts it, at the steps a run records.
//
// Per element x (the input, f32) and y (what it became, in x's units: the decoded code over
// the scale, or the dequantized MX value, or the f16/bf16 value), with `limit` the magnitude
// from which the format's rounding alone would go beyond its largest finite value, at that
// scale: saturation_bound(f) / scale, or X * saturation_bound(f) for an MX block of scale X
// (values between max_finite and that bound round to max_finite anyway, as any value rounds:
// the element at amax that x * scale puts an f32 ulp above max_finite loses nothing):
//   nan, inf   x is NaN, +-inf (nothing else is counted for it)
//   overflow   x finite, y not finite (e5m2 and f16 overflow to inf, non-saturating e4m3 to NaN;
//              every element of an MX block that holds a NaN or inf)
//   saturated  x finite, |x| > limit, y finite (clamped to the largest finite value, which
//              rounding to nearest would not have given)
//   underflow  x finite and non-zero, y == 0 (flushed to zero)
//   amax       max |x| over the finite x
// Counts are exact integers and amax a maximum, so a count over chunks merged in any order (any
// thread count) gives the same record.
//
// The recorder is the run's: the session names the tensors it watches (a quantized GEMM's two
// operands; with `all`, every Cast to f16/bf16 in the step), the loop arms it for a step that
// records, the kernels of the step write their entries while armed, the loop writes them out.
// Kernels of one context run one at a time, so entries need no lock.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace campo {

// What --numerics records: the operands of quantized GEMMs, or also every f16/bf16 tensor a
// Cast of the step produces.
enum class NumericsScope : uint8_t { off, quantized, all };
// "quantized" or "all"; one error line naming --numerics otherwise.
NumericsScope parse_numerics_scope(std::string_view text);
const char* numerics_scope_name(NumericsScope s);

struct NumericsCounts {
  int64_t elements = 0;
  int64_t underflow = 0, saturated = 0, overflow = 0, nan = 0, inf = 0;
  float amax = 0.0f;

  // One element (see the file comment).
  void count(float x, float y, double limit) {
    if (std::isnan(x)) {
      ++nan;
      return;
    }
    if (std::isinf(x)) {
      ++inf;
      return;
    }
    const float a = std::fabs(x);
    amax = std::max(amax, a);
    if (!std::isfinite(y))
      ++overflow;
    else if (double(a) > limit)
      ++saturated;
    else if (y == 0.0f && a != 0.0f)
      ++underflow;
  }
  void merge(const NumericsCounts& o) {
    elements += o.elements;
    underflow += o.underflow;
    saturated += o.saturated;
    overflow += o.overflow;
    nan += o.nan;
    inf += o.inf;
    amax = std::max(amax, o.amax);
  }
};

// What one cast of one tensor lost.
struct CastNumerics {
  NumericsCounts counts;
  // The per-tensor scale the cast used (x * scale was cast); NaN where none applies (MX blocks
  // scale themselves; a Cast has none).
  float scale = NAN;
};

// One watched tensor and, once a step wrote it, what that step's cast lost.
struct NumericsEntry {
  std::string node;     // the node that casts it
  std::string operand;  // a GEMM's "a" or "b"; a Cast's "x"
  std::string pass;     // "forward" or "backward" (the node's phase)
  std::string format;   // "e4m3", "e5m2", "e2m1", ... or "bf16", "f16"
  bool written = false;
  CastNumerics numerics;
};

class NumericsRecorder {
 public:
  explicit NumericsRecorder(NumericsScope scope) : scope_(scope) {}
  NumericsScope scope() const { return scope_; }

  // The session's, before the first step: a tensor to record. Entries keep this order.
  void watch(std::string node, std::string operand, std::string pass, std::string format);
  // The kernel's: the entry of (node, operand), -1 when it is not watched.
  int find(std::string_view node, std::string_view operand) const;
  // The loop's: the step about to run records (every entry's `written` cleared) or not.
  void arm(bool on);
  bool armed() const { return armed_; }
  // The kernel's, while armed: entry `index`'s record of this step.
  void write(int index, const CastNumerics& numerics);
  const std::vector<NumericsEntry>& entries() const { return entries_; }

 private:
  NumericsScope scope_;
  bool armed_ = false;
  std::vector<NumericsEntry> entries_;
};

}  // namespace campo
