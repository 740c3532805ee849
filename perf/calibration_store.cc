// Where the calibration of this machine lives (perf/calibration_store.h).
#include "perf/calibration_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "perf/calibrate.h"
#include "runtime/check.h"

namespace campo {

namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The repository's calibration/ folder: CAMPO_SOURCE_DIR when the build defines it, else
// two levels above this executable (build-dir/campo -> repository root).
std::string repository_calibration_dir() {
#ifdef CAMPO_SOURCE_DIR
  return std::string(CAMPO_SOURCE_DIR) + "/calibration";
#else
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path().parent_path() / "calibration").string();
#endif
}

const char* low_name(DType low) { return low == DType::f16 ? "fp16" : "bf16"; }

}  // namespace

std::shared_ptr<const Calibration> find_default_calibration(const Backend& backend, DType low,
                                                            std::ostream& log, std::string* path) {
  const BackendIdentity machine = backend.identity();
  const std::string device = backend.device().str();
  auto use = [&](Calibration cal, const std::string& file, const std::string& from) {
    log << "cost-aware: calibration " << file << " (" << from << ", made " << cal.created << "; "
        << describe_record(cal.record) << ")\n";
    if (path) *path = file;
    return std::make_shared<const Calibration>(std::move(cal));
  };
  // Returns the calibration, or null after a note when the file belongs to another machine
  // or low precision, or is stale (made by another campo or oneDNN, or driver: a cache,
  // remade rather than refused, so that an upgrade does not stop every cost-aware run);
  // throws when it is this machine's but unusable (corrupt).
  auto try_file = [&](const std::string& file,
                      const std::string& from) -> std::shared_ptr<const Calibration> {
    Calibration cal;
    const CalibrationCheck check = read_calibration(file, machine, cal);
    if (check.problem == CalibrationProblem::foreign) {
      log << "cost-aware: skipping " << file << ": another machine's or device's\n";
      return nullptr;
    }
    if (check.problem == CalibrationProblem::stale) {
      log << "cost-aware: skipping " << file << ": " << check.what << "\n";
      return nullptr;
    }
    CAMPO_CHECK(check.problem == CalibrationProblem::none, check.message);
    if (cal.low != low) {
      log << "cost-aware: skipping " << file << ": made for " << dtype_name(cal.low) << "\n";
      return nullptr;
    }
    return use(std::move(cal), file, from);
  };

  const std::string explicit_file = env("CAMPO_CALIBRATION");
  if (!explicit_file.empty()) {
    Calibration cal = load_calibration(explicit_file, backend);
    CAMPO_CHECK(cal.low == low, "calibration file ", explicit_file, " ($CAMPO_CALIBRATION) is for ",
                dtype_name(cal.low), ", this run's low precision is ", dtype_name(low),
                "; run `campo calibrate --device ", device, " --low-precision ", low_name(low),
                "` to recalibrate");
    return use(std::move(cal), explicit_file, "$CAMPO_CALIBRATION");
  }
  std::vector<std::string> looked;
  const std::string cache = default_calibration_path(backend, low);
  if (!cache.empty()) {
    looked.push_back(cache);
    std::error_code ec;
    if (fs::exists(cache, ec))
      if (auto cal = try_file(cache, "this machine's cache")) return cal;
  }
  const std::string repo = repository_calibration_dir();
  std::error_code ec;
  if (!repo.empty() && fs::is_directory(repo, ec)) {
    looked.push_back(repo + "/*.json");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(repo, ec))
      if (e.path().extension() == ".json") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& f : files)
      if (auto cal = try_file(f, "the repository's calibration folder")) return cal;
  }
  log << "cost-aware: no " << dtype_name(low) << " calibration for this " << machine.kind
      << " (looked in ";
  for (size_t i = 0; i < looked.size(); ++i) log << (i ? ", " : "") << looked[i];
  log << (looked.empty() ? "no place: HOME is not set" : "") << ")\n";
  return nullptr;
}

