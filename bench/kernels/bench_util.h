// Shared by the kernel benchmarks of campo_bench_kernels (bench/kernels/*.cc): the --quick
// switch (bench/kernels/main.cc), the calling thread's CPU time, and wall-clock best-of-N.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>

namespace campo::testing {

// --quick: each benchmark runs its smallest rows once, to check that it runs; its figures
// are not to be read.
bool quick_mode();
void set_quick_mode(bool quick);

// Thread CPU time of the calling thread in ms: with OMP_NUM_THREADS=1 it is the kernel's own
// time and does not count the time other processes on a shared machine take from it.
inline double thread_ms() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}

// Wall-clock time in ms (steady clock).
inline double wall_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// The fastest of `reps` timed calls of f, in wall-clock ms, after one untimed warm-up call.
template <typename F>
double best_ms(int reps, F f) {
  f();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = wall_ms();
    f();
    best = std::min(best, wall_ms() - t0);
  }
  return best;
}

}  // namespace campo::testing
