// Ctrl-C, SIGTERM and SIGHUP (a closed terminal or ssh session) during training: finish the
// current step, save, stop.
//
// An InterruptScope installs handlers for SIGINT, SIGTERM and SIGHUP for its lifetime (and
// restores the previous ones after), except for a signal that is ignored (SIG_IGN) when the
// scope begins: that one stays ignored, so `nohup campo train ...` survives a closed
// session and a script's background job (whose SIGINT the shell ignores) survives Ctrl-C,
// as every program started that way is expected to. A handler only records the first
// signal in an atomic flag. The same request often arrives twice within milliseconds (GNU
// timeout signals the child, then its process group), so another signal within
// kDuplicateWindowNs of the first is ignored; one after that takes the default action, so a
// second Ctrl-C ends the process at once. The training loops poll interrupt_signal() after
// every step (and evaluation after every batch) and end the run by throwing Interrupted,
// which cli::run() turns into a message and the exit code 128 + signal (129 SIGHUP, 130
// SIGINT, 143 SIGTERM). Library code never exits.
//
// The flag is process-wide because a signal handler can reach nothing else.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

namespace campo {

// A run stopped by SIGINT, SIGTERM or SIGHUP.
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

// A second signal this soon after the first is the same request delivered twice.
inline constexpr int64_t kDuplicateWindowNs = 1000000000;  // 1 s

// "SIGINT", "SIGTERM", "SIGHUP" or "signal N".
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
