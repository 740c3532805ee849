#include "train/model_array.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "datasets/loader.h"
#include "graph/builder.h"
#include "graph/checkpoint.h"
#include "runtime/timer.h"
#include "train/calibrate.h"
#include "train/device_report.h"
#include "train/interrupt.h"
#include "train/metrics_log.h"
#include "train/profiling.h"
#include "train/trainer.h"

namespace campo {

bool supports_model_array(const std::string& model, std::string* why) {
  const std::string reason = is_known_model(model) ? why_no_model_array(model) : "unknown model";
  if (reason.empty()) return true;
  if (why) {
    *why = "--array does not support " + model + " (" + reason + "); arrays train ";
    for (const std::string& m : model_array_names()) *why += m + ", ";
    *why += "and dcgan";
  }
  return false;
}

namespace {

// The per-model values of one option: `list` (N values), or `scalar` for every model.
template <typename T>
std::vector<T> per_model_values(const std::vector<T>& list, T scalar, int n, const char* option) {
  if (list.empty()) return std::vector<T>(size_t(n), scalar);
  CAMPO_CHECK(int(list.size()) == n, option, " lists ", list.size(), " values for --array ", n,
              " (give one value for every model, or a single value for all)");
  return list;
}

}  // namespace

ArrayHyperparameters array_hyperparameters(const TrainOptions& o) {
  const int n = std::max(1, o.array);
  ArrayHyperparameters h;
  h.lr = per_model_values(o.lr_list, o.lr, n, "--lr");
  h.momentum = per_model_values(o.momentum_list, o.momentum, n, "--momentum");
  h.weight_decay = per_model_values(o.weight_decay_list, o.weight_decay, n, "--weight-decay");
  h.dropout = per_model_values(o.dropout_list, o.dropout, n, "--dropout");
  h.seed = per_model_values(o.seed_list, o.seed, n, "--seed");
  return h;
}

void ArraySlices::add_model(const VariableStore& single) {
  const bool first = shapes_.empty();
  for (const std::string& name : single.names()) {
    if (first) shapes_[name] = single.at(name).shape();
    starts_[name].push_back(single.read(name));
  }
}

void ArraySlices::write_into(VariableStore& array) {
  CAMPO_CHECK(starts_.size() == array.names().size(), "internal: the array has ",
              array.names().size(), " variables, the single model ", starts_.size());
  for (const auto& [name, copies] : starts_) {
    CAMPO_CHECK(array.contains(name), "internal: the array has no variable '", name, "'");
    CAMPO_CHECK(int(copies.size()) == n_, "internal: ", copies.size(), " models' values of '", name,
                "' for an array of ", n_);
    Tensor host = array.read(name);
    const int64_t each = copies[0].numel();
    CAMPO_CHECK(host.numel() == each * n_, "internal: array variable '", name, "' holds ",
                host.numel(), " elements, not ", n_, " x ", each);
    for (int i = 0; i < n_; ++i)
      std::memcpy(static_cast<char*>(host.data()) + i * copies[size_t(i)].nbytes(),
                  copies[size_t(i)].data(), copies[size_t(i)].nbytes());
    array.write(name, host);
  }
  starts_.clear();
}

Tensor ArraySlices::read(const VariableStore& array, int i, const std::string& name) const {
  CAMPO_CHECK(i >= 0 && i < n_, "model ", i, " of an array of ", n_);
  auto it = shapes_.find(name);
  CAMPO_CHECK(it != shapes_.end(), "the model array has no variable '", name, "'");
  const Tensor all = array.read(name);
  Tensor one = Tensor::empty(it->second, all.dtype());
  std::memcpy(one.data(), static_cast<const char*>(all.data()) + i * one.nbytes(), one.nbytes());
  return one;
}

VariableStore ArraySlices::single_store(const VariableStore& array, int i, uint64_t seed) const {
  VariableStore single(seed, array.backend_ptr());
  for (const std::string& name : array.names()) {
    single.get_or_create(name, shapes_.at(name), Init::zeros(), array.kind(name));
    single.write(name, read(array, i, name));
  }
  return single;
}

Tensor stack_model_inputs(const std::vector<const Tensor*>& xs, int64_t rows) {
  const int64_t n = int64_t(xs.size());
  Shape shape = xs[0]->shape();
  const int64_t sample = shape_numel(shape) / rows;
  shape[1] *= n;
  Tensor out = Tensor::empty(shape, DType::f32);
  float* o = out.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const float* x = xs[size_t(i)]->data_as<float>();
    for (int64_t b = 0; b < rows; ++b)
      std::memcpy(o + (b * n + i) * sample, x + b * sample, size_t(sample) * sizeof(float));
  }
  return out;
}