std::shared_ptr<const Calibration> automatic_calibration(const Backend& backend, DType low,
                                                         std::ostream& log, std::string* path,
                                                         const CalibrateOptions& base) {
  // Said on the terminal as well as in the run's log (campo train's is stdout, which may be a
  // file): a first run may sit here for a minute, and must not do so unexplained.
  const bool log_is_stderr =
      &log == &std::cerr || (&log == &std::cout && isatty(STDOUT_FILENO) && isatty(STDERR_FILENO));
  auto say = [&](const std::string& line) {
    log << line << "\n" << std::flush;
    if (!log_is_stderr) std::cerr << line << "\n" << std::flush;
  };
  const std::string device = backend.device().str();
  CalibrateOptions o = base;
  o.device = backend.device();
  o.quick = true;  // budget 1 minute
  o.low_precision = low_name(low);
  // Empty out: run_calibration writes the cache file, creating its folder on a new machine
  // (a named --out must be in a folder that exists).
  const std::string out = o.out.empty() ? default_calibration_path(backend, low) : o.out;
  const NoiseLimits& limits = o.noise;
  const CpuSnapshot now = cpu_snapshot();
  const int cores = now.known ? now.cores : 1;
  const double load = sample_foreign_load(0.5);
  char line[640];
  const int worst_minutes = 1 + limits.retries;  // each measurement redone at most that often
  if (load > limits.max_load_fraction * cores) {
    std::snprintf(
        line, sizeof line,
        "cost-aware: machine busy: other processes use %.2f of %d cores (a calibration allows "
        "%.2f); a calibration now would be noisy, redone for up to ~%d min and likely refused: "
        "not calibrating; this run's profiling step times both precisions instead (about twice "
        "as long, nothing cached); run `campo calibrate --device %s` when the machine is quiet",
        load, cores, limits.max_load_fraction * cores, worst_minutes, device.c_str());
    say(line);
    return nullptr;
  }
  std::snprintf(line, sizeof line,
                "cost-aware: no %s calibration of this machine: running a quick automatic "
                "calibration now, about 1 min (up to ~%d if the machine gets busy and "
                "measurements are redone), cached in %s; `campo calibrate --device %s` makes a "
                "fuller one",
                dtype_name(low), worst_minutes, out.c_str(), device.c_str());
  say(line);
  std::ostringstream report;  // the file holds the numbers; one line here
  std::shared_ptr<const Calibration> cal;
  try {
    cal = std::make_shared<const Calibration>(run_calibration(o, report));
  } catch (const CalibrationRefused& e) {
    say(std::string("cost-aware: automatic ") + e.what() +
        "; this run's profiling step times both precisions instead");
    return nullptr;
  }
  std::snprintf(line, sizeof line,
                "cost-aware: calibrated %zu op models from %d configurations in %ld s (%s)",
                cal->ops.size(), cal->configurations, std::lround(cal->seconds),
                describe_record(cal->record).c_str());
  say(line);
  if (path) *path = out;
  return cal;
}

std::shared_ptr<const Calibration> default_calibration(const Backend& backend, DType low,
                                                       std::ostream& log, std::string* path) {
  if (auto cal = find_default_calibration(backend, low, log, path)) return cal;
  const std::string device = backend.device().str();
  if (backend.kernel_device() != Device::cpu) {
    log << "cost-aware: the profiling step times both precisions on " << device
        << " (`campo calibrate --device " << device << "` makes a calibration)\n";
    return nullptr;
  }
  return automatic_calibration(backend, low, log, path);
}

void check_calibration_device(const std::string& calibration, Precision policy,
                              const DeviceSpec& device) {
  if (policy != Precision::cost_aware || calibration.empty() || calibration == "none") return;
  Calibration cal;
  const CalibrationCheck check = read_calibration_file(calibration, device.str(), cal);
  CAMPO_CHECK(check.problem == CalibrationProblem::none, check.message);
  CAMPO_CHECK(cal.machine.kind == device_name(device.type), "--calibration ", calibration,
              " holds the costs of a ", cal.machine.kind, ", not of --device ", device.str(),
              "; calibrate it with `campo calibrate --device ", device.str(),
              "`, or --calibration none to time both precisions in the profiling step");
}

std::shared_ptr<const Calibration> resolve_calibration(const std::string& calibration,
                                                       const Backend& backend, DType low,
                                                       std::ostream& log, std::string* path) {
  if (calibration == "none") return nullptr;
  if (calibration.empty()) return default_calibration(backend, low, log, path);
  if (path) *path = calibration;
  return std::make_shared<const Calibration>(load_calibration(calibration, backend));
}

}  // namespace campo
