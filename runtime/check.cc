#include "runtime/check.h"

namespace campo::detail {

void fail(const char* file, int line, const char* expr, const std::string& message) {
  std::string where = std::string(file) + ":" + std::to_string(line);
  if (expr && *expr) where += std::string(" (") + expr + ")";
  throw Error(message.empty() ? std::string("check failed: ") + expr : message, where);
}

}  // namespace campo::detail
