// The options of `campo train` and what every run does with them first (train/options.h).
#include "train/options.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <thread>

#include "datasets/registry.h"
#include "models/dcgan.h"
#include "models/models.h"
#include "runtime/cpu_backend.h"
#include "runtime/file_check.h"
#include "train/metrics_log.h"

namespace campo {

// A token model trains on a text data set and only there.
void check_model_fits_data(const std::string& model, const std::string& dataset) {
  const bool tokens = model_input(model) == ModelInput::tokens;
  CAMPO_CHECK(tokens == is_text_dataset(dataset), "--model ", model,
              tokens ? " trains on text: give --dataset text:PATH (a UTF-8 text file)"
                     : " trains on images; a text data set ('" + dataset + "') needs --model bert");
}

void check_gan_precision(const PrecisionConfig& p) {
  // Its D and G step graphs are planned apart, G's from a copy that shares D's nodes
  // (train/gan_trainer.cc): layers and rule matches would be each graph's own.
  CAMPO_CHECK(p.rules == nullptr,
              "--precision-policy does not support dcgan yet (its D and G step graphs are "
              "planned apart): use --amp-lists or --amp-lists-file to steer its ops");
  CAMPO_CHECK(!(p.automatic() && p.policy == Precision::cost_aware),
              "--low-precision auto does not support dcgan yet (its D and G step graphs are "
              "planned apart): use --low-precision bf16 or fp16");
  CAMPO_CHECK(!p.scaler.enabled,
              "dynamic loss scaling is not supported for dcgan yet: use --low-precision bf16 or "
              "--loss-scale none");
}

PrecisionConfig precision_config(const TrainOptions& o) {
  return precision_config(o.precision, o.mixed, o.device.type);
}

void validate(const TrainOptions& o) {
  CAMPO_CHECK(
      is_known_model(o.model), "unknown model '", o.model, "' (known models: ",
      [] {
        std::string s;
        for (auto& n : model_names()) s += (s.empty() ? "" : ", ") + n;
        return s;
      }(),
      ")");
  CAMPO_CHECK(o.batch > 0, "--batch must be a positive number of samples, got ", o.batch);
  CAMPO_CHECK(o.epochs > 0, "--epochs must be positive, got ", o.epochs);
  CAMPO_CHECK(o.max_steps >= 0, "--steps must be zero (full epochs) or positive, got ",
              o.max_steps);
  CAMPO_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive learning rate, got ", o.lr);
  validate(o.schedule);
  CAMPO_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1), got ", o.momentum);
  CAMPO_CHECK(o.weight_decay >= 0 && std::isfinite(o.weight_decay),
              "--weight-decay must be non-negative, got ", o.weight_decay);
  CAMPO_CHECK(o.dropout >= 0 && o.dropout < 1, "--dropout must be in [0, 1), got ", o.dropout);
  CAMPO_CHECK(!o.nesterov || o.optimizer == OptimizerConfig::Kind::sgd,
              "--nesterov applies to --optimizer sgd only, not ", optimizer_name(o.optimizer));
  CAMPO_CHECK(o.train_limit >= 0 && o.test_limit >= 0, "--limit-train/--limit-test must be >= 0");
  check_threads(o.threads);
  CAMPO_CHECK(o.dropout == 0 || has_dropout(o.model),
              "--dropout applies to --model mlp and bert only (", o.model,
              " has no configurable dropout)");
  CAMPO_CHECK(o.image_size >= 0, "--image-size must be positive (or 0: native), got ",
              o.image_size);
  CAMPO_CHECK(o.channels == 0 || o.channels == 1 || o.channels == 3,
              "--channels must be 1 or 3 (or 0: the data set's own), got ", o.channels);
  validate(o.array, o.model, o.optimizer, !o.checkpoint.resume_path.empty());
  std::string why;
  CAMPO_CHECK(o.array.size < 2 || supports_model_array(o.model, &why), why);
  (void)precision_config(o);  // checks --precision, --low-precision, --loss-scale, lists
  check_storage_options(o);
  // Outputs and inputs before any work is spent (a calibration or a training run).
  validate(o.checkpoint);
  validate(o.report);
  if (o.report.numerics != NumericsScope::off) {
    CAMPO_CHECK(o.device.type == Device::cpu,
                "--numerics records on the CPU only (the FP8/MX "
                "GEMMs and the casts it counts in are CPU kernels), not on ",
                device_name(o.device.type));
    CAMPO_CHECK(model_family(o.model) != ModelFamily::gan,
                "--numerics does not support dcgan yet (its D and G step graphs are not "
                "watched; nor does --precision-policy, which quantizes GEMMs)");
  }
  validate(o.data_parallel);
  check_data_parallel_model(o.data_parallel, o.model);
}

