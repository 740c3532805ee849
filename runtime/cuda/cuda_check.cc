#include "runtime/cuda/cuda_check.h"

#include <string>

namespace campo::cuda {

void fail_call(const char* file, int line, const char* expr, const char* library, const char* what) {
  detail::fail(file, line, expr, std::string(library) + " error: " + what + " (in " + expr + ")");
}

}  // namespace campo::cuda
