// Where the calibration of this machine lives: the cache and the repository's folder looked
// up for a cost-aware run, the quick automatic calibration when none is found, and the one
// resolution of --calibration that `campo train`, `plan` and `bench` share
// (resolve_calibration). `campo calibrate` itself is perf/calibrate.h.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include "amp/calibration.h"
#include "amp/policy.h"
#include "perf/calibrate.h"
#include "runtime/backend.h"

namespace campo {

// The calibration of `backend`'s machine for `low`, or null, saying on `log` what it did:
//  1. $CAMPO_CALIBRATION when set: used, or an error if it cannot be (any problem);
//  2. the cache file default_calibration_path(backend, low);
//  3. the *.json files of the repository's calibration/ folder (CAMPO_SOURCE_DIR when the
//     build defines it, else ../../calibration from this executable).
// In 2 and 3 a file made on another machine or device (or for another low precision) is
// skipped with a note; a corrupt or stale one is an error. `path` (when given) gets the
// file used.
std::shared_ptr<const Calibration> find_default_calibration(const Backend& backend, DType low,
                                                            std::ostream& log,
                                                            std::string* path = nullptr);

// The calibration a cost-aware run on `backend` uses when none is named:
// find_default_calibration; else on the CPU a quick automatic calibration (budget 1 minute,
// said on `log`) written to the cache, and elsewhere (a GPU) none, said on `log`: there the
// profiling step times both precisions of the run's own graph, which takes milliseconds,
// where an automatic calibration would take a minute. `path` (when given) gets the file.
std::shared_ptr<const Calibration> default_calibration(const Backend& backend, DType low,
                                                       std::ostream& log,
                                                       std::string* path = nullptr);

// The quick automatic calibration of default_calibration (CPU), written to the cache (or
// base.out), with `base`'s noise limits and calibration set. Said on `log` and on the terminal
// (stderr, where `log` is not it): that it runs and about how long; when other processes
// keep the machine busy beyond the limits it does not start, says what that costs and returns
// null (the profiling step then times both precisions); a calibration refused for noise on
// the way is said the same way and null returned, nothing cached.
std::shared_ptr<const Calibration> automatic_calibration(const Backend& backend, DType low,
                                                         std::ostream& log, std::string* path,
                                                         const CalibrateOptions& base = {});

// The calibration of --calibration for a cost-aware run on `backend` with low type `low`, the
// one lookup every subcommand uses (the CLI calls it once, after the run's backend is made):
// "none": null (the profiling step times both precisions); a file: loaded and checked
// against the backend's identity; "": default_calibration. What it looked for or ran goes to
// `log`; `path` (when given) gets the file used.
std::shared_ptr<const Calibration> resolve_calibration(const std::string& calibration,
                                                       const Backend& backend, DType low,
                                                       std::ostream& log,
                                                       std::string* path = nullptr);
// The option check of the above, before any backend or work: a calibration file named for a
// cost-aware run must be readable and made for the kind of `device` (a CPU's costs on
// --device cuda are one error line, as a GPU's on the CPU).
void check_calibration_device(const std::string& calibration, Precision policy,
                              const DeviceSpec& device);

}  // namespace campo
