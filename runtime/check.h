// Errors: one exception type and the CAMPO_CHECK macro.
// Library code throws campo::Error; only main() turns an error into an exit code.
// The message is what a user reads; file, line and the failing expression travel
// alongside for developers (Error::where()).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace campo {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string where)
      : std::runtime_error(message), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void fail(const char* file, int line, const char* expr, const std::string& message);

}  // namespace detail
}  // namespace campo

// CAMPO_CHECK(cond, "message parts", value, ...): throws campo::Error when cond is false.
#define CAMPO_CHECK(cond, ...)                                                             \
  do {                                                                                     \
    if (!(cond)) ::campo::detail::fail(__FILE__, __LINE__, #cond,                          \
                                       ::campo::detail::concat(__VA_ARGS__));              \
  } while (0)

// CAMPO_FAIL("message parts", ...): throws unconditionally.
#define CAMPO_FAIL(...) \
  ::campo::detail::fail(__FILE__, __LINE__, "", ::campo::detail::concat(__VA_ARGS__))
