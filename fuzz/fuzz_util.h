// Shared by the libFuzzer targets fuzz/<name>_fuzz.cc (scripts/fuzz.sh, docs/testing.md).
//
// Each target defines campo::fuzz::<name>(data, size) (declared in fuzz/targets.h) and,
// through CAMPO_FUZZ_ENTRY_POINT, libFuzzer's entry point when built as a fuzzer
// (CAMPO_FUZZ_ENTRY). The test binary compiles the same bodies without the entry point and
// replays fuzz/corpus and fuzz/regressions through them (tests/fuzz/replay_test.cc).
//
// Contract of a body: a campo::Error is the parser's rejection of a bad input and is
// swallowed (reject_or_accept); any other exception escapes and aborts the fuzzer, as does
// a sanitizer report. A body that needs a stronger property (a round trip) checks it with
// require(), which aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/check.h"

namespace campo::fuzz {

// The input as a file, for the parsers that take only a path: a private file in /dev/shm
// (else $TMPDIR, else /tmp) named after the target and the process, rewritten by every
// call and removed by the destructor.
class TempInput {
 public:
  TempInput(const std::string& name, const uint8_t* data, size_t size);
  ~TempInput();
  TempInput(const TempInput&) = delete;
  TempInput& operator=(const TempInput&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs f(); a campo::Error means the input was rightly refused.
template <class F>
void reject_or_accept(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

// Aborts with `what` on stderr when `condition` is false (a property of an accepted input).
void require(bool condition, const char* what);

}  // namespace campo::fuzz

#ifdef CAMPO_FUZZ_ENTRY
#define CAMPO_FUZZ_ENTRY_POINT(body)                                        \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { \
    body(data, size);                                                       \
    return 0;                                                               \
  }
#else
#define CAMPO_FUZZ_ENTRY_POINT(body)
#endif