struct ModelArraySession::EvalGraph {
  int64_t batch;
  Graph graph;
  ValueId logits;
  std::unique_ptr<Executable> exe;
};

namespace {

// A single model's optimizer: the shared settings with model i's momentum and decay.
OptimizerConfig single_optimizer(OptimizerConfig o, const ArrayHyperparameters& h, int i) {
  o.slices = 1;
  o.slice_momentum.clear();
  o.slice_weight_decay.clear();
  o.momentum = h.momentum[size_t(i)];
  o.weight_decay = h.weight_decay[size_t(i)];
  return o;
}

}  // namespace

ModelArraySession::ModelArraySession(const std::string& model, const ModelOptions& model_options,
                                     const Shape& image_shape, int64_t batch,
                                     OptimizerConfig optimizer, const ArrayHyperparameters& h,
                                     std::shared_ptr<Backend> backend,
                                     const PrecisionConfig& precision, ConvLayout conv_layout)
    : model_(model),
      model_options_(model_options),
      image_shape_(image_shape),
      batch_(batch),
      n_(h.size()),
      hyper_(h),
      conv_layout_(conv_layout),
      vars_(h.seed.empty() ? 0 : h.seed[0], std::move(backend)),  // refuses a null one
      slices_(h.size()),
      scaler_(precision.scaler) {
  CAMPO_CHECK(n_ >= 1, "a model array needs at least one model");
  for (const auto* v : {&h.lr, &h.momentum, &h.weight_decay, &h.dropout})
    CAMPO_CHECK(int(v->size()) == n_, "internal: per-model hyperparameters of ", v->size(),
                " models for an array of ", n_);
  std::string why;
  CAMPO_CHECK(supports_model_array(model, &why), why);
  CAMPO_CHECK(image_shape.size() == 3, "internal: a model array of images [C, H, W], got ",
              shape_str(image_shape));
  const bool same_dropout =
      std::all_of(h.dropout.begin(), h.dropout.end(), [&](float d) { return d == h.dropout[0]; });
  model_options_.dropout = h.dropout[0];
  if (!same_dropout) model_options_.array_dropout = h.dropout;

  // Model i's starting weights: the single model built on a store of its seed, exactly as a
  // single run creates them (the same graph, the same creation order, the same draws).
  for (int i = 0; i < n_; ++i) {
    VariableStore single(h.seed[size_t(i)], vars_.backend_ptr());
    Graph g;
    ModelOptions one = model_options_;
    one.array_dropout.clear();
    one.dropout = h.dropout[size_t(i)];
    TrainingGraphSpec spec{
        model_, one, image_shape, batch, single_optimizer(optimizer, h, i), PrecisionConfig{}};
    build_training_graph(g, single, spec);
    slices_.add_model(single);
  }

  optimizer.slices = n_;
  if (optimizer.kind == OptimizerConfig::Kind::sgd) optimizer.slice_momentum = h.momentum;
  optimizer.slice_weight_decay = h.weight_decay;
  TrainingGraphSpec spec{model_, model_options_, image_shape, batch, optimizer, precision};
  spec.array = n_;
  TrainingGraphInfo info =
      build_training_graph(train_graph_, vars_, with_profiled_costs(spec, vars_.backend_ptr()));
  loss_ = info.loss;
  model_losses_ = info.model_losses;
  all_finite_ = info.all_finite;
  summary_ = info.summary;

  slices_.write_into(vars_);

  CompileOptions co;
  co.fetches = info.fetches();
  co.seed = h.seed[0];
  co.conv_layout = conv_layout;
  train_exe_ = std::make_unique<Executable>(train_graph_, vars_, co);
  train_exe_->feed_scalar("loss_scale", 1.0f);
}

