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

ArrayHyperparameters array_hyperparameters(const ArrayOptions& a,
                                           const ArrayHyperparameters& single) {
  CAMPO_CHECK(single.size() == 1, "internal: ", single.size(), " single-model values");
  const int n = std::max(1, a.size);
  ArrayHyperparameters h;
  h.lr = per_model_values(a.lr, single.lr[0], n, "--lr");
  h.momentum = per_model_values(a.momentum, single.momentum[0], n, "--momentum");
  h.weight_decay = per_model_values(a.weight_decay, single.weight_decay[0], n, "--weight-decay");
  h.dropout = per_model_values(a.dropout, single.dropout[0], n, "--dropout");
  h.seed = per_model_values(a.seed, single.seed[0], n, "--seed");
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
                                   int64_t position_in_epoch, const std::string& optimizer) {
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

}  // namespace

std::vector<std::vector<float>> ModelArraySession::step_models(
    const std::vector<const Batch*>& batches, const std::vector<float>& lr) {
  std::vector<std::vector<float>> out;
  for (float loss : train_step(batches, lr)) out.push_back({loss});
  return out;
}

ArrayTrainResult train_array(const TrainOptions& o, std::ostream& log, bool log_is_terminal) {
  validate(o);
  CAMPO_CHECK(o.array.size >= 2, "internal: train_array with --array ", o.array.size);
  // The run's backend, once, before any work (as train()'s).
  const std::shared_ptr<Backend> backend = backend_for(o.device);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  Timer wall;
  const ArrayHyperparameters h = array_hyperparameters(
      o.array, {{o.lr}, {o.momentum}, {o.weight_decay}, {o.dropout}, {o.seed}});
  const int n = h.size();
  TrainingData data = open_training_data(o, log);
  OptimizerConfig ocfg = optimizer_config(o);  // the per-model values come from h
  PrecisionConfig pcfg = precision_config(o);
  attach_calibration(pcfg, o.calibration, o.device.type, log);
  const DeviceReport device_report(backend);
  ModelArraySession session(o.model, data.model_options, data.train->image_shape(), o.batch, ocfg,
                            h, backend, pcfg, o.conv_layout);

  TrainingLoopOptions loop = loop_options(o, log_is_terminal);
  // shared: one order (the first seed's) for every model; independent: model i's own.
  const bool independent = o.array.shuffle == "independent";
  for (int i = 0; i < (independent ? n : 1); ++i) {
    loop.train.push_back(data.train);
    loop.shuffle_seeds.push_back(h.seed[size_t(i)]);
  }
  loop.test = data.test;
  loop.lr = h.lr;
  loop.checkpoint_path = [&](int i) { return array_checkpoint_path(o.checkpoint.save_path, i); };
  loop.what = "an array of " + std::to_string(n) + " " + o.model + " models (" +
              std::to_string(session.parameter_count()) + " parameters each) as one fused step";
  loop.precision_config = pcfg;
  loop.per_model_batch = true;
  loop.array_shuffle = o.array.shuffle;
  loop.result = {
      {"model", o.model}, {"dataset", o.dataset}, {"parameters", session.parameter_count()}};
  loop.model_fields = [&](int i) {
    return nlohmann::ordered_json{{"lr", h.lr[size_t(i)]},
                                  {"momentum", h.momentum[size_t(i)]},
                                  {"weight_decay", h.weight_decay[size_t(i)]},
                                  {"dropout", h.dropout[size_t(i)]},
                                  {"seed", h.seed[size_t(i)]}};
  };
  loop.model_line_fields = {"lr", "momentum", "weight_decay", "seed"};
  const TrainingLoopResult run = run_training(session, loop, device_report, wall, log);
  ArrayTrainResult r;
  for (int i = 0; i < n; ++i) {
    r.test_accuracy.push_back(run.test_accuracy[size_t(i)]);
    r.final_loss.push_back(run.final_values[size_t(i)][0]);
    r.losses.push_back(run.values[size_t(i)][0]);
  }
  r.checkpoints = run.checkpoints;
  r.samples_per_sec = run.samples_per_sec;
  r.steps = run.steps;
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
