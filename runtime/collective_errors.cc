#include "runtime/collective_errors.h"

#include <cstdio>

#include "runtime/check.h"

namespace campo::detail {

void check_host_all_reduce(const void* data, int64_t count, DType dtype) {
  CAMPO_CHECK(count >= 0, "all-reduce of ", count, " elements");
  CAMPO_CHECK(count == 0 || data, "all-reduce of ", count, " elements at a null pointer");
  CAMPO_CHECK(dtype == DType::f32 || dtype == DType::i32 || dtype == DType::i64, "all-reduce over ",
              dtype_name(dtype), ": the host collectives reduce f32, i32 and i64 only");
}

std::string timeout_line(int rank, int size, const std::string& what,
                         std::chrono::milliseconds timeout) {
  // Whole seconds as "5 s", anything else to the millisecond ("0.25 s").
  char seconds[32];
  if (timeout.count() % 1000 == 0)
    std::snprintf(seconds, sizeof seconds, "%lld", static_cast<long long>(timeout.count() / 1000));
  else
    std::snprintf(seconds, sizeof seconds, "%g", double(timeout.count()) / 1000.0);
  return "campo: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": the " + what +
         " waited more than " + seconds +
         " s for the other ranks (one of them died or hangs); ending the job";
}

}  // namespace campo::detail
