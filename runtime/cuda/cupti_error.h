// CUPTI's results as campo reports them, for the CUPTI users of the CUDA backend (the node
// timer, runtime/cuda/cupti_timer.cc; the counter profiler, runtime/cuda/cupti_counters.cc).
// Only with CAMPO_HAVE_CUPTI.
#pragma once

#include <cupti.h>

#include <cstdio>
#include <string>

namespace campo::cuda {

// "<call>: <CUPTI's description of status>".
inline std::string cupti_error(const std::string& call, CUptiResult status) {
  const char* what = nullptr;
  if (cuptiGetResultString(status, &what) != CUPTI_SUCCESS || !what) what = "unknown CUPTI error";
  return call + ": " + what;
}

// For clean-up, which must not throw: a failure is a warning on stderr.
inline void warn_on_error(CUptiResult status, const char* call) noexcept {
  if (status == CUPTI_SUCCESS) return;
  std::fprintf(stderr, "campo: warning: %s\n", cupti_error(call, status).c_str());
}

}  // namespace campo::cuda
