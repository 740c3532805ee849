#include "train/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <iterator>

namespace campo {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_ns{0};  // CLOCK_MONOTONIC time of the recorded signal
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");
static_assert(std::atomic<int64_t>::is_always_lock_free, "the signal time must be lock-free");

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// The first signal is recorded. Another within kDuplicateWindowNs of it is the same request
// delivered twice (GNU timeout signals the child and then its process group; a terminal's
// Ctrl-C reaches every process of the foreground group), and is ignored. One after that is
// a second request: the default action, at once.
extern "C" void record_signal(int signal) {
  const int64_t now = monotonic_ns();
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, signal)) {
    g_first_ns.store(now);
    return;
  }
  if (now - g_first_ns.load() < kDuplicateWindowNs) return;
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal, &default_action, nullptr);
  raise(signal);
}

struct SavedHandlers {
  struct sigaction actions[std::size(kSignals)];
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
  if (signal == SIGHUP) return "SIGHUP";
  return "signal " + std::to_string(signal);
}

InterruptScope::InterruptScope() {
  if (g_saved.depth++ > 0) return;  // nested: the outer scope's handlers stay
  g_signal.store(0);
  struct sigaction action = {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  for (int signal : kSignals) sigaddset(&action.sa_mask, signal);  // one handler at a time
  // SA_RESTART: a read or wait the signal lands in (the data loader's thread, say) resumes,
  // so that the step finishes and the run stops where the loop polls, not with a spurious
  // EINTR error.
  action.sa_flags = SA_RESTART;
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    sigaction(kSignals[i], nullptr, &g_saved.actions[i]);
    // Ignored when campo started (nohup, a script's background job): the caller asked for
    // the run to survive this signal, so it stays ignored.
    const bool is_ignored =
        !(g_saved.actions[i].sa_flags & SA_SIGINFO) && g_saved.actions[i].sa_handler == SIG_IGN;
    if (!is_ignored) sigaction(kSignals[i], &action, nullptr);
  }
}

InterruptScope::~InterruptScope() {
  if (--g_saved.depth > 0) return;
  for (size_t i = 0; i < std::size(kSignals); ++i)
    sigaction(kSignals[i], &g_saved.actions[i], nullptr);
}

int interrupt_signal() { return g_signal.load(std::memory_order_relaxed); }

}  // namespace campo