void check_storage_options(const TrainOptions& o) {
  CAMPO_CHECK(o.master_weights == "f32" || o.master_weights == "none",
              "--master-weights must be f32 or none, got '", o.master_weights, "'");
  CAMPO_CHECK(o.optimizer_state != "fp8",
              "--optimizer-state fp8 (MS-AMP O2: an FP8 first moment with a per-tensor scale, a "
              "16-bit second moment) is not implemented yet: use f32 or bf16");
  CAMPO_CHECK(o.optimizer_state == "f32" || o.optimizer_state == "bf16",
              "--optimizer-state must be f32 or bf16, got '", o.optimizer_state, "'");
  CAMPO_CHECK(o.weight_rounding.empty() || o.weight_rounding == "nearest" ||
                  o.weight_rounding == "stochastic",
              "--weight-rounding must be nearest or stochastic, got '", o.weight_rounding, "'");
  const bool weights = o.master_weights == "none", state = o.optimizer_state == "bf16";
  CAMPO_CHECK(weights || state || o.weight_rounding.empty(),
              "--weight-rounding rounds what the optimizer stores in bf16: give it with "
              "--master-weights none or --optimizer-state bf16");
  if (!weights && !state) return;
  const char* what = weights ? "--master-weights none" : "--optimizer-state bf16";
  CAMPO_CHECK(o.device.type == Device::cpu, what,
              " is not built for cuda yet (the GPU optimizer kernels keep f32 weights and "
              "state): use --device cpu");
  CAMPO_CHECK(model_family(o.model) != ModelFamily::gan, what,
              " does not support dcgan yet (its D and G step graphs are built apart)");
  CAMPO_CHECK(o.array.size < 2, what,
              " does not support model arrays yet (--array): train the models one by one");
  if (!weights) return;
  CAMPO_CHECK(o.precision != Precision::fp32,
              "--master-weights none trains on bf16 weights, which --precision fp32 would cast "
              "to f32 for every op: use --precision amp or cost-aware");
  CAMPO_CHECK(o.mixed.low_precision == "bf16",
              "--master-weights none stores the weights in bf16: use --low-precision bf16 (fp16 "
              "weights without f32 master copies are not supported), got '",
              o.mixed.low_precision, "'");
}

void check_threads(int threads) {
  CAMPO_CHECK(threads >= 0, "--threads must be >= 0, got ", threads);
  // Far more threads than cores only slows a step down, and tens of thousands crash the
  // OpenMP runtime (out of thread stacks).
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const int most = std::max(64, 4 * cores);
  CAMPO_CHECK(threads <= most, "--threads ", threads, " is more than ", most,
              " (4x this machine's ", cores, " logical cores); 0 uses all cores");
}

void fail_with_batch_advice(const MemoryShortfall& e, int64_t batch) {
  // The plan holds the activations of every sample of the batch: it shrinks about in
  // proportion (10% kept free for what the plan does not hold: weights, kernel scratch).
  const int64_t fits = int64_t(double(batch) * 0.9 * double(e.available()) /
                               double(std::max<size_t>(e.needed(), 1)));
  CAMPO_FAIL(e.what(), " at --batch ", batch,
             fits >= 1
                 ? "; about --batch " + std::to_string(fits) + " would fit"
                 : std::string("; not even one sample fits: a smaller model or --image-size"));
}

