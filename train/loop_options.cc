// The training loop's options: parses and checks (train/loop_options.h).
#include "train/loop_options.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "models/models.h"
#include "runtime/check.h"
#include "runtime/file_check.h"
#include "train/metrics_log.h"

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
  const std::pair<const char*, size_t> lists[] = {{"--lr", a.lr.size()},
                                                  {"--momentum", a.momentum.size()},
                                                  {"--weight-decay", a.weight_decay.size()},
                                                  {"--dropout", a.dropout.size()},
                                                  {"--seed", a.seed.size()}};
  for (const auto& [option, count] : lists) {
    if (count == 0) continue;
    CAMPO_CHECK(a.size >= 2, option, " lists ", count, " values; give --array ", count,
                " to train one ", model, " per value");
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
  CAMPO_CHECK(!resume, "--resume does not continue a ", model,
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
  if (r.numerics == NumericsScope::off) return;
  CAMPO_CHECK(!r.metrics_path.empty() || !r.tensorboard_dir.empty(),
              "--numerics records into --metrics FILE or --tensorboard DIR: give one of them");
  CAMPO_CHECK(r.numerics_every >= 1, "--numerics-every must be at least 1, got ", r.numerics_every);
}

bool records_numerics(const ReportOptions& r, int64_t step, int64_t total) {
  return r.numerics != NumericsScope::off && (step % r.numerics_every == 0 || step == total);
}

}  // namespace campo
