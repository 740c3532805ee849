// What a training run shows and records as it goes (train/run_report.h).
#include "train/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "amp/loss_scaler.h"
#include "datasets/dataset.h"
#include "graph/executor.h"
#include "runtime/memory_info.h"
#include "train/data_parallel.h"
#include "train/device_report.h"
#include "train/metrics_log.h"

namespace campo {

namespace {

// A time as the progress display shows it: m:ss, or h:mm:ss from an hour.
std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  const long long s = (long long)(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

// The mean of the last `window` values (0 for none).
double tail_mean(const std::vector<float>& v, size_t window) {
  const size_t k = std::min(window, v.size());
  double sum = 0;
  for (size_t i = v.size() - k; i < v.size(); ++i) sum += v[i];
  return k ? sum / double(k) : 0.0;
}

// "lo..hi" of the models' values (one model: its value).
std::string value_range(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  std::ostringstream out;
  out << std::fixed << std::setprecision(4) << *lo;
  if (v.size() > 1) out << ".." << *hi;
  return out.str();
}

// A hyperparameter as the summary line shows it: integers whole, floats as given (0.05).
std::string short_number(const nlohmann::ordered_json& v) {
  if (!v.is_number_float()) return v.is_string() ? v.get<std::string>() : v.dump();
  std::ostringstream out;
  out << std::setprecision(6) << v.get<double>();
  return out.str();
}

}  // namespace

RunReport::RunReport(const Session& session, const TrainingLoopOptions& o,
                     const DeviceReport& device, const RunLayout& layout, std::ostream& log)
    : session_(session),
      o_(o),
      device_(device),
      layout_(layout),
      log_(log),
      progress_(o.report.progress == Progress::automatic
                    ? (o.log_is_terminal ? Progress::bar : Progress::lines)
                    : o.report.progress),
      values_(session.step_values()),
      scaler_(session.loss_scaler()),
      scaling_(scaler_ != nullptr && scaler_->enabled()),
      summary_(session.precision_summary()),
      auto_low_(o.precision_config.automatic() &&
                o.precision_config.policy == Precision::cost_aware) {}

RunReport::~RunReport() = default;

std::vector<double> RunReport::recent(const std::vector<std::vector<std::vector<float>>>& values,
                                      size_t value, size_t window) const {
  std::vector<double> m;
  for (const auto& model : values) m.push_back(tail_mean(model[value], window));
  return m;
}

void RunReport::banner() {
  const TrainingLoopOptions& o = o_;
  const Dataset& data = *layout_.data;
  const int world = layout_.world;
  log_ << "campo: training " << o.what << " on " << data.name() << ", " << data.size()
       << " samples, batch " << o.batch << (o.per_model_batch ? " per model" : "")
       << (world > 1
               ? " per rank x " + std::to_string(world) + " ranks (" + o.ranks->transport() + ")"
               : std::string())
       << ", " << layout_.total_steps << " steps, precision "
       << precision_name(o.precision_config.policy);
  // fp32 with rules: the guard's fp32 plan of a run with --precision-policy, which keeps them.
  if (o.precision_config.policy != Precision::fp32 || o.precision_config.rules) {
    if (auto_low_)
      log_ << " (auto: " << summary_.f16_nodes << " nodes f16, "
           << summary_.low_nodes - summary_.f16_nodes << " bf16, " << summary_.casts.casts
           << " casts";
    else
      log_ << " (" << dtype_name(o.precision_config.low) << ": " << summary_.low_nodes
           << " nodes low precision, " << summary_.casts.casts << " casts";
    if (scaling_) log_ << ", dynamic loss scale from " << o.precision_config.scaler.init_scale;
    if (const auto& rules = o.precision_config.rules)
      log_ << ", precision policy " << rules->path << ": " << rules->rules.size()
           << (rules->rules.size() == 1 ? " rule" : " rules");
    log_ << ")";
  }
  if (o.array_shuffle) log_ << ", " << array_shuffle_name(*o.array_shuffle) << " batches";
  log_ << "\n";
  // A calibration the profiling step did not use (or could not check): one line saying so.
  if (const CalibrationFit& fit = summary_.calibration;
      fit.verdict == CalibrationFit::Verdict::misfit ||
      fit.verdict == CalibrationFit::Verdict::unchecked)
    log_ << fit.line << "\n";
  log_.flush();
}

void RunReport::resumed(const std::string& path, int64_t step, int epoch, int64_t batch) {
  log_ << "campo: resumed from " << path << " at step " << step << " (epoch " << epoch + 1
       << ", batch " << batch << ")\n";
}

void RunReport::start(int64_t first_step) {
  const bool writer = !o_.ranks || o_.ranks->rank() == 0;
  first_step_ = first_step;
  // --metrics, --tensorboard (their paths checked before any work); a resumed run continues.
  metrics_ = std::make_unique<MetricsLog>(
      MetricsLogOptions{.metrics_path = writer ? o_.report.metrics_path : "",
                        .tensorboard_dir = writer ? o_.report.tensorboard_dir : "",
                        .models = layout_.models,
                        .resumed_step = first_step});
  train_timer_.reset();
  comm_before_ = o_.ranks ? o_.ranks->stats() : Communicator::Stats{};
}

void RunReport::step(int epoch, int64_t in_epoch, int64_t step, bool last,
                     const std::vector<float>& lr,
                     const std::vector<std::vector<std::vector<float>>>& values) {
  const TrainingLoopOptions& o = o_;
  const int n = layout_.models;
  const int64_t per_epoch = layout_.per_epoch, global_batch = layout_.global_batch;
  const double elapsed = train_timer_.seconds();
  const bool bar = progress_ == Progress::bar && (elapsed - last_print_ >= 0.1 || last);
  const bool logged = is_logged_step(in_epoch, per_epoch, last);
  if (!bar && !logged) return;
  const double rate = double((step - first_step_) * global_batch * n) / std::max(elapsed, 1e-9);
  const double eta =
      double(layout_.total_steps - step) * double(global_batch * n) / std::max(rate, 1e-9);
  std::ostringstream shown;  // each value's recent mean ("a..b" over an array's models)
  for (size_t v = 0; v < values_.size(); ++v) {
    if (!values_[v].label.empty()) shown << (v ? " " : "") << values_[v].label << " ";
    shown << (values_[v].label.empty() ? "/" : "")
          << value_range(recent(values, v, size_t(o.display_window)));
  }
  if (n > 1) shown << " (" << n << " models)";
  if (bar) {
    last_print_ = elapsed;
    const int width = 30;
    const int filled = int(double(in_epoch) / double(per_epoch) * width);
    log_ << "\repoch " << epoch + 1 << "/" << o.epochs << " ["
         << std::string(size_t(filled), '=') << std::string(size_t(width - filled), ' ') << "] "
         << in_epoch << "/" << per_epoch << "  " << shown.str() << "  " << std::fixed
         << std::setprecision(0) << rate << " samples/s  ETA " << format_duration(eta);
    if (scaling_)
      log_ << "  scale " << scaler_->scale() << " skipped " << scaler_->skipped_steps();
    log_ << "   " << (last ? "\n" : "");
    log_.flush();
  } else if (progress_ == Progress::lines && logged) {
    log_ << "epoch " << epoch + 1 << "/" << o.epochs << " step " << in_epoch << "/" << per_epoch
         << " " << shown.str() << " samples/s " << std::fixed << std::setprecision(0) << rate
         << " eta " << format_duration(eta);
    if (scaling_)
      log_ << " loss_scale " << scaler_->scale() << " skipped " << scaler_->skipped_steps();
    log_ << "\n";
    log_.flush();
  }
  if (logged) {
    StepMetrics m{.step = step,
                  .epoch = epoch + 1,
                  .lrs = lr,
                  .loss_scale = scaling_ ? scaler_->scale() : 1.0f,
                  .skipped_steps = scaling_ ? scaler_->skipped_steps() : 0,
                  .samples_per_sec = rate,
                  .rss_mib = double(resident_memory_bytes()) / double(1 << 20)};
    for (size_t v = 0; v < values_.size(); ++v) {
      if (values_[v].name == "loss")
        m.losses = recent(values, v, 50);
      else
        m.named.emplace_back(values_[v].name, recent(values, v, size_t(o.display_window)));
    }
    metrics_->log_step(m);
  }
}

void RunReport::numerics(int64_t step, const NumericsRecorder& recorder) {
  metrics_->log_numerics(step, recorder.entries());
}

void RunReport::interrupted() {
  if (progress_ == Progress::bar) log_ << "\n";
  log_.flush();
}

void RunReport::trained(TrainingLoopResult& r) {
  const int n = layout_.models;
  const double train_seconds = train_timer_.seconds();
  r.samples_per_sec =
      double((r.steps - first_step_) * layout_.global_batch * n) / std::max(train_seconds, 1e-9);
  r.final_values.assign(size_t(n), {});
  for (size_t v = 0; v < values_.size(); ++v) {
    const std::vector<double> m = recent(r.values, v, 50);
    for (int i = 0; i < n; ++i) r.final_values[size_t(i)].push_back(m[size_t(i)]);
  }
  for (const std::string& checkpoint : r.checkpoints)
    log_ << "campo: checkpoint " << checkpoint << "\n";
}

void RunReport::evaluated(int64_t step, const std::vector<double>& accuracy) {
  metrics_->log_eval(step, accuracy);
  if (progress_ != Progress::none && layout_.models == 1)
    log_ << o_.accuracy_label << " " << std::fixed << std::setprecision(4) << accuracy[0]
         << " on " << o_.test->size() << " " << o_.eval_unit << " " << o_.test->name() << "\n";
}

void RunReport::finish(TrainingLoopResult& r, const MemoryReport& memory, const Timer& wall) {
  const TrainingLoopOptions& o = o_;
  const Session& session = session_;
  const DeviceReport& device = device_;
  const int n = layout_.models, world = layout_.world;
  const int64_t step = r.steps;
  if (progress_ != Progress::none && device.backend()->capture_unsupported().empty())
    log_ << cuda_graph_line(session) << "\n";
  if (o.report.profile) {
    print_profile(session.profile().by_op(), step, log_);
    log_ << "node times: " << device.backend()->node_timer_source() << "\n";
    log_ << "memory: " << memory_line(memory) << "\n";
  }

  // The JSON result: the run's own fields, then what every run reports.
  nlohmann::json j = o.result;
  j["event"] = "result";
  j["precision"] = precision_name(o.precision_config.policy);
  j["low_precision"] = o.precision_config.policy == Precision::fp32 ? "none"
                       : auto_low_                                   ? "auto"
                                  : dtype_name(o.precision_config.low);
  if (auto_low_) {
    j["f16_nodes"] = summary_.f16_nodes;
    j["bf16_nodes"] = summary_.low_nodes - summary_.f16_nodes;
  }
  j["casts"] = summary_.casts.casts;
  if (o.precision_config.rules) j["precision_policy"] = o.precision_config.rules->path;
  if (const CalibrationFit& fit = summary_.calibration;
      fit.verdict != CalibrationFit::Verdict::none)
    j["calibration_check"] = {{"verdict", verdict_name(fit.verdict)},
                              {"nodes", fit.nodes},
                              {"median_ratio", fit.median_ratio},
                              {"total_ratio", fit.total_ratio},
                              {"rule", "measured / predicted f32 node times, median and total "
                                       "within 0.5x..2x over >= 5 nodes"}};
  j["loss_scale"] = scaling_ ? scaler_->scale() : 1.0f;
  j["skipped_steps"] = scaling_ ? scaler_->skipped_steps() : 0;
  j["epochs"] = o.epochs;
  j["steps"] = r.steps;
  j["batch"] = o.batch;
  if (o.ranks) {  // --data-parallel
    j["world_size"] = world;
    j["global_batch"] = layout_.global_batch;
    j["transport"] = o.ranks->transport();
    j["samples_per_sec_per_rank"] = r.samples_per_sec / world;
    // Per step of this run, rank 0's: the gradient buckets, their bytes (what each rank
    // sends into the reductions), the time the step waited for them and their reductions.
    j["communication"] =
        communication_json(*o.ranks, o.ranks->stats() - comm_before_, double(step - first_step_));
  }
  j["samples_per_sec"] = r.samples_per_sec;
  r.wall_seconds = wall.seconds();
  j["wall_seconds"] = r.wall_seconds;
  j["peak_rss_mib"] = double(peak_resident_memory_bytes()) / double(1 << 20);
  j["memory"] = memory_json(memory);
  j["cuda_graph"] = cuda_graph_json(session);
  device.add_to(j);
  nlohmann::json models = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const nlohmann::ordered_json own =
        o.model_fields ? o.model_fields(i) : nlohmann::ordered_json();
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [key, value] : own.items()) m[key] = value;
    for (size_t v = 0; v < values_.size(); ++v)
      if (!values_[v].result.empty()) m[values_[v].result] = r.final_values[size_t(i)][v];
    if (!r.test_accuracy.empty()) m["test_accuracy"] = r.test_accuracy[size_t(i)];
    if (!r.checkpoints.empty()) m["checkpoint"] = r.checkpoints[size_t(i)];
    if (n == 1) {
      j.update(m);
      break;
    }
    m["index"] = i;
    models.push_back(m);
    if (progress_ == Progress::none) continue;
    std::ostringstream line;  // its own stream: std::fixed would stick to `log`
    line << "model " << i << ":";
    for (const std::string& key : o.model_line_fields)
      if (own.contains(key)) line << " " << key << " " << short_number(own[key]);
    line << std::fixed << std::setprecision(4);
    for (size_t v = 0; v < values_.size(); ++v)
      if (!values_[v].result.empty())
        line << "  " << values_[v].label << " " << r.final_values[size_t(i)][v];
    if (!r.test_accuracy.empty())
      line << "  " << o.accuracy_label << " " << r.test_accuracy[size_t(i)];
    if (!r.checkpoints.empty()) line << "  -> " << r.checkpoints[size_t(i)];
    log_ << line.str() << "\n";
  }
  if (n > 1) {
    j["array"] = n;
    j["array_shuffle"] =
        o.array_shuffle ? nlohmann::json(array_shuffle_name(*o.array_shuffle)) : nlohmann::json();
    j["models"] = models;
  }
  log_ << j.dump() << "\n";
  log_.flush();
}

void print_profile(const std::vector<std::pair<std::string, double>>& ms_by_op, int64_t steps,
                   std::ostream& log) {
  double total = 0;
  for (auto& [name, ms] : ms_by_op) total += ms;
  log << "time per op over " << steps << " steps (total " << std::fixed << std::setprecision(1)
      << total << " ms):\n";
  for (auto& [name, ms] : ms_by_op)
    log << "  " << std::left << std::setw(40) << name << std::right << std::setw(10)
        << std::setprecision(1) << ms << " ms " << std::setw(6) << 100.0 * ms / total << "%\n";
}

}  // namespace campo
