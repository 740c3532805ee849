// Ctrl-C and SIGTERM during training: finish the current step, save, stop.
//
// An InterruptScope installs handlers for SIGINT and SIGTERM for its lifetime (and restores
// the previous ones after). A handler only records the signal in an atomic flag and puts
// back the default action (SA_RESETHAND), so a second signal ends the process at once. The
// training loops poll interrupt_signal() after every step (and evaluation after every
// batch) and end the run by throwing Interrupted, which cli::run() turns into a message and
// the exit code 128 + signal (130 for SIGINT, 143 for SIGTERM). Library code never exits.
//
// The flag is process-wide because a signal handler can reach nothing else.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace campo {

// A run stopped by SIGINT or SIGTERM.
class Interrupted : public std::exception {
 public:
  // `where`: "at step 37", "during evaluation after step 200", ...
  // `checkpoint`: where the position was saved ("" when not saved); `why_not_saved`
  // explains an empty `checkpoint`.
  Interrupted(int signal, std::string where, std::string checkpoint, std::string why_not_saved);
  const char* what() const noexcept override { return message_.c_str(); }
  int signal() const { return signal_; }
  int exit_code() const { return 128 + signal_; }
  const std::string& checkpoint() const { return checkpoint_; }

 private:
  int signal_;
  std::string checkpoint_;
  std::string message_;  // "interrupted (SIGINT) at step 37; checkpoint written to ..."
};

// "SIGINT", "SIGTERM" or "signal N".
std::string signal_name(int signal);

class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// The signal received since the innermost InterruptScope began, or 0.
int interrupt_signal();

}  // namespace campo
