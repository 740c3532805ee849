#include "train/loop.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "amp/calibration.h"
#include "datasets/loader.h"
#include "graph/executor.h"
#include "models/models.h"
#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/cpu_backend.h"
#include "runtime/file_check.h"
#include "runtime/memory_info.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/interrupt.h"
#include "train/metrics_log.h"
#include "train/predict.h"
#include "train/profiling.h"
#include "train/trainer.h"

namespace campo {

LrSchedule::Kind parse_lr_schedule(const std::string& text) {
  if (text == "constant") return LrSchedule::Kind::constant;
  if (text == "step") return LrSchedule::Kind::step;
  CAMPO_CHECK(text == "cosine", "--lr-schedule must be constant, step or cosine, got '", text, "'");
  return LrSchedule::Kind::cosine;
}

const char* lr_schedule_name(LrSchedule::Kind kind) {
  switch (kind) {
    case LrSchedule::Kind::constant:
      return "constant";
    case LrSchedule::Kind::step:
      return "step";
    case LrSchedule::Kind::cosine:
      break;
  }
  return "cosine";
}

void validate(const LrSchedule& s) {
  CAMPO_CHECK(s.step_epochs > 0, "--lr-step-epochs must be positive, got ", s.step_epochs);
  CAMPO_CHECK(s.gamma > 0 && s.gamma <= 1, "--lr-gamma must be in (0, 1], got ", s.gamma);
  CAMPO_CHECK(s.warmup_steps >= 0, "--warmup-steps must be >= 0, got ", s.warmup_steps);
}

nlohmann::json cuda_graph_json(const Session& session) {
  nlohmann::json j = {{"captures", 0}, {"replays", 0}, {"launched_because", nullptr}};
  for (const Executable* e : session.step_executables()) {
    if (!e) continue;
    j["captures"] = j["captures"].get<int>() + e->captures();
    j["replays"] = j["replays"].get<int64_t>() + e->replays();
    if (!e->replay_blocker().empty() && j["launched_because"].is_null())
      j["launched_because"] = e->replay_blocker();
  }
  return j;
}

std::string cuda_graph_line(const Session& session) {
  const nlohmann::json j = cuda_graph_json(session);
  if (!j["launched_because"].is_null())
    return "cuda graph: kernel by kernel (" + j["launched_because"].get<std::string>() + ")";
  const int captures = j["captures"].get<int>();
  const int64_t replays = j["replays"].get<int64_t>();
  return "cuda graph: replayed (" + std::to_string(captures) +
         (captures == 1 ? " capture, " : " captures, ") + std::to_string(replays) +
         (replays == 1 ? " replay)" : " replays)");
}

float learning_rate_at(const LrSchedule& s, float base, int64_t step, int64_t total_steps,
                       int64_t steps_per_epoch) {
  double lr = base;
  if (s.kind == LrSchedule::Kind::cosine) {
    // Cosine decay to 0 over the run (after warm-up).
    const double span = double(std::max<int64_t>(1, total_steps - s.warmup_steps));
    const double t = std::clamp(double(step - s.warmup_steps) / span, 0.0, 1.0);
    lr *= 0.5 * (1.0 + std::cos(M_PI * t));
  } else if (s.kind == LrSchedule::Kind::step) {
    const int64_t epoch = step / std::max<int64_t>(1, steps_per_epoch);
    lr *= std::pow(double(s.gamma), double(epoch / std::max(1, s.step_epochs)));
  }
  if (step < s.warmup_steps) lr *= double(step + 1) / double(s.warmup_steps);
  return float(lr);
}

ResumePoint resume_point(const std::string& path, int64_t epoch, int64_t position_in_epoch,
                         int64_t steps, int64_t skipped_steps, int64_t per_epoch, int epochs) {
  // The position must lie within this run's epochs. The epoch is checked before it is
  // multiplied, so `consumed` below stays far from overflow.
  const std::string where = "checkpoint " + path + ": ";
  CAMPO_CHECK(position_in_epoch <= per_epoch, where, "campo.position_in_epoch is ",
              position_in_epoch, ", beyond the ", per_epoch,
              " batches of an epoch of this run (was it written with another --batch or "
              "--limit-train?)");
  ResumePoint at;
  at.epoch = int(std::min<int64_t>(epoch, epochs + int64_t(1)));
  at.batch = position_in_epoch;
  if (at.batch == per_epoch) {
    ++at.epoch;
    at.batch = 0;
  }
  CAMPO_CHECK(at.epoch < epochs || (at.epoch == epochs && at.batch == 0), where, "campo.epoch is ",
              epoch, " (batch ", position_in_epoch, "), past the end of this run's --epochs ",
              epochs, " (raise --epochs to train further)");
  // Every batch consumed either updated the weights (a step) or was skipped by the loss
  // scaler, so the two together cannot exceed the batches the position accounts for.
  const int64_t consumed = epoch * per_epoch + position_in_epoch;
  CAMPO_CHECK(steps + skipped_steps <= consumed, where, "campo.step is ", steps,
              (skipped_steps ? " (+ " + std::to_string(skipped_steps) + " skipped)" : ""),
              ", more than the ", consumed, " batches its position (epoch ", epoch, ", batch ",
              position_in_epoch,
              ") accounts for (was it written with another --batch or --limit-train?)");
  return at;
}

void validate(const CheckpointOptions& c) {
  CAMPO_CHECK(c.save_every >= 0, "--save-every must be a positive number of steps, got ",
              c.save_every);
  CAMPO_CHECK(c.save_every == 0 || !c.save_path.empty(),
              "--save-every needs --save (the checkpoint path to write every ", c.save_every,
              " steps)");
  if (!c.save_path.empty()) require_output_file(c.save_path, "--save checkpoint");
  if (!c.resume_path.empty()) require_input_file(c.resume_path, "--resume checkpoint");
}

void validate(const ArrayOptions& a, const std::string& model, OptimizerConfig::Kind optimizer,
              bool resume) {
  CAMPO_CHECK(a.size >= 0 && a.size <= 64, "--array must be a number of models in 1..64, got ",
              a.size);
  const char* one = is_gan_model(model) ? model.c_str() : "model";
  const std::pair<const char*, size_t> lists[] = {{"--lr", a.lr.size()},
                                                  {"--momentum", a.momentum.size()},
                                                  {"--weight-decay", a.weight_decay.size()},
                                                  {"--dropout", a.dropout.size()},
                                                  {"--seed", a.seed.size()}};
  for (const auto& [option, count] : lists) {
    if (count == 0) continue;
    CAMPO_CHECK(a.size >= 2, option, " lists ", count, " values; give --array ", count,
                " to train one ", one, " per value");
    CAMPO_CHECK(int(count) == a.size, option, " lists ", count, " values for --array ", a.size,
                " (give one value per model, or a single value for all)");
  }
  for (float v : a.lr)
    CAMPO_CHECK(std::isfinite(v) && v > 0, "--lr must list positive learning rates, got ", v);
  for (float v : a.momentum)
    CAMPO_CHECK(v >= 0 && v < 1, "--momentum values must be in [0, 1), got ", v);
  CAMPO_CHECK(a.momentum.empty() || optimizer == OptimizerConfig::Kind::sgd,
              "--momentum applies to --optimizer sgd only, not ", optimizer_name(optimizer));
  for (float v : a.weight_decay)
    CAMPO_CHECK(std::isfinite(v) && v >= 0, "--weight-decay values must be non-negative, got ", v);
  for (float v : a.dropout) {
    CAMPO_CHECK(v >= 0 && v < 1, "--dropout values must be in [0, 1), got ", v);
    CAMPO_CHECK(v == 0 || (is_known_model(model) && has_dropout(model)),
                "--dropout applies to models with a configurable dropout only (", model,
                " has none)");
  }
  if (a.size < 2) {
    CAMPO_CHECK(a.shuffle == ArrayShuffle::shared, "--array-shuffle needs --array N (N >= 2)");
    return;
  }
  CAMPO_CHECK(!resume, "--resume does not continue a ",
              is_gan_model(model) ? model.c_str() : "model",
              " array; resume one of its models alone from its checkpoint (campo train --model ",
              model, " --resume PATH-<i>.safetensors)");
}

Progress parse_progress(const std::string& text) {
  if (text == "auto") return Progress::automatic;
  if (text == "bar") return Progress::bar;
  if (text == "lines") return Progress::lines;
  CAMPO_CHECK(text == "none", "--progress must be auto, bar, lines or none, got '", text, "'");
  return Progress::none;
}

ArrayShuffle parse_array_shuffle(const std::string& text) {
  if (text == "shared") return ArrayShuffle::shared;
  CAMPO_CHECK(text == "independent", "--array-shuffle must be shared or independent, got '", text,
              "'");
  return ArrayShuffle::independent;
}

const char* array_shuffle_name(ArrayShuffle s) {
  return s == ArrayShuffle::independent ? "independent" : "shared";
}

void validate(const ReportOptions& r) {
  check_metrics_outputs(r.metrics_path, r.tensorboard_dir);
  if (!r.profile_out.empty()) require_output_file(r.profile_out, "--profile-out file");
}

namespace {

// --profile-out: what ran where (the run's fields, the machine, the threads) and every
// node's time over the `steps` profiled steps (campo predict reads it).
void write_profile(const TrainingLoopOptions& o, const Session& session,
                   const DeviceReport& device_report, int64_t steps) {
  nlohmann::json j = o.result;
  j["format"] = "campo-profile";
  j["version"] = 1;
  j["campo_version"] = CAMPO_VERSION;
  j["precision"] = precision_name(o.precision_config.policy);
  j["batch"] = o.batch;
  j["steps"] = steps;
  device_report.add_to(j);
  const std::shared_ptr<Backend>& backend = device_report.backend();
  j["machine"] = backend->describe();
  j["threads"] = omp_get_max_threads();
  j["onednn_isa"] = onednn_isa_name();
  // The origin campo predict scales from: this CPU as the run used it, measured now; a GPU
  // is named with predict --from.
  if (backend->device().type == Device::cpu)
    j["device_model"] = measure_this_cpu(backend).to_json();
  j["nodes"] = profile_nodes_json(session.profile(), steps);
  double total = 0;
  for (const nlohmann::json& node : j["nodes"]) total += node["ms_per_step"].get<double>();
  j["total_ms_per_step"] = total;  // of the nodes' medians
  write_file_atomically(o.report.profile_out, j.dump(1) + "\n");
}

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

TrainingLoopResult run_training(Session& session, const TrainingLoopOptions& o,
                                const DeviceReport& device, const Timer& wall, std::ostream& log) {
  const int n = session.models();
  const Progress progress = o.report.progress == Progress::automatic
                                ? (o.log_is_terminal ? Progress::bar : Progress::lines)
                                : o.report.progress;
  const std::string& save_path = o.checkpoint.save_path;
  const std::vector<StepValue> values = session.step_values();
  CAMPO_CHECK(int(o.lr.size()) == n && !o.train.empty() && o.train.size() == o.shuffle_seeds.size(),
              "internal: run_training of ", n, " models with ", o.lr.size(), " rates and ",
              o.train.size(), " data sets");
  const int rank = o.ranks ? o.ranks->rank() : 0, world = o.ranks ? o.ranks->size() : 1;
  const bool writer = rank == 0;
  const int64_t global_batch = o.batch * world;  // what a step of every rank together takes
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (size_t k = 0; k < o.train.size(); ++k) {
    LoaderOptions l;
    l.batch_size = o.batch;
    l.shuffle = true;
    l.drop_last = true;  // the step graphs have a static batch size
    l.seed = o.shuffle_seeds[k];
    l.shard = rank;
    l.shards = world;
    loaders.push_back(std::make_unique<DataLoader>(o.train[k], l));
  }
  const Dataset& data = *o.train[0];
  const int64_t per_epoch = loaders[0]->batches_per_epoch();
  CAMPO_CHECK(
      per_epoch > 0, "no full batch of ", global_batch,
      world > 1 ? " (" + std::to_string(world) + " ranks x --batch " + std::to_string(o.batch) + ")"
                : std::string(),
      " in ", data.size(), " samples");
  const int64_t total_steps =
      o.max_steps > 0 ? std::min<int64_t>(o.max_steps, per_epoch * o.epochs) : per_epoch * o.epochs;
  const LossScaler* scaler = session.loss_scaler();
  const bool scaling = scaler != nullptr && scaler->enabled();
  const PrecisionSummary summary = session.precision_summary();
  // --low-precision auto under cost-aware: f16 and bf16 per node (amp paints bf16).
  const bool auto_low =
      o.precision_config.automatic() && o.precision_config.policy == Precision::cost_aware;

  log << "campo: training " << o.what << " on " << data.name() << ", " << data.size()
      << " samples, batch " << o.batch << (o.per_model_batch ? " per model" : "")
      << (world > 1
              ? " per rank x " + std::to_string(world) + " ranks (" + o.ranks->transport() + ")"
              : std::string())
      << ", " << total_steps << " steps, precision " << precision_name(o.precision_config.policy);
  if (o.precision_config.policy != Precision::fp32) {
    if (auto_low)
      log << " (auto: " << summary.f16_nodes << " nodes f16, "
          << summary.low_nodes - summary.f16_nodes << " bf16, " << summary.casts.casts << " casts";
    else
      log << " (" << dtype_name(o.precision_config.low) << ": " << summary.low_nodes
          << " nodes low precision, " << summary.casts.casts << " casts";
    if (scaling) log << ", dynamic loss scale from " << o.precision_config.scaler.init_scale;
    log << ")";
  }
  if (o.array_shuffle) log << ", " << array_shuffle_name(*o.array_shuffle) << " batches";
  log << "\n";
  log.flush();

  // `step` counts batches (the learning-rate schedule and --steps follow it), including
  // those whose update the loss scaler skipped.
  int64_t step = 0;
  int start_epoch = 0;
  int64_t start_batch = 0;
  if (o.resumed) {
    const Resumed& r = *o.resumed;
    const ResumePoint at = resume_point(r.path, r.epoch, r.position_in_epoch, r.steps,
                                        r.skipped_steps, per_epoch, o.epochs);
    start_epoch = at.epoch;
    start_batch = at.batch;
    step = r.steps + r.skipped_steps;
    // A run with nothing left would write no checkpoint and report no loss.
    CAMPO_CHECK(step < total_steps, "--resume checkpoint ", r.path, " is at step ", step,
                ", where this run of ", total_steps,
                " steps ends: nothing left to train (raise --steps or --epochs)");
    log << "campo: resumed from " << r.path << " at step " << step << " (epoch " << start_epoch + 1
        << ", batch " << start_batch << ")\n";
  }
  if (o.report.profile || !o.report.profile_out.empty()) session.set_profiling(true);
  const int64_t first_profiled_step = step;

  TrainingLoopResult r;
  r.values.assign(size_t(n), std::vector<std::vector<float>>(values.size()));
  auto recent = [&](size_t value, size_t window) {
    std::vector<double> m;
    for (const auto& model : r.values) m.push_back(tail_mean(model[value], window));
    return m;
  };
  const std::string first_checkpoint = save_path.empty() ? "" : o.checkpoint_path(0);
  // The position saved after a step: an epoch's end is saved as the next one's start.
  auto save_all = [&](int epoch, int64_t in_epoch) {
    if (save_path.empty() || !writer) return;
    const bool finished = in_epoch == per_epoch;
    for (int i = 0; i < n; ++i)
      session.save_model(i, o.checkpoint_path(i), finished ? epoch + 1 : epoch,
                         finished ? 0 : in_epoch, o.optimizer);
  };

  // From here on Ctrl-C, SIGTERM and SIGHUP finish the step, save (with --save) and stop.
  InterruptScope interrupt_scope;
  const int64_t first_step = step;
  // --metrics, --tensorboard (their paths checked before any work); a resumed run continues.
  MetricsLog metrics({.metrics_path = writer ? o.report.metrics_path : "",
                      .tensorboard_dir = writer ? o.report.tensorboard_dir : "",
                      .models = n,
                      .resumed_step = first_step});
  Timer train_timer;
  const Communicator::Stats comm_before = o.ranks ? o.ranks->stats() : Communicator::Stats{};
  double last_print = -1;
  // On a device whose copies overlap its compute (Backend::overlaps_uploads) the loop reads
  // each batch a step ahead, within an epoch, and the session uploads it while the step
  // before runs (train/prefetch.h). `batches` and `ahead` trade places at each step, so a
  // batch keeps its address from the step that uploaded it to the step that trains on it.
  const bool read_ahead = session.variables().backend().overlaps_uploads();
  std::vector<Batch> batches(loaders.size()), ahead(loaders.size());
  bool have_ahead = false;
  auto model_batches = [&](std::vector<Batch>& from) {
    std::vector<const Batch*> b(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) b[size_t(i)] = &from[loaders.size() == 1 ? 0 : size_t(i)];
    return b;
  };
  std::vector<float> lr(static_cast<size_t>(n));
  for (int epoch = start_epoch; epoch < o.epochs && step < total_steps; ++epoch) {
    int64_t in_epoch = epoch == start_epoch ? start_batch : 0;
    for (auto& l : loaders) l->start_epoch(epoch, in_epoch);
    while (step < total_steps) {
      bool more = true;
      if (have_ahead)
        std::swap(batches, ahead);
      else
        for (size_t k = 0; k < loaders.size(); ++k) more = more && loaders[k]->next(batches[k]);
      have_ahead = false;
      if (!more) break;
      const std::vector<const Batch*> per_model = model_batches(batches);
      for (int i = 0; i < n; ++i)
        lr[size_t(i)] = learning_rate_at(o.schedule, o.lr[size_t(i)], step, total_steps, per_epoch);
      std::vector<const Batch*> next;
      if (read_ahead && step + 1 < total_steps && in_epoch + 1 < per_epoch) {
        have_ahead = true;
        for (size_t k = 0; k < loaders.size(); ++k)
          have_ahead = have_ahead && loaders[k]->next(ahead[k]);
        if (have_ahead) next = model_batches(ahead);
      }
      const std::vector<std::vector<float>> out = session.step_models(per_model, lr, next);
      for (int i = 0; i < n; ++i)
        for (size_t v = 0; v < values.size(); ++v) {
          const float x = out[size_t(i)][v];
          CAMPO_CHECK(std::isfinite(x), "training diverged: ",
                      n > 1 ? "model " + std::to_string(i) + "'s " : std::string(), values[v].name,
                      " is ", x, " at step ", step + 1, " (its --lr ", o.lr[size_t(i)],
                      "; try a smaller one)");
          r.values[size_t(i)][v].push_back(x);
        }
      ++step;
      ++in_epoch;
      if (o.checkpoint.save_every > 0 && step % o.checkpoint.save_every == 0)
        save_all(epoch, in_epoch);
      int signal = interrupt_signal();
      if (world > 1) o.ranks->all_reduce(&signal, 1, DType::i32, ReduceOp::max);
      if (signal) {
        save_all(epoch, in_epoch);  // the step is complete
        if (progress == Progress::bar) log << "\n";
        log.flush();
        throw Interrupted(signal, "at step " + std::to_string(step), first_checkpoint,
                          "no --save given");
      }
      const bool last = step == total_steps || in_epoch == per_epoch;
      const double elapsed = train_timer.seconds();
      const bool bar = progress == Progress::bar && (elapsed - last_print >= 0.1 || last);
      const bool logged = is_logged_step(in_epoch, per_epoch, last);
      if (!bar && !logged) continue;
      const double rate = double((step - first_step) * global_batch * n) / std::max(elapsed, 1e-9);
      const double eta =
          double(total_steps - step) * double(global_batch * n) / std::max(rate, 1e-9);
      std::ostringstream shown;  // each value's recent mean ("a..b" over an array's models)
      for (size_t v = 0; v < values.size(); ++v) {
        if (!values[v].label.empty()) shown << (v ? " " : "") << values[v].label << " ";
        shown << (values[v].label.empty() ? "/" : "")
              << value_range(recent(v, size_t(o.display_window)));
      }
      if (n > 1) shown << " (" << n << " models)";
      if (bar) {
        last_print = elapsed;
        const int width = 30;
        const int filled = int(double(in_epoch) / double(per_epoch) * width);
        log << "\repoch " << epoch + 1 << "/" << o.epochs << " ["
            << std::string(size_t(filled), '=') << std::string(size_t(width - filled), ' ') << "] "
            << in_epoch << "/" << per_epoch << "  " << shown.str() << "  " << std::fixed
            << std::setprecision(0) << rate << " samples/s  ETA " << format_duration(eta);
        if (scaling) log << "  scale " << scaler->scale() << " skipped " << scaler->skipped_steps();
        log << "   " << (last ? "\n" : "");
        log.flush();
      } else if (progress == Progress::lines && logged) {
        log << "epoch " << epoch + 1 << "/" << o.epochs << " step " << in_epoch << "/" << per_epoch
            << " " << shown.str() << " samples/s " << std::fixed << std::setprecision(0) << rate
            << " eta " << format_duration(eta);
        if (scaling)
          log << " loss_scale " << scaler->scale() << " skipped " << scaler->skipped_steps();
        log << "\n";
        log.flush();
      }
      if (logged) {
        StepMetrics m{.step = step,
                      .epoch = epoch + 1,
                      .lrs = lr,
                      .loss_scale = scaling ? scaler->scale() : 1.0f,
                      .skipped_steps = scaling ? scaler->skipped_steps() : 0,
                      .samples_per_sec = rate,
                      .rss_mib = double(resident_memory_bytes()) / double(1 << 20)};
        for (size_t v = 0; v < values.size(); ++v) {
          if (values[v].name == "loss")
            m.losses = recent(v, 50);
          else
            m.named.emplace_back(values[v].name, recent(v, size_t(o.display_window)));
        }
        metrics.log_step(m);
      }
    }
    save_all(epoch, in_epoch);
    if (o.end_of_epoch) o.end_of_epoch(epoch);
  }
  const double train_seconds = train_timer.seconds();
  r.steps = step;
  r.samples_per_sec =
      double((step - first_step) * global_batch * n) / std::max(train_seconds, 1e-9);
  r.final_values.assign(size_t(n), {});
  for (size_t v = 0; v < values.size(); ++v) {
    const std::vector<double> m = recent(v, 50);
    for (int i = 0; i < n; ++i) r.final_values[size_t(i)].push_back(m[size_t(i)]);
  }
  if (!save_path.empty() && writer)
    for (int i = 0; i < n; ++i) {
      r.checkpoints.push_back(o.checkpoint_path(i));
      log << "campo: checkpoint " << r.checkpoints.back() << "\n";
    }
  if (o.test) {
    LoaderOptions eopts;
    eopts.batch_size = std::min<int64_t>(o.eval_batch, o.test->size());
    eopts.shuffle = false;
    eopts.shard = rank;
    eopts.shards = world;
    DataLoader test_loader(o.test, eopts);
    try {
      r.test_accuracy = session.evaluate_models(test_loader);
    } catch (const Interrupted& e) {
      throw Interrupted(e.signal(), "during evaluation after step " + std::to_string(step),
                        first_checkpoint, "no --save given");
    }
    metrics.log_eval(step, r.test_accuracy);
    if (progress != Progress::none && n == 1)
      log << o.accuracy_label << " " << std::fixed << std::setprecision(4) << r.test_accuracy[0]
          << " on " << o.test->size() << " " << o.eval_unit << " " << o.test->name() << "\n";
  }
  const MemoryReport memory = session.memory();
  if (progress != Progress::none && device.backend()->capture_unsupported().empty())
    log << cuda_graph_line(session) << "\n";
  if (o.report.profile) {
    print_profile(session.profile().by_op(), step, log);
    log << "node times: " << device.backend()->node_timer_source() << "\n";
    log << "memory: " << memory_line(memory) << "\n";
  }
  if (!o.report.profile_out.empty()) write_profile(o, session, device, step - first_profiled_step);

  // The JSON result: the run's own fields, then what every run reports.
  nlohmann::json j = o.result;
  j["event"] = "result";
  j["precision"] = precision_name(o.precision_config.policy);
  j["low_precision"] = o.precision_config.policy == Precision::fp32 ? "none"
                       : auto_low                                   ? "auto"
                                  : dtype_name(o.precision_config.low);
  if (auto_low) {
    j["f16_nodes"] = summary.f16_nodes;
    j["bf16_nodes"] = summary.low_nodes - summary.f16_nodes;
  }
  j["casts"] = summary.casts.casts;
  j["loss_scale"] = scaling ? scaler->scale() : 1.0f;
  j["skipped_steps"] = scaling ? scaler->skipped_steps() : 0;
  j["epochs"] = o.epochs;
  j["steps"] = r.steps;
  j["batch"] = o.batch;
  if (o.ranks) {  // --data-parallel
    j["world_size"] = world;
    j["global_batch"] = global_batch;
    j["transport"] = o.ranks->transport();
    j["samples_per_sec_per_rank"] = r.samples_per_sec / world;
    // Per step of this run, rank 0's: the gradient buckets, their bytes (what each rank
    // sends into the reductions), the time the step waited for them and their reductions.
    j["communication"] =
        communication_json(*o.ranks, o.ranks->stats() - comm_before, double(step - first_step));
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
    for (size_t v = 0; v < values.size(); ++v)
      if (!values[v].result.empty()) m[values[v].result] = r.final_values[size_t(i)][v];
    if (!r.test_accuracy.empty()) m["test_accuracy"] = r.test_accuracy[size_t(i)];
    if (!r.checkpoints.empty()) m["checkpoint"] = r.checkpoints[size_t(i)];
    if (n == 1) {
      j.update(m);
      break;
    }
    m["index"] = i;
    models.push_back(m);
    if (progress == Progress::none) continue;
    std::ostringstream line;  // its own stream: std::fixed would stick to `log`
    line << "model " << i << ":";
    for (const std::string& key : o.model_line_fields)
      if (own.contains(key)) line << " " << key << " " << short_number(own[key]);
    line << std::fixed << std::setprecision(4);
    for (size_t v = 0; v < values.size(); ++v)
      if (!values[v].result.empty())
        line << "  " << values[v].label << " " << r.final_values[size_t(i)][v];
    if (!r.test_accuracy.empty())
      line << "  " << o.accuracy_label << " " << r.test_accuracy[size_t(i)];
    if (!r.checkpoints.empty()) line << "  -> " << r.checkpoints[size_t(i)];
    log << line.str() << "\n";
  }
  if (n > 1) {
    j["array"] = n;
    j["array_shuffle"] =
        o.array_shuffle ? nlohmann::json(array_shuffle_name(*o.array_shuffle)) : nlohmann::json();
    j["models"] = models;
  }
  log << j.dump() << "\n";
  log.flush();
  return r;
}

}  // namespace campo
