#include "train/metrics_log.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>
#include <utility>

#include "runtime/check.h"
#include "runtime/file_check.h"

namespace campo {

namespace {

// One JSON object on one line, its fields in the order added and its numbers in their
// shortest round-trip text (std::to_chars): an lr of 0.03302772f reads 0.03302772, where
// nlohmann's dump writes 0.033027720000000003 for the double nearest it. Keys are the
// fixed names of this file or checked names (check_name), so nothing needs escaping.
class JsonLine {
 public:
  explicit JsonLine(std::string_view event) : text_("{\"event\":\"") {
    text_ += event;
    text_ += '"';
  }
  template <typename T>
  JsonLine& add(std::string_view key, T value) {
    add_key(key);
    add_number(value);
    return *this;
  }
  // A string value (JSON-escaped).
  JsonLine& add_text(std::string_view key, const std::string& value) {
    add_key(key);
    text_ += nlohmann::json(value).dump();
    return *this;
  }
  template <typename T>
  JsonLine& add(std::string_view key, const std::vector<T>& values) {
    add_key(key);
    text_ += '[';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i) text_ += ',';
      add_number(values[i]);
    }
    text_ += ']';
    return *this;
  }
  // A single model's value alone, an array's as a list.
  template <typename T>
  JsonLine& add_per_model(std::string_view key, const std::vector<T>& values, bool array) {
    return array ? add(key, values) : add(key, values.at(0));
  }
  std::string str() const { return text_ + "}"; }

 private:
  void add_key(std::string_view key) {
    text_ += ",\"";
    text_ += key;
    text_ += "\":";
  }
  template <typename T>
  void add_number(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(v)) {  // JSON has no inf or NaN
        text_ += "null";
        return;
      }
    }
    char digits[64];
    text_.append(digits, std::to_chars(digits, digits + sizeof digits, v).ptr);
  }
  std::string text_;
};

// A metric's name is a JSON key and part of a TensorBoard tag: letters, digits and _ only.
void check_name(const std::string& name) {
  CAMPO_CHECK(
      !name.empty() && std::all_of(name.begin(), name.end(),
                                   [](char c) { return std::isalnum(uint8_t(c)) || c == '_'; }),
      "internal: metric name '", name, "' (letters, digits and _ only)");
}

// count / elements (0 of nothing).
double fraction(int64_t count, int64_t elements) {
  return elements > 0 ? double(count) / double(elements) : 0.0;
}

// The --metrics line of one numerics entry at `step`.
std::string numerics_line(int64_t step, const NumericsEntry& e) {
  const NumericsCounts& c = e.numerics.counts;
  return JsonLine("numerics")
      .add("step", step)
      .add_text("node", e.node)
      .add_text("operand", e.operand)
      .add_text("pass", e.pass)
      .add_text("format", e.format)
      .add("elements", c.elements)
      .add("amax", c.amax)
      .add("scale", e.numerics.scale)  // NaN: null
      .add("underflow", fraction(c.underflow, c.elements))
      .add("saturated", fraction(c.saturated, c.elements))
      .add("overflow", fraction(c.overflow, c.elements))
      .add("nan", c.nan)
      .add("inf", c.inf)
      .str();
}

// The TensorBoard scalars of one numerics entry: numerics/<node>/<operand>/<what>.
void add_numerics_scalars(const NumericsEntry& e,
                          std::vector<std::pair<std::string, float>>& scalars) {
  const NumericsCounts& c = e.numerics.counts;
  const std::string tag = "numerics/" + e.node + "/" + e.operand + "/";
  scalars.emplace_back(tag + "amax", c.amax);
  if (std::isfinite(e.numerics.scale)) scalars.emplace_back(tag + "scale", e.numerics.scale);
  scalars.emplace_back(tag + "underflow", float(fraction(c.underflow, c.elements)));
  scalars.emplace_back(tag + "saturated", float(fraction(c.saturated, c.elements)));
  scalars.emplace_back(tag + "overflow", float(fraction(c.overflow, c.elements)));
  scalars.emplace_back(tag + "nan", float(c.nan));
  scalars.emplace_back(tag + "inf", float(c.inf));
}

// The tag of model i's scalar: `base` alone for a single model, base/model_<i> in an array.
std::string model_tag(const std::string& base, size_t i, bool array) {
  return array ? base + "/model_" + std::to_string(i) : base;
}

}  // namespace

bool is_logged_step(int64_t in_epoch, int64_t per_epoch, bool last) {
  return last || in_epoch % std::max<int64_t>(1, per_epoch / 10) == 0;
}

void check_metrics_outputs(const std::string& metrics_path, const std::string& tensorboard_dir) {
  if (!metrics_path.empty()) require_output_file(metrics_path, "--metrics file");
  if (!tensorboard_dir.empty())
    require_output_directory(tensorboard_dir, "--tensorboard directory");
}