ModelArraySession::~ModelArraySession() = default;

std::vector<float> ModelArraySession::train_step(const std::vector<const Batch*>& batches,
                                                 const std::vector<float>& lr) {
  CAMPO_CHECK(int(batches.size()) == n_ && int(lr.size()) == n_, "internal: ", batches.size(),
              " batches and ", lr.size(), " learning rates for an array of ", n_);
  for (const Batch* b : batches)
    CAMPO_CHECK(b->size() == batch_ && b->images.shape() == batches[0]->images.shape(),
                "training batch of ", b->size(), " samples; the array was compiled for ", batch_);
  std::vector<const Tensor*> images;
  for (const Batch* b : batches) images.push_back(&b->images);
  train_exe_->feed("images", stack_model_inputs(images, batch_));
  std::vector<int32_t> labels(size_t(batch_ * n_));
  for (int i = 0; i < n_; ++i) {
    const int32_t* y = batches[size_t(i)]->labels.data_as<int32_t>();
    for (int64_t b = 0; b < batch_; ++b) labels[size_t(b * n_ + i)] = y[b];
  }
  train_exe_->feed("labels", Tensor::from_vector(labels, {batch_ * n_}));
  train_exe_->feed("lr", Tensor::from_vector(lr, {int64_t(n_)}));
  if (train_exe_->has_input("step")) train_exe_->feed_scalar("step", float(step_ + 1));
  if (scaler_.enabled()) {
    train_exe_->feed_scalar("loss_scale", scaler_.scale());
    train_exe_->feed_scalar("inv_loss_scale", 1.0f / scaler_.scale());
  }
  train_exe_->run();
  if (!scaler_.enabled() || scaler_.update(train_exe_->fetch_scalar(all_finite_) != 0.0f)) ++step_;
  const Tensor losses = train_exe_->fetch(model_losses_);
  const float* l = losses.data_as<float>();
  return std::vector<float>(l, l + n_);
}

ModelArraySession::EvalGraph& ModelArraySession::eval_graph(int64_t batch) {
  for (auto& e : eval_graphs_)
    if (e->batch == batch) return *e;
  auto e = std::make_unique<EvalGraph>();
  e->batch = batch;
  Builder b(e->graph, vars_);
  b.set_training(false);
  b.set_array_size(n_);
  Shape input_shape = {batch};
  input_shape.insert(input_shape.end(), image_shape_.begin(), image_shape_.end());
  input_shape[1] *= n_;
  e->logits = build_model(model_, b, b.placeholder("images", input_shape), model_options_);
  CompileOptions co;
  co.fetches = {e->logits};
  co.conv_layout = conv_layout_;
  e->exe = std::make_unique<Executable>(e->graph, vars_, co);
  eval_graphs_.push_back(std::move(e));
  return *eval_graphs_.back();
}

std::vector<double> ModelArraySession::evaluate(DataLoader& loader) {
  std::vector<int64_t> correct(size_t(n_), 0);
  int64_t total = 0;
  loader.start_epoch(0);
  Batch batch;
  while (loader.next(batch)) {
    if (const int signal = interrupt_signal())
      throw Interrupted(signal, "during evaluation", "", "evaluation saves nothing");
    EvalGraph& e = eval_graph(batch.size());
    e.exe->feed("images", stack_model_inputs(std::vector<const Tensor*>(size_t(n_), &batch.images),
                                             batch.size()));
    e.exe->run();
    const Tensor logits = e.exe->fetch(e.logits);  // [rows, n * classes]
    const int64_t classes = logits.dim(1) / n_;
    const float* p = logits.data_as<float>();
    const int32_t* y = batch.labels.data_as<int32_t>();
    for (int64_t r = 0; r < batch.size(); ++r)
      for (int i = 0; i < n_; ++i) {
        const float* row = p + (r * n_ + i) * classes;
        correct[size_t(i)] += (std::max_element(row, row + classes) - row) == y[r];
      }
    total += batch.size();
  }
  CAMPO_CHECK(total > 0, "evaluation set is empty");
  std::vector<double> accuracy;
  for (int64_t c : correct) accuracy.push_back(double(c) / double(total));
  return accuracy;
}

