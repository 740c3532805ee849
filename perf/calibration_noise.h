// How noisy a measurement on this machine is (issue 50: a calibration that cannot be silently
// wrong). Two signs, both measured rather than guessed:
//  - load: CPU time that other processes took on the cores this process may run on while it
//    measured, from /proc/stat (those cores' busy time) less /proc/self/stat (this process's
//    own), in cores' worth; a busy loop elsewhere on a 2-core machine reads about 1;
//  - spread: how far a measurement's repeated steps lie from its fastest one, (median -
//    fastest) / fastest: a quiet machine repeats within a few percent.
// The limits a calibration must pass (NoiseLimits) are stated in docs/mixed-precision.md.
#pragma once

#include <string>
#include <vector>

namespace campo {

// What /proc says at one moment. `known` is false where /proc/stat or /proc/self/stat cannot
// be read (then every load is unknown, -1).
struct CpuSnapshot {
  bool known = false;
  double busy_s = 0;  // every process's CPU time on our cores (user, nice, system, irq, steal)
  double own_s = 0;   // this process's (all its threads)
  double wall_s = 0;  // a monotonic clock
  int cores = 0;      // the cores this process may run on (its affinity mask)
};
CpuSnapshot cpu_snapshot();

// Cores' worth of CPU other processes used between `from` and `to` (>= 0), or -1 when unknown.
double foreign_load(const CpuSnapshot& from, const CpuSnapshot& to);

// The load of other processes over a short look (`seconds`, sleeping): what the automatic
// calibration looks at before it starts. -1 when unknown.
double sample_foreign_load(double seconds);

// (median - fastest) / fastest of repeated times of one thing; 0 for fewer than 2 or a
// non-positive fastest.
double repeat_spread(std::vector<double> times);
// For a measurement that keeps the fastest of many steps (the standalone casts): how far the
// fastest quarter of `times` lies above the fastest, relative. A cast of 2^21..2^24 elements
// streams 12-96 MiB through memory, and on this project's quiet 2-core VMs half of its steps
// land 20-30% slower (memory shared with other guests), while the fastest quarter agrees to
// a few percent: that is what the kept minimum depends on.
double fastest_quarter_spread(std::vector<double> times);

// The limits a calibration (and `calibrate --check`) must pass; defaults are campo's.
struct NoiseLimits {
  // Other processes' load during one measurement, as a fraction of this process's cores:
  // a quarter of the machine taken by others slows oneDNN's parallel kernels by about as
  // much, far beyond the models' own error.
  double max_load_fraction = 0.25;
  // A measurement's repeat spread: above 10% its fastest step is not a stable minimum.
  double max_spread = 0.10;
  // Identical GEMM shapes' spread over the whole calibration (CalibrationRecord::
  // shape_spread): on a quiet machine ~7-11% (docs/mixed-precision.md); above 25% the noise
  // floor is larger than the error of the models it would fit.
  double max_shape_spread = 0.25;
  // A noisy measurement is redone this many times (after a pause) before the calibration is
  // refused.
  int retries = 2;
  // Timed steps of each measurement, so that its spread is known.
  int repeats = 5;
};

// Why one measurement is too noisy for `limits` ("other processes used 1.30 of 2 cores (limit
// 0.50)", "its repeats spread 23% (limit 10%)"), or "" when it is not. `load` -1: unknown,
// not judged.
std::string noise_problem(double load, int cores, double spread, const NoiseLimits& limits);

}  // namespace campo
