#include "train/loop.h"

#include <algorithm>
#include <cmath>
#include <ostream>

#include "datasets/loader.h"
#include "graph/executor.h"
#include "runtime/check.h"
#include "runtime/communicator.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/interrupt.h"
#include "train/loop_options.h"
#include "train/profiling.h"
#include "train/run_report.h"
#include "train/session.h"

namespace campo {

namespace {

// A run whose loss scaler skipped this many steps in a row fails: the scale has then been
// halved 100 times, from any --loss-scale-init (at most 2^64) to below 2^-36, where no finite
// loss's gradients overflow; the inf or NaN comes from the forward (weights, data) and no
// scale fixes it. The weights no longer change, so finishing with exit code 0 would report a
// run that trained nothing. Counted per step from the scaler's skipped_steps (cheap).
constexpr int64_t kMaxSkippedStepsInARow = 100;

void check_not_all_skipped(const LossScaler& scaler, int64_t& skipped_before,
                           int64_t& skipped_in_a_row, int64_t step) {
  const int64_t skipped = scaler.skipped_steps();
  skipped_in_a_row = skipped > skipped_before ? skipped_in_a_row + 1 : 0;
  skipped_before = skipped;
  CAMPO_CHECK(skipped_in_a_row < kMaxSkippedStepsInARow, "the last ", skipped_in_a_row,
              " steps (to step ", step,
              ") were all skipped: their gradients held inf or NaN at every loss scale down to ",
              scaler.scale(),
              ", so the weights no longer change (a lower --lr, or --precision fp32, may help)");
}

// Appends a step's values (out[model][value]) to `values` [model][value][step]; a value
// that is not finite stops the run with a line naming the model, the value and the step.
void record_step_values(const std::vector<std::vector<float>>& out, int64_t step,
                        const std::vector<float>& base_lr, const std::vector<StepValue>& names,
                        std::vector<std::vector<std::vector<float>>>& values) {
  const size_t n = values.size();
  for (size_t i = 0; i < n; ++i)
    for (size_t v = 0; v < names.size(); ++v) {
      const float x = out[i][v];
      CAMPO_CHECK(std::isfinite(x), "training diverged: ",
                  n > 1 ? "model " + std::to_string(i) + "'s " : std::string(), names[v].name,
                  " is ", x, " at step ", step + 1, " (its --lr ", base_lr[i],
                  "; try a smaller one)");
      values[i][v].push_back(x);
    }
}

}  // namespace

TrainingLoopResult run_training(Session& session, const TrainingLoopOptions& o,
                                const DeviceReport& device, const Timer& wall, std::ostream& log) {
  const int n = session.models();
  const std::string& save_path = o.checkpoint.save_path;
  const std::vector<StepValue> step_values = session.step_values();
  const size_t values = step_values.size();
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
  RunReport report(session, o, device,
                   {.models = n,
                    .per_epoch = per_epoch,
                    .total_steps = total_steps,
                    .global_batch = global_batch,
                    .world = world,
                    .data = &data},
                   log);
  report.banner();

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
    report.resumed(r.path, step, start_epoch, start_batch);
  }
  if (o.report.profile || !o.report.profile_out.empty()) session.set_profiling(true);
  const int64_t first_profiled_step = step;

  TrainingLoopResult r;
  r.values.assign(size_t(n), std::vector<std::vector<float>>(values));
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
  report.start(step);
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
  const LossScaler* scaler = session.loss_scaler();
  int64_t skipped_before = scaler ? scaler->skipped_steps() : 0, skipped_in_a_row = 0;
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
      if (o.numerics) o.numerics->arm(records_numerics(o.report, step + 1, total_steps));
      const std::vector<std::vector<float>> out = session.step_models(per_model, lr, next);
      record_step_values(out, step, o.lr, step_values, r.values);
      ++step;
      if (scaler) check_not_all_skipped(*scaler, skipped_before, skipped_in_a_row, step);
      ++in_epoch;
      if (o.checkpoint.save_every > 0 && step % o.checkpoint.save_every == 0)
        save_all(epoch, in_epoch);
      int signal = interrupt_signal();
      if (world > 1) o.ranks->all_reduce(&signal, 1, DType::i32, ReduceOp::max);
      if (signal) {
        save_all(epoch, in_epoch);  // the step is complete
        report.interrupted();
        throw Interrupted(signal, "at step " + std::to_string(step), first_checkpoint,
                          "no --save given");
      }
      report.step(epoch, in_epoch, step, step == total_steps || in_epoch == per_epoch, lr,
                  r.values);
      if (o.numerics && o.numerics->armed()) {
        report.numerics(step, *o.numerics);
        o.numerics->arm(false);
      }
    }
    save_all(epoch, in_epoch);
    if (o.end_of_epoch) o.end_of_epoch(epoch);
  }
  r.steps = step;
  if (!save_path.empty() && writer)
    for (int i = 0; i < n; ++i) r.checkpoints.push_back(o.checkpoint_path(i));
  report.trained(r);
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
    report.evaluated(step, r.test_accuracy);
  }
  const MemoryReport memory = session.memory();
  if (!o.report.profile_out.empty()) {  // written by the caller (perf/predict.h)
    const int64_t steps = step - first_profiled_step;
    StepProfile& p = r.profile.emplace();
    p.run = o.result;
    p.precision = o.precision_config.policy;
    p.batch = o.batch;
    p.steps = steps;
    p.backend = device.backend();
    device.add_to(p.device);
    p.nodes = profile_nodes_json(session.profile(), steps);
  }
  report.finish(r, memory, wall);
  return r;
}

}  // namespace campo
