// Shared by the kernel benchmarks of campo_bench_kernels (bench/kernels/*.cc): the --quick
// switch (bench/kernels/main.cc) and the calling thread's CPU time.
#pragma once

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

}  // namespace campo::testing
