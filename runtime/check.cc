#include "runtime/check.h"

#include "runtime/escape.h"

namespace campo::detail {

// The message is one line a terminal shows as text whatever a caller put in it: a value
// echoed from a file without escape_untrusted cannot end the line, move the cursor or
// recolour the screen, nor fill it (escape_error_line).
void fail(const char* file, int line, const char* expr, const std::string& message) {
  std::string where = std::string(file) + ":" + std::to_string(line);
  if (expr && *expr) where += std::string(" (") + expr + ")";
  throw Error(message.empty() ? std::string("check failed: ") + expr : escape_error_line(message),
              where);
}

}  // namespace campo::detail