MetricsLog::MetricsLog(const MetricsLogOptions& options) : options_(options) {
  CAMPO_CHECK(options_.models >= 1, "internal: a metrics log of ", options_.models, " models");
  if (!options_.metrics_path.empty()) {
    // A resumed run continues the file of the run it resumes.
    metrics_.reset(
        std::fopen(options_.metrics_path.c_str(), options_.resumed_step > 0 ? "a" : "w"));
    CAMPO_CHECK(metrics_, "--metrics file ", options_.metrics_path,
                ": cannot open it: ", std::strerror(errno));
    if (options_.resumed_step > 0)
      write_line(JsonLine("resume").add("step", options_.resumed_step).str());
  }
  if (!options_.tensorboard_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options_.tensorboard_dir, ec);
    CAMPO_CHECK(!ec, "--tensorboard directory ", options_.tensorboard_dir,
                ": cannot create it: ", ec.message());
    events_ =
        std::make_unique<EventFileWriter>(options_.tensorboard_dir, "--tensorboard directory");
    // The checkpoint's own step stays; what an earlier run logged after it goes.
    if (options_.resumed_step > 0) events_->session_start(options_.resumed_step + 1);
  }
}

void MetricsLog::check_models(size_t count, const char* what) const {
  CAMPO_CHECK(count == size_t(options_.models), "internal: ", count, " ", what,
              " for a metrics log of ", options_.models, " models");
}

void MetricsLog::write_line(const std::string& json) {
  const bool written = std::fputs(json.c_str(), metrics_.get()) >= 0 &&
                       std::fputc('\n', metrics_.get()) != EOF && std::fflush(metrics_.get()) == 0;
  CAMPO_CHECK(written, "--metrics file ", options_.metrics_path,
              ": cannot write: ", std::strerror(errno));
}

void MetricsLog::log_step(const StepMetrics& m) {
  if (!enabled()) return;
  if (!m.losses.empty()) check_models(m.losses.size(), "losses");
  check_models(m.lrs.size(), "learning rates");
  for (const auto& [name, values] : m.named) {
    check_name(name);
    check_models(values.size(), name.c_str());
  }
  const bool array = options_.models > 1;
  if (metrics_) {
    JsonLine j("train");
    j.add("step", m.step).add("epoch", m.epoch);
    if (!m.losses.empty()) j.add_per_model(array ? "losses" : "loss", m.losses, array);
    for (const auto& [name, values] : m.named) j.add_per_model(name, values, array);
    j.add_per_model(array ? "lrs" : "lr", m.lrs, array)
        .add("loss_scale", m.loss_scale)
        .add("skipped_steps", m.skipped_steps)
        .add("samples_per_sec", m.samples_per_sec);
    if (m.rss_mib > 0) j.add("rss_mib", m.rss_mib);
    write_line(j.str());
  }
  if (events_) {
    std::vector<std::pair<std::string, float>> scalars;
    for (size_t i = 0; i < m.losses.size(); ++i)
      scalars.emplace_back(model_tag("train/loss", i, array), float(m.losses[i]));
    for (const auto& [name, values] : m.named)
      for (size_t i = 0; i < values.size(); ++i)
        scalars.emplace_back(model_tag("train/" + name, i, array), float(values[i]));
    for (size_t i = 0; i < m.lrs.size(); ++i)
      scalars.emplace_back(model_tag("train/lr", i, array), m.lrs[i]);
    scalars.emplace_back("train/loss_scale", m.loss_scale);
    scalars.emplace_back("train/samples_per_sec", float(m.samples_per_sec));
    if (m.rss_mib > 0) scalars.emplace_back("train/rss_mib", float(m.rss_mib));
    events_->scalars(m.step, scalars);
  }
}

void MetricsLog::log_eval(int64_t step, const std::vector<double>& accuracy) {
  if (!enabled()) return;
  check_models(accuracy.size(), "accuracies");
  const bool array = options_.models > 1;
  if (metrics_) {
    write_line(JsonLine("eval")
                   .add("step", step)
                   .add_per_model(array ? "test_accuracies" : "test_accuracy", accuracy, array)
                   .str());
  }
  if (events_) {
    std::vector<std::pair<std::string, float>> scalars;
    for (size_t i = 0; i < accuracy.size(); ++i)
      scalars.emplace_back(model_tag("eval/accuracy", i, array), float(accuracy[i]));
    events_->scalars(step, scalars);
  }
}

void MetricsLog::log_numerics(int64_t step, const std::vector<NumericsEntry>& entries) {
  if (!enabled()) return;
  for (const NumericsEntry& e : entries)
    CAMPO_CHECK(e.written, "internal: --numerics recorded nothing of '", e.node, "' operand ",
                e.operand, " at step ", step);
  if (metrics_)
    for (const NumericsEntry& e : entries) write_line(numerics_line(step, e));
  if (events_) {
    std::vector<std::pair<std::string, float>> scalars;
    for (const NumericsEntry& e : entries) add_numerics_scalars(e, scalars);
    events_->scalars(step, scalars);
  }
}

}  // namespace campo
