// `campo calibrate --check` (perf/calibration_check.h).
#include "perf/calibration_check.h"

#include <chrono>
#include <cstdio>
#include <ostream>
#include <thread>

#include "perf/calibrate.h"
#include "perf/calibration_store.h"
#include "runtime/check.h"
#include "train/options.h"

namespace campo {

namespace {

// "median 1.02x, total 0.97x over 30 nodes: fits" (or why it is not judged).
std::string judged(const Agreement& a) {
  if (!a.checked())
    return std::to_string(a.nodes) + " nodes of " + std::to_string(kMinAgreementMs).substr(0, 5) +
           " ms or more, too few to judge (" + std::to_string(kMinAgreementNodes) + " needed)";
  return a.describe() + (a.fits() ? ": fits" : ": does NOT fit");
}

// Whether every ratio of `a` that breaks the rule is on the slow side (measured slower than
// predicted): what other processes' load can cause.
bool slow_side_only(const Agreement& a) {
  return !a.checked() || a.fits() ||
         (a.median_ratio >= kMinFitRatio && a.total_ratio >= kMinFitRatio);
}

}  // namespace

CalibrationCheckResult check_calibration_fit(const CalibrationCheckOptions& o, std::ostream& out) {
  const std::shared_ptr<Backend> backend = backend_for(o.device, CudaGraphMode::automatic, false);
  CalibrationCheckResult r;
  Calibration cal;
  if (o.calibration.empty()) {
    std::string path;
    const DType low = default_low_precision(o.device.type);
    const std::shared_ptr<const Calibration> found =
        find_default_calibration(*backend, low, out, &path);
    CAMPO_CHECK(found != nullptr, "calibrate --check: no ", dtype_name(low),
                " calibration of this machine to check; run `campo calibrate --device ",
                o.device.str(), "` to make one");
    cal = *found;
    r.file = path;
  } else {
    cal = load_calibration(o.calibration, *backend);
    r.file = o.calibration;
  }
  char line[512];
  std::snprintf(line, sizeof line, "calibrate --check: %s (made %s in %.0f s; %s)\n",
                r.file.c_str(), cal.created.c_str(), cal.seconds,
                describe_record(cal.record).c_str());
  out << line;

  TimedSample sample;
  const int attempts = 1 + o.noise.retries;
  for (int attempt = 1;; ++attempt) {
    sample = time_calibration_sample(backend, cal.low, o.models, o.batch, o.noise.repeats);
    const std::string problem = noise_problem(sample.load, sample.cores, sample.spread, o.noise);
    if (problem.empty() || attempt >= attempts) break;
    out << "  re-timing too noisy (" << problem << "), again (attempt " << attempt + 1 << " of "
        << attempts << ")\n"
        << std::flush;
    std::this_thread::sleep_for(std::chrono::milliseconds(1000 * attempt));
  }
  r.load = sample.load;
  r.cores = sample.cores;
  std::string what;
  for (size_t i = 0; i < sample.configurations.size(); ++i)
    what += (i ? ", " : "") + sample.configurations[i];
  char load[96] = "unknown";
  if (sample.load >= 0)
    std::snprintf(load, sizeof load, "%.2f of %d cores", sample.load, sample.cores);
  std::snprintf(line, sizeof line,
                "re-timed %s in %.1f s: %zu nodes; other processes' load %s, repeat spread "
                "%.0f%%\n",
                what.c_str(), sample.seconds, sample.nodes.size(), load, 100 * sample.spread);
  out << line;

  std::vector<double> f32_measured, f32_predicted, low_measured, low_predicted;
  for (const TimedNode& n : sample.nodes) {
    if (const F32Model* m = cal.f32_model_for(n.kind)) {
      f32_measured.push_back(n.fp32_ms);
      f32_predicted.push_back(m->predict_ms(n.features));
    }
    if (const OpModel* m = cal.model_for(n.kind, n.features)) {
      low_measured.push_back(n.low_ms);
      low_predicted.push_back(m->predict_low_ms(n.features, n.fp32_ms, &n.shape));
    }
  }
  r.f32 = agreement_of(f32_measured, f32_predicted);
  r.low = agreement_of(low_measured, low_predicted);
  out << "  f32 times, measured / the file's f32 models: "
      << (cal.f32_ops.empty() ? std::string("not checked: the file has no f32 models (made by "
                                            "an older campo)")
                              : judged(r.f32))
      << "\n";
  out << "  " << dtype_name(cal.low)
      << " times, measured / its per-op models (from the measured f32 times): " << judged(r.low)
      << "\n";
  char rule[128];
  std::snprintf(rule, sizeof rule, "rule: median and total of measured / predicted within %gx..%gx",
                kMinFitRatio, kMaxFitRatio);
  CAMPO_CHECK(r.f32.checked() || r.low.checked(), "calibrate --check: too few nodes of ",
              kMinAgreementMs, " ms or more were re-timed to judge ", r.file,
              "; re-time more with --models or --batches");
  const bool fits = (!r.f32.checked() || r.f32.fits()) && (!r.low.checked() || r.low.fits());
  const bool busy = !noise_problem(sample.load, sample.cores, sample.spread, o.noise).empty();
  if (fits) {
    r.verdict = FitVerdict::fits;
    out << "calibration fits this machine (" << rule << ")\n";
  } else if (busy && slow_side_only(r.f32) && slow_side_only(r.low)) {
    r.verdict = FitVerdict::inconclusive;
    out << "cannot tell: this machine ran slower than the calibration predicts while it was "
           "busy (load "
        << load << "); check again when it is quiet (" << rule << ")\n";
  } else {
    r.verdict = FitVerdict::misfit;
    out << "calibration does NOT fit this machine (" << rule << "); run `campo calibrate --device "
        << o.device.str()
        << "` to recalibrate (meanwhile cost-aware runs see it in their profiling step and "
           "time both precisions)\n";
  }
  return r;
}

}  // namespace campo
