#include "train/interrupt.h"

#include <atomic>
#include <csignal>

namespace campo {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

extern "C" void record_signal(int signal) { g_signal.store(signal, std::memory_order_relaxed); }

struct SavedHandlers {
  struct sigaction int_action, term_action;
  int depth = 0;
} g_saved;

}  // namespace

Interrupted::Interrupted(int signal, std::string where, std::string checkpoint,
                         std::string why_not_saved)
    : signal_(signal), checkpoint_(std::move(checkpoint)) {
  message_ = "interrupted (" + signal_name(signal) + ") " + where + "; ";
  if (checkpoint_.empty())
    message_ += "no checkpoint written (" + why_not_saved + ")";
  else
    message_ += "checkpoint written to " + checkpoint_ + "; resume with --resume " + checkpoint_;
}

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signal);
}

InterruptScope::InterruptScope() {
  if (g_saved.depth++ > 0) return;  // nested: the outer scope's handlers stay
  g_signal.store(0);
  struct sigaction action = {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESETHAND: a second signal takes the default action (exit at once). SA_RESTART: a
  // read or wait the signal lands in (the data loader's thread, say) resumes, so that the
  // step finishes and the run stops where the loop polls, not with a spurious EINTR error.
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &action, &g_saved.int_action);
  sigaction(SIGTERM, &action, &g_saved.term_action);
}

InterruptScope::~InterruptScope() {
  if (--g_saved.depth > 0) return;
  sigaction(SIGINT, &g_saved.int_action, nullptr);
  sigaction(SIGTERM, &g_saved.term_action, nullptr);
}

int interrupt_signal() { return g_signal.load(std::memory_order_relaxed); }

}  // namespace campo