Tensor ModelArraySession::read_model_variable(int i, const std::string& name) const {
  return slices_.read(vars_, i, name);
}

void ModelArraySession::save_model(int i, const std::string& path, int64_t epoch,
                                   int64_t position_in_epoch, const std::string& optimizer) const {
  const VariableStore single = slices_.single_store(vars_, i, hyper_.seed[size_t(i)]);
  CheckpointMeta meta;
  meta.model = model_;
  meta.step = step_;
  meta.epoch = epoch;
  meta.position_in_epoch = position_in_epoch;
  meta.optimizer = optimizer;
  meta.extra["array_index"] = std::to_string(i);
  meta.extra["array_size"] = std::to_string(n_);
  nlohmann::json hp = {{"lr", hyper_.lr[size_t(i)]},
                       {"momentum", hyper_.momentum[size_t(i)]},
                       {"weight_decay", hyper_.weight_decay[size_t(i)]},
                       {"dropout", hyper_.dropout[size_t(i)]},
                       {"seed", hyper_.seed[size_t(i)]}};
  meta.extra["hyperparameters"] = hp.dump();
  save_checkpoint(path, single, meta);
}

int64_t ModelArraySession::parameter_count() const {
  return vars_.count_elements(VariableKind::parameter) / n_;
}

void ModelArraySession::set_profiling(bool on) {
  profile_.reset();
  profile_.attach(*train_exe_, train_graph_, on);
}

std::vector<std::pair<std::string, double>> ModelArraySession::profile_by_op() const {
  return profile_.by_op();
}

namespace {

std::string loss_range(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  std::ostringstream out;
  out << std::fixed << std::setprecision(4) << *lo << ".." << *hi;
  return out.str();
}

}  // namespace

