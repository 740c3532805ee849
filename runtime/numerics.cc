// The numerics recorder (runtime/numerics.h).
#include "runtime/numerics.h"

#include "runtime/check.h"

namespace campo {

NumericsScope parse_numerics_scope(std::string_view text) {
  if (text == "quantized") return NumericsScope::quantized;
  if (text == "all") return NumericsScope::all;
  CAMPO_FAIL(
      "--numerics must be quantized (the FP8/MX GEMM operands) or all (also every "
      "f16/bf16 tensor a Cast produces), got '",
      std::string(text), "'");
}

const char* numerics_scope_name(NumericsScope s) {
  switch (s) {
    case NumericsScope::off:
      return "off";
    case NumericsScope::quantized:
      return "quantized";
    case NumericsScope::all:
      return "all";
  }
  return "?";
}

void NumericsRecorder::watch(std::string node, std::string operand, std::string pass,
                             std::string format) {
  CAMPO_CHECK(find(node, operand) < 0, "internal: numerics of '", node, "' ", operand,
              " watched twice");
  NumericsEntry e;
  e.node = std::move(node);
  e.operand = std::move(operand);
  e.pass = std::move(pass);
  e.format = std::move(format);
  entries_.push_back(std::move(e));
}

int NumericsRecorder::find(std::string_view node, std::string_view operand) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].node == node && entries_[i].operand == operand) return int(i);
  return -1;
}

void NumericsRecorder::arm(bool on) {
  armed_ = on;
  if (on)
    for (NumericsEntry& e : entries_) e.written = false;
}

void NumericsRecorder::write(int index, const CastNumerics& numerics) {
  CAMPO_CHECK(armed_ && index >= 0 && size_t(index) < entries_.size(),
              "internal: a numerics entry ", index, " written while not armed");
  NumericsEntry& e = entries_[size_t(index)];
  e.written = true;
  e.numerics = numerics;
}

}  // namespace campo