std::shared_ptr<Backend> backend_for(const DeviceSpec& device, CudaGraphMode cuda_graph,
                                     bool deterministic) {
  // make_backend is the one place that knows which devices this build and machine have; it
  // throws one line for any other.
  std::shared_ptr<Backend> backend =
      device == DeviceSpec{Device::cpu, 0} ? default_cpu_backend() : make_backend(device);
  backend->set_cuda_graph(cuda_graph);
  backend->set_deterministic(deterministic);
  return backend;
}

RunStart start_run(const TrainOptions& o, std::ostream& log) {
  validate(o);
  RunStart r;
  // Every step, evaluation, checkpoint, sample and profile of the run is on this backend.
  r.backend = backend_for(rank_device(o.device, o.data_parallel), o.cuda_graph, o.deterministic);
  r.ranks = o.data_parallel.enabled ? join_ranks(o.data_parallel, o.device.type) : nullptr;
  static std::ostream nowhere(nullptr);
  r.log = !r.ranks || r.ranks->rank() == 0 ? &log : &nowhere;
  if (o.threads > 0) omp_set_num_threads(o.threads);
  r.h = array_hyperparameters(o.array,
                              {{o.lr}, {o.momentum}, {o.weight_decay}, {o.dropout}, {o.seed}});
  return r;
}

std::optional<bool> parse_augment(const std::string& text) {
  CAMPO_CHECK(text == "auto" || text == "on" || text == "off",
              "--augment must be auto, on or off, got '", text, "'");
  return text == "auto" ? std::nullopt : std::optional<bool>(text == "on");
}

TrainOptions training_options_for(const std::string& model) {
  TrainOptions o;
  o.model = model;
  const TrainingDefaults d = training_defaults(model);
  if (d.lr) o.lr = *d.lr;
  if (d.optimizer) o.optimizer = *d.optimizer;
  if (d.warmup_steps) o.schedule.warmup_steps = *d.warmup_steps;
  if (d.dropout) o.dropout = *d.dropout;
  if (d.lr_schedule) o.schedule.kind = parse_lr_schedule(*d.lr_schedule);
  if (d.low_precision) o.mixed.low_precision = *d.low_precision;
  return o;
}

OptimizerConfig optimizer_config(const TrainOptions& o) {
  OptimizerConfig c;
  c.kind = o.optimizer;
  c.momentum = o.momentum;
  c.nesterov = o.nesterov;
  c.weight_decay = o.weight_decay;
  c.multi_tensor = o.multi_tensor_updates;
  c.weight_dtype = o.master_weights == "none" ? DType::bf16 : DType::f32;
  c.state_dtype = o.optimizer_state == "bf16" ? DType::bf16 : DType::f32;
  c.stochastic_rounding = o.weight_rounding != "nearest";
  return c;
}

TrainingLoopOptions loop_options(const TrainOptions& o, const RunStart& run,
                                 const PrecisionConfig& precision, bool log_is_terminal) {
  const bool is_array = run.h.size() > 1;
  TrainingLoopOptions loop{.eval_batch = o.eval_batch,
                           .batch = o.batch,
                           .epochs = o.epochs,
                           .max_steps = o.max_steps,
                           .lr = run.h.lr,
                           .schedule = o.schedule,
                           .optimizer = optimizer_name(o.optimizer),
                           .checkpoint = o.checkpoint,
                           .report = o.report,
                           .log_is_terminal = log_is_terminal,
                           .precision_config = precision,
                           .per_model_batch = is_array,
                           .ranks = run.ranks};
  // Model i's checkpoint: one model's as given, an array's with "-<i>" before the extension.
  loop.checkpoint_path = [path = o.checkpoint.save_path, is_array](int i) {
    return is_array ? array_checkpoint_path(path, i) : path;
  };
  if (is_array) {
    loop.array_shuffle = o.array.shuffle;
    loop.model_line_fields = {"lr", "momentum", "weight_decay", "seed"};
  }
  return loop;
}

void attach_calibration(PrecisionConfig& p, const CalibrationSource& source, const Backend& backend,
                        std::ostream& log) {
  if (p.policy != Precision::cost_aware || !source) return;
  p.calibration = source(backend, p.low, log);
}

}  // namespace campo