ArrayTrainResult train_array(const TrainOptions& o, std::ostream& log, bool log_is_terminal) {
  validate(o);
  CAMPO_CHECK(o.array >= 2, "internal: train_array with --array ", o.array);
  // The run's backend, once, before any work (as train()'s).
  const std::shared_ptr<Backend> backend = backend_for(o.device);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  Timer wall;
  const ArrayHyperparameters h = array_hyperparameters(o);
  const int n = h.size();
  TrainingData data = open_training_data(o, log);
  OptimizerConfig ocfg;
  ocfg.kind = o.optimizer == "adam" ? OptimizerConfig::Kind::adam : OptimizerConfig::Kind::sgd;
  ocfg.nesterov = o.nesterov;
  PrecisionConfig pcfg = precision_config(o);
  attach_calibration(pcfg, o.calibration, log);
  const DeviceReport device_report(backend);
  ModelArraySession session(o.model, data.model_options, data.train->image_shape(), o.batch, ocfg,
                            h, backend, pcfg, o.conv_layout);
  if (o.profile) session.set_profiling(true);

  // shared: one order (the first seed's) for every model; independent: model i's own.
  const bool independent = o.array_shuffle == "independent";
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (int i = 0; i < (independent ? n : 1); ++i) {
    LoaderOptions lopts;
    lopts.batch_size = o.batch;
    lopts.shuffle = true;
    lopts.drop_last = true;
    lopts.seed = h.seed[size_t(i)];
    loaders.push_back(std::make_unique<DataLoader>(data.train, lopts));
  }
  LoaderOptions eopts;
  eopts.batch_size = std::min<int64_t>(o.eval_batch, data.test->size());
  eopts.shuffle = false;
  DataLoader test_loader(data.test, eopts);

  const std::string mode = o.progress == "auto" ? (log_is_terminal ? "bar" : "lines") : o.progress;
  const int64_t per_epoch = loaders[0]->batches_per_epoch();
  CAMPO_CHECK(per_epoch > 0, "no full batch of ", o.batch, " in ", data.train->size(), " samples");
  const int64_t total_steps =
      o.max_steps > 0 ? std::min<int64_t>(o.max_steps, per_epoch * o.epochs) : per_epoch * o.epochs;
  log << "campo: training an array of " << n << " " << o.model << " models ("
      << session.parameter_count() << " parameters each) as one fused step on "
      << data.train->name() << ", " << data.train->size() << " samples, batch " << o.batch
      << " per model, " << total_steps << " steps, precision " << o.precision << ", "
      << o.array_shuffle << " batches";
  if (pcfg.policy != Precision::fp32)
    log << " (" << dtype_name(pcfg.low) << ": " << session.precision_summary().low_nodes
        << " nodes low precision, " << session.precision_summary().casts.casts << " casts)";
  log << "\n";
  log.flush();

  auto save_all = [&](int epoch, int64_t position, ArrayTrainResult* r) {
    for (int i = 0; i < n; ++i) {
      const std::string path = array_checkpoint_path(o.save_path, i);
      session.save_model(i, path, epoch, position, o.optimizer);
      if (r) r->checkpoints.push_back(path);
    }
  };

  InterruptScope interrupt_scope;
  ArrayTrainResult r;
  r.losses.assign(size_t(n), {});
  const size_t recent = 50;
  Timer train_timer;
  double last_print = -1;
  int64_t step = 0;
  std::vector<Batch> batches(loaders.size());
  std::vector<const Batch*> per_model(static_cast<size_t>(n));
  std::vector<float> lr(static_cast<size_t>(n));
  TrainOptions schedule = o;  // learning_rate_at with each model's --lr
  auto recent_means = [&] {
    std::vector<double> m;
    for (const auto& l : r.losses) {
      const size_t k = std::min(recent, l.size());
      double sum = 0;
      for (size_t j = l.size() - k; j < l.size(); ++j) sum += l[j];
      m.push_back(k ? sum / double(k) : 0.0);
    }
    return m;
  };
  // --metrics, --tensorboard (their paths checked by validate()), every model's values.
  MetricsLog metrics(
      {.metrics_path = o.metrics_path, .tensorboard_dir = o.tensorboard_dir, .models = n});
  for (int epoch = 0; epoch < o.epochs && step < total_steps; ++epoch) {
    for (auto& l : loaders) l->start_epoch(epoch);
    int64_t in_epoch = 0;
    while (step < total_steps) {
      bool more = true;
      for (size_t k = 0; k < loaders.size(); ++k) more = more && loaders[k]->next(batches[k]);
      if (!more) break;
      for (int i = 0; i < n; ++i) {
        per_model[size_t(i)] = &batches[independent ? size_t(i) : 0];
        schedule.lr = h.lr[size_t(i)];
        lr[size_t(i)] = learning_rate_at(schedule, step, total_steps, per_epoch);
      }
      const std::vector<float> losses = session.train_step(per_model, lr);
      for (int i = 0; i < n; ++i) {
        CAMPO_CHECK(std::isfinite(losses[size_t(i)]), "training diverged: model ", i, "'s loss is ",
                    losses[size_t(i)], " at step ", step + 1, " (its --lr ", h.lr[size_t(i)],
                    "; try a smaller one)");
        r.losses[size_t(i)].push_back(losses[size_t(i)]);
      }
      ++step;
      ++in_epoch;
      if (!o.save_path.empty() && o.save_every > 0 && step % o.save_every == 0)
        save_all(epoch, in_epoch, nullptr);
      if (const int signal = interrupt_signal()) {
        if (!o.save_path.empty()) {
          const bool finished = in_epoch == per_epoch;
          save_all(finished ? epoch + 1 : epoch, finished ? 0 : in_epoch, nullptr);
        }
        if (mode == "bar") log << "\n";
        log.flush();
        throw Interrupted(signal, "at step " + std::to_string(step),
                          o.save_path.empty() ? "" : array_checkpoint_path(o.save_path, 0),
                          "no --save given");
      }
      const double elapsed = train_timer.seconds();
      const double rate = double(step * o.batch * n) / std::max(elapsed, 1e-9);
      const bool last = step == total_steps || in_epoch == per_epoch;
      if (mode == "bar" && (elapsed - last_print >= 0.1 || last)) {
        last_print = elapsed;
        log << "\repoch " << epoch + 1 << "/" << o.epochs << " " << in_epoch << "/" << per_epoch
            << "  loss " << loss_range(recent_means()) << " (" << n << " models)  " << std::fixed
            << std::setprecision(0) << rate << " samples/s   ";
        if (last) log << "\n";
        log.flush();
      } else if (mode == "lines") {
        if (is_logged_step(in_epoch, per_epoch, last)) {
          log << "epoch " << epoch + 1 << "/" << o.epochs << " step " << in_epoch << "/"
              << per_epoch << " loss " << loss_range(recent_means()) << " samples/s " << std::fixed
              << std::setprecision(0) << rate << "\n";
          log.flush();
        }
      }
      if (is_logged_step(in_epoch, per_epoch, last))
        metrics.log_step(
            {.step = step,
             .epoch = epoch + 1,
             .losses = recent_means(),
             .lrs = lr,
             .loss_scale = session.scaler().enabled() ? session.scaler().scale() : 1.0f,
             .skipped_steps = session.scaler().skipped_steps(),
             .samples_per_sec = rate});
    }
    if (!o.save_path.empty()) {
      const bool finished = in_epoch == per_epoch;
      save_all(finished ? epoch + 1 : epoch, finished ? 0 : in_epoch, nullptr);
    }
  }
  const double train_seconds = train_timer.seconds();
  r.steps = step;
  r.samples_per_sec = double(step * o.batch * n) / std::max(train_seconds, 1e-9);
  for (double m : recent_means()) r.final_loss.push_back(m);
  if (!o.save_path.empty())
    for (int i = 0; i < n; ++i) r.checkpoints.push_back(array_checkpoint_path(o.save_path, i));
  try {
    r.test_accuracy = session.evaluate(test_loader);
  } catch (const Interrupted& e) {
    throw Interrupted(e.signal(), "during evaluation after step " + std::to_string(step),
                      o.save_path.empty() ? "" : array_checkpoint_path(o.save_path, 0),
                      "no --save given");
  }
  metrics.log_eval(step, r.test_accuracy);
  if (o.profile) print_profile(session.profile_by_op(), step, log);
  nlohmann::json models = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    nlohmann::json m = {{"index", i},
                        {"lr", h.lr[size_t(i)]},
                        {"momentum", h.momentum[size_t(i)]},
                        {"weight_decay", h.weight_decay[size_t(i)]},
                        {"dropout", h.dropout[size_t(i)]},
                        {"seed", h.seed[size_t(i)]},
                        {"final_loss", r.final_loss[size_t(i)]},
                        {"test_accuracy", r.test_accuracy[size_t(i)]}};
    if (!r.checkpoints.empty()) m["checkpoint"] = r.checkpoints[size_t(i)];
    models.push_back(m);
    if (mode != "none")
      log << std::defaultfloat << std::setprecision(6) << "model " << i << ": lr "
          << h.lr[size_t(i)] << " momentum " << h.momentum[size_t(i)] << " weight_decay "
          << h.weight_decay[size_t(i)] << " seed " << h.seed[size_t(i)] << "  final loss "
          << std::fixed << std::setprecision(4) << r.final_loss[size_t(i)] << "  test accuracy "
          << r.test_accuracy[size_t(i)]
          << (r.checkpoints.empty() ? "" : "  -> " + r.checkpoints[size_t(i)]) << "\n";
  }
  nlohmann::json j = {
      {"event", "result"},
      {"model", o.model},
      {"dataset", o.dataset},
      {"precision", o.precision},
      {"low_precision", pcfg.policy == Precision::fp32 ? "none" : dtype_name(pcfg.low)},
      {"casts", session.precision_summary().casts.casts},
      {"array", n},
      {"array_shuffle", o.array_shuffle},
      {"epochs", o.epochs},
      {"steps", r.steps},
      {"batch", o.batch},
      {"parameters", session.parameter_count()},
      {"samples_per_sec", r.samples_per_sec},
      {"wall_seconds", wall.seconds()},
      {"models", models}};
  device_report.add_to(j);
  log << j.dump() << "\n";
  log.flush();
  return r;
}

std::string array_checkpoint_path(const std::string& path, int i) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string stem = has_ext ? path.substr(0, dot) : path;
  const std::string ext = has_ext ? path.substr(dot) : "";
  return stem + "-" + std::to_string(i) + ext;
}

}  // namespace campo
