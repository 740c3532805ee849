#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <thread>

#include "datasets/loader.h"
#include "datasets/registry.h"
#include "datasets/text.h"
#include "datasets/tokenizer.h"
#include "graph/checkpoint.h"
#include "runtime/cpu_backend.h"
#include "runtime/file_check.h"
#include "runtime/memory_info.h"
#include "runtime/timer.h"
#include "train/device_report.h"
#include "train/interrupt.h"
#include "train/model_array.h"
#include "train/numerics_watch.h"
#include "train/policy_guard.h"
#include "train/profiling.h"

namespace campo {

namespace {

// Labels that are not kIgnoreLabel (the tokens a masked-language-model batch predicts).
int64_t count_targets(const Tensor& labels) {
  const int32_t* y = labels.data_as<int32_t>();
  return std::count_if(y, y + labels.numel(), [](int32_t v) { return v != kIgnoreLabel; });
}

// Each model's correct arg-max predictions of logits [rows, models * C] (row r: every
// model's logits of sample r, model i's in block i) against labels (rows of them, any
// shape), and how many labels were scored: those that are not kIgnoreLabel.
std::pair<std::vector<int64_t>, int64_t> count_correct(const Tensor& logits, const Tensor& labels,
                                                       int models) {
  const int64_t rows = logits.dim(0), c = logits.dim(1) / models;
  CAMPO_CHECK(labels.numel() == rows, "internal: ", rows, " rows of logits for ", labels.numel(),
              " labels");
  const float* p = logits.data_as<float>();
  const int32_t* y = labels.data_as<int32_t>();
  std::vector<int64_t> correct(size_t(models), 0);
  int64_t scored = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (y[r] == kIgnoreLabel) continue;
    ++scored;
    for (int i = 0; i < models; ++i) {
      const float* row = p + (r * models + i) * c;
      // An argmax over inf or NaN is no prediction: an accuracy from it would be a number
      // computed from garbage (huge or negative-variance weights, a diverged checkpoint).
      CAMPO_CHECK(std::all_of(row, row + c, [](float v) { return std::isfinite(v); }),
                  "evaluation: the model's outputs are not finite (inf or NaN): its weights or "
                  "batch-norm statistics do not describe a working model (a diverged or corrupt "
                  "checkpoint?)");
      correct[size_t(i)] += (std::max_element(row, row + c) - row) == y[r];
    }
  }
  return {correct, scored};
}

// The model options a data set implies: its images' channels and size, its classes (a
// text data set's: the vocabulary).
ModelOptions model_options_for(const Dataset& data, float dropout, const std::string& bert) {
  ModelOptions m;
  m.num_classes = data.num_classes();
  m.dropout = dropout;
  m.bert_config = bert;
  const Shape s = data.image_shape();
  if (data.input_dtype() == DType::f32 && s.size() == 3) {
    m.in_channels = int(s[0]);
    m.image_size = int(s[1]);
  }
  return m;
}

// --dataset text:PATH: the sequence options and the vocabulary: --vocab's file, the one a
// resumed checkpoint holds (they must agree when both are given), or one trained now on the
// text before the held-out part (the first 90% of the file, cut at a line end).
void set_text_options(DatasetOptions& d, const TrainOptions& o, std::ostream& log) {
  d.seq_len = o.seq_len;
  d.mask_prob = o.mask_prob;
  std::shared_ptr<const WordPieceTokenizer> from_resume;
  if (!o.checkpoint.resume_path.empty()) {
    const std::map<std::string, std::string> meta =
        read_safetensors_metadata(o.checkpoint.resume_path);
    auto it = meta.find("vocab");
    CAMPO_CHECK(it != meta.end(), "--resume checkpoint ", o.checkpoint.resume_path,
                " holds no vocabulary (it was not written by a text run)");
    from_resume =
        std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_json(it->second));
  }
  if (!o.vocab_path.empty()) {
    d.tokenizer =
        std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::load(o.vocab_path));
    CAMPO_CHECK(!from_resume || from_resume->fingerprint() == d.tokenizer->fingerprint(),
                "--vocab ", o.vocab_path, " is not the vocabulary of --resume checkpoint ",
                o.checkpoint.resume_path, " (leave --vocab out to use the checkpoint's)");
    return;
  }
  if (from_resume) {
    d.tokenizer = from_resume;
    return;
  }
  const std::string text = read_text_dataset(o.dataset, o.data_dir);
  size_t cut = text.size() * 9 / 10;
  const size_t line_end = text.rfind('\n', cut);
  if (line_end != std::string::npos && line_end > 0) cut = line_end + 1;
  Timer t;
  d.tokenizer = std::make_shared<const WordPieceTokenizer>(
      WordPieceTokenizer::train(std::string_view(text).substr(0, cut), o.vocab_size));
  log << "campo: vocabulary of " << d.tokenizer->vocab_size() << " pieces trained on " << cut
      << " bytes of " << o.dataset << " in " << std::fixed << std::setprecision(1) << t.seconds()
      << " s\n";
}

}  // namespace

// The evaluation of a model, or of an array of N (their inputs stacked), over a store: one
// inference graph per batch size, built on first use (the first one creates the model's
// variables in the store), and each model's correct predictions over a loader's epoch.
class Evaluator {
 public:
  // `arena`: shared with the training step's executable (evaluation runs between steps);
  // null: its own.
  Evaluator(std::string model, ModelOptions options, Shape sample_shape, DType input_dtype,
            int models, ConvLayout layout, VariableStore& vars,
            std::shared_ptr<SharedArena> arena = nullptr)
      : arena_(std::move(arena)),
        model_(std::move(model)),
        options_(std::move(options)),
        sample_shape_(std::move(sample_shape)),
        input_dtype_(input_dtype),
        n_(models),
        layout_(layout),
        vars_(vars) {}

  // The graph of `rows` samples, its logits [rows, N * classes].
  std::pair<Executable*, ValueId> graph(int64_t rows) {
    for (Entry& e : graphs_)
      if (e.rows == rows) return {e.exe.get(), e.logits};
    Entry& e = graphs_.emplace_back();
    e.rows = rows;
    e.graph = std::make_unique<Graph>();
    Builder b(*e.graph, vars_);
    b.set_training(false);
    b.set_array_size(n_);
    Shape shape = {rows};
    shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
    shape[1] *= n_;
    e.logits = build_model(model_, b, b.placeholder(input_placeholder(model_), shape, input_dtype_),
                           options_);
    // bf16 weights of pure low-precision training: read as stored, cast for the f32 layers.
    if (retype_variables_as_stored(*e.graph, vars_)) insert_casts(*e.graph);
    CompileOptions co;
    co.fetches = {e.logits};
    co.conv_layout = layout_;
    if (!arena_) arena_ = std::make_shared<SharedArena>(vars_.backend_ptr());
    co.arena = arena_;  // the graphs of each batch size take turns too
    e.exe = std::make_unique<Executable>(*e.graph, vars_, co);
    return {e.exe.get(), e.logits};
  }

  // Each model's correct predictions over the loader's epoch (every model sees the same
  // batches) and how many labels were scored. SIGINT or SIGTERM ends it with Interrupted.
  std::pair<std::vector<int64_t>, int64_t> run(DataLoader& loader) {
    std::vector<int64_t> correct(size_t(n_), 0);
    int64_t total = 0;
    loader.start_epoch(0);
    Batch batch;
    while (loader.next(batch)) {
      if (const int signal = interrupt_signal())
        throw Interrupted(signal, "during evaluation", "", "evaluation saves nothing");
      const auto [exe, logits] = graph(batch.size());
      exe->feed(
          input_placeholder(model_),
          stack_model_inputs(std::vector<const Tensor*>(size_t(n_), &batch.images), batch.size()));
      exe->run();
      const auto [hits, count] = count_correct(exe->fetch(logits), batch.labels, n_);
      for (int i = 0; i < n_; ++i) correct[size_t(i)] += hits[size_t(i)];
      total += count;
    }
    return {correct, total};
  }

  std::vector<const Executable*> executables() const {
    std::vector<const Executable*> out;
    for (const Entry& e : graphs_) out.push_back(e.exe.get());
    return out;
  }

 private:
  struct Entry {
    int64_t rows = 0;
    std::unique_ptr<Graph> graph;
    ValueId logits = kNoValue;
    std::unique_ptr<Executable> exe;
  };
  std::shared_ptr<SharedArena> arena_;
  std::string model_;
  ModelOptions options_;
  Shape sample_shape_;
  DType input_dtype_;
  int n_;
  ConvLayout layout_;
  VariableStore& vars_;
  std::vector<Entry> graphs_;
};

TrainingSession::TrainingSession(const std::string& model, const ModelOptions& model_options,
                                 const Shape& image_shape, int64_t batch,
                                 const OptimizerConfig& optimizer, uint64_t seed,
                                 std::shared_ptr<Backend> backend, const PrecisionConfig& precision,
                                 ConvLayout conv_layout)
    : TrainingSession(model, model_options, image_shape, batch, optimizer,
                      one_model(optimizer, seed, model_options.dropout), std::move(backend),
                      precision, conv_layout) {}

TrainingSession::TrainingSession(const std::string& model, const ModelOptions& model_options,
                                 const Shape& image_shape, int64_t batch, OptimizerConfig optimizer,
                                 const ArrayHyperparameters& h, std::shared_ptr<Backend> backend,
                                 const PrecisionConfig& precision, ConvLayout conv_layout,
                                 const DataParallelRun& data_parallel)
    : model_(model),
      model_options_(model_options),
      image_shape_(image_shape),
      batch_(batch),
      n_(h.size()),
      hyper_(h),
      conv_layout_(conv_layout),
      vars_(h.seed.empty() ? 0 : h.seed[0], std::move(backend)),  // refuses a null backend
      slices_(h.size()),
      scaler_(precision.scaler),
      data_parallel_(data_parallel) {
  h.check();
  model_options_.dropout = h.dropout[0];
  CAMPO_CHECK(n_ == 1 || !optimizer.stores_low_precision(),
              "--master-weights none and --optimizer-state bf16 do not support model arrays yet "
              "(--array): train the models one by one");
  if (n_ > 1) {
    std::string why;
    CAMPO_CHECK(supports_model_array(model, &why), why);
    CAMPO_CHECK(image_shape.size() == 3, "internal: a model array of images [C, H, W], got ",
                shape_str(image_shape));
    if (std::any_of(h.dropout.begin(), h.dropout.end(), [&](float d) { return d != h.dropout[0]; }))
      model_options_.array_dropout = h.dropout;
    // Model i's starting weights: the single model built on a store of its seed, exactly as
    // a single run creates them (the same graph, the same creation order, the same draws).
    for (int i = 0; i < n_; ++i) {
      VariableStore single(h.seed[size_t(i)], vars_.backend_ptr());
      Graph g;
      ModelOptions one = model_options_;
      one.array_dropout.clear();
      one.dropout = h.dropout[size_t(i)];
      build_training_graph(g, single,
                           {model_, one, image_shape, batch, model_optimizer(optimizer, h, i), {}});
      slices_.add_model(single);
    }
  }
  TrainingGraphSpec spec{
      model_, model_options_, image_shape, batch, array_optimizer(optimizer, h), precision};
  spec.array = n_;
  if (data_parallel_.on())
    spec.data_parallel = {data_parallel_.size(), data_parallel_.bucket_bytes,
                          data_parallel_.comm.get()};
  info_ = build_training_graph(train_graph_, vars_, with_profiled_costs(spec, vars_.backend_ptr()));
  if (n_ > 1) slices_.write_into(vars_);
  if (data_parallel_.on()) broadcast_variables(*data_parallel_.comm, vars_);
  CompileOptions co;
  co.fetches = info_.fetches();
  co.seed = h.seed[0];
  co.conv_layout = conv_layout;
  co.communicator = data_parallel_.comm;
  train_exe_ = std::make_unique<Executable>(train_graph_, vars_, co);
  train_exe_->feed_scalar("loss_scale", 1.0f);
}

TrainingSession::~TrainingSession() = default;

void TrainingSession::record_numerics(const std::shared_ptr<NumericsRecorder>& recorder) {
  watch_numerics(train_graph_, train_exe_->schedule(), *recorder);
  train_exe_->context().numerics = recorder;
}

void TrainingSession::save_model(int i, const std::string& path, int64_t epoch, int64_t position,
                                 const std::string& optimizer) {
  CAMPO_CHECK(i >= 0 && i < n_, "internal: model ", i, " of an array of ", n_);
  CheckpointMeta meta;
  meta.model = model_;
  meta.step = step_;
  meta.epoch = epoch;
  meta.position_in_epoch = position;
  meta.optimizer = optimizer;
  // Shortest text that reads back as the same float (std::to_string's six decimals would
  // turn a scale below 5e-7 into "0.000000").
  // The scale is saved only by a run that scales dynamically: a run resumed from it with
  // dynamic scaling continues it; one resumed from a run without starts from its own
  // --loss-scale-init (an fp32 run's "scale" of 1 would otherwise become the fp16 run's).
  if (scaler_.enabled()) {
    char scale[32];
    *std::to_chars(scale, scale + sizeof scale - 1, scaler_.scale()).ptr = '\0';
    meta.extra["loss_scale"] = scale;
    meta.extra["loss_scale_clean_steps"] = std::to_string(scaler_.clean_steps());
  }
  meta.extra["loss_scale_skipped_steps"] = std::to_string(scaler_.skipped_steps());
  meta.extra["executor_step"] = std::to_string(train_exe_->context().step);
  // The samples of a step of every rank together: where a position resumes (N ranks' run
  // on M ranks whose ranks x --batch is the same).
  meta.extra["global_batch"] = std::to_string(batch_ * data_parallel_.size());
  for (const auto& [key, value] : checkpoint_extra_) meta.extra[key] = value;
  if (n_ == 1) {
    meta.rng_states["dropout"] = rng_state_to_string(train_exe_->context().rng.state());
    save_checkpoint(path, vars_, meta);
    return;
  }
  // The array's dropout draws are not a single run's: the model's checkpoint has no RNG state.
  slices_.save_model(path, vars_, i, hyper_, meta);
}

TrainingSession::Position TrainingSession::restore(const std::string& path,
                                                   const std::string& optimizer) {
  CAMPO_CHECK(n_ == 1, "an array of ", n_,
              " models cannot be restored; restore each model's checkpoint into a single run");
  CheckpointMeta meta =
      load_checkpoint(path, vars_, LoadOptions{.allow_missing_optimizer_state = true});
  CAMPO_CHECK(meta.model.empty() || meta.model == model_, "checkpoint ", path, " holds model '",
              meta.model, "', not '", model_, "'");
  CAMPO_CHECK(meta.optimizer.empty() || meta.optimizer == optimizer, "checkpoint ", path,
              " was trained with optimizer '", meta.optimizer, "', not '", optimizer, "'");
  // Every field is checked before any is applied. The scale's range keeps it and its
  // reciprocal (the unscale factor) normal f32 numbers.
  const int64_t executor_step =
      checkpoint_extra_int(path, meta, "executor_step", 0, int64_t(1) << 53, meta.step);
  const double scale =
      checkpoint_extra_float(path, meta, "loss_scale", 0x1p-126, 0x1p126, scaler_.scale());
  const int64_t clean = checkpoint_extra_int(path, meta, "loss_scale_clean_steps", 0,
                                             std::numeric_limits<int>::max(), 0);
  const int64_t skipped =
      checkpoint_extra_int(path, meta, "loss_scale_skipped_steps", 0, int64_t(1) << 53, 0);
  const int64_t global_batch = batch_ * data_parallel_.size();
  const int64_t saved_batch =
      checkpoint_extra_int(path, meta, "global_batch", 1, int64_t(1) << 40, global_batch);
  CAMPO_CHECK(saved_batch == global_batch, "checkpoint ", path, " was written by steps of ",
              saved_batch, " samples (ranks x --batch); this run's take ", global_batch, " (",
              data_parallel_.size(), " x ", batch_,
              "): resume it with ranks x --batch = ", saved_batch);
  step_ = meta.step;
  auto rng = meta.rng_states.find("dropout");
  if (rng != meta.rng_states.end())
    train_exe_->context().rng.set_state(rng_state_from_string(rng->second));
  train_exe_->context().step = executor_step;
  if (scaler_.enabled()) scaler_.set_state(float(scale), int(clean), skipped);
  if (data_parallel_.on()) broadcast_variables(*data_parallel_.comm, vars_);
  return {meta.epoch, meta.position_in_epoch, skipped};
}

Tensor TrainingSession::read_model_variable(int i, const std::string& name) const {
  CAMPO_CHECK(i >= 0 && i < n_, "model ", i, " of an array of ", n_);
  return n_ == 1 ? vars_.read(name) : slices_.read(vars_, i, name);
}

MemoryReport TrainingSession::memory() const {
  std::vector<const Executable*> graphs = {train_exe_.get()};
  if (evaluator_)
    for (const Executable* e : evaluator_->executables()) graphs.push_back(e);
  return memory_report(vars_, graphs);
}

void TrainingSession::set_profiling(bool on) {
  if (on) profile_.reset();
  profile_.attach(*train_exe_, train_graph_, on);
}

std::vector<std::pair<std::string, Tensor>> TrainingSession::host_inputs(
    const std::vector<const Batch*>& batches) const {
  CAMPO_CHECK(int(batches.size()) == n_, "internal: ", batches.size(), " batches for an array of ",
              n_);
  std::vector<const Tensor*> images;
  for (const Batch* b : batches) {
    CAMPO_CHECK(b->size() == batch_ && b->images.shape() == batches[0]->images.shape(),
                "training batch of ", b->size(), " samples; the graph was compiled for ", batch_);
    images.push_back(&b->images);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back(input_placeholder(model_), stack_model_inputs(images, batch_));
  if (n_ == 1) {
    out.emplace_back("labels", batches[0]->labels);
  } else {  // row b * N + i: model i's label of sample b
    std::vector<int32_t> labels(size_t(batch_ * n_));
    for (int i = 0; i < n_; ++i) {
      const int32_t* y = batches[size_t(i)]->labels.data_as<int32_t>();
      for (int64_t b = 0; b < batch_; ++b) labels[size_t(b * n_ + i)] = y[b];
    }
    out.emplace_back("labels", Tensor::from_vector(labels, {batch_ * n_}));
  }
  return out;
}

void TrainingSession::feed(const std::vector<const Batch*>& batches, const std::vector<float>& lr) {
  CAMPO_CHECK(int(batches.size()) == n_ && int(lr.size()) == n_, "internal: ", batches.size(),
              " batches and ", lr.size(), " learning rates for an array of ", n_);
  // Uploaded during the step before (train/prefetch.h), or copied from the host now.
  if (!prefetch_.land(*train_exe_, batches))
    for (const auto& [name, host] : host_inputs(batches)) train_exe_->feed(name, host);
  if (n_ == 1)
    train_exe_->feed_scalar("lr", lr[0]);
  else
    train_exe_->feed("lr", Tensor::from_vector(lr, {int64_t(n_)}));
  if (train_exe_->has_input("inv_num_targets")) {  // token models (one model)
    const int64_t targets = count_targets(batches[0]->labels);
    CAMPO_CHECK(targets > 0, "a training batch has no token to predict (every label is ",
                kIgnoreLabel, ")");
    train_exe_->feed_scalar("inv_num_targets", 1.0f / float(targets));
  }
}

void TrainingSession::upload_next(const std::vector<const Batch*>& next) {
  if (!next.empty()) prefetch_.upload(*train_exe_, host_inputs(next), next);
}

void TrainingSession::run(const std::vector<const Batch*>& next) {
  if (train_exe_->has_input("step")) train_exe_->feed_scalar("step", float(step_ + 1));
  if (!scaler_.enabled()) {
    train_exe_->run();
    upload_next(next);
    ++step_;
    return;
  }
  train_exe_->feed_scalar("loss_scale", scaler_.scale());
  train_exe_->feed_scalar("inv_loss_scale", 1.0f / scaler_.scale());
  // One uninterrupted step: the updates skip themselves on the device when a gradient
  // overflowed; the host reads the flag afterwards to move the scale.
  train_exe_->run();
  upload_next(next);
  if (scaler_.update(train_exe_->fetch_scalar(info_.all_finite) != 0.0f)) ++step_;
}

std::vector<float> TrainingSession::train_step(const std::vector<const Batch*>& batches,
                                               const std::vector<float>& lr,
                                               const std::vector<const Batch*>& next) {
  feed(batches, lr);
  run(next);
  std::vector<float> losses;
  if (n_ == 1) {
    losses = {train_exe_->fetch_scalar(info_.loss)};
  } else {
    const Tensor t = train_exe_->fetch(info_.model_losses);
    losses.assign(t.data_as<float>(), t.data_as<float>() + n_);
  }
  if (data_parallel_.on()) average_over_ranks(*data_parallel_.comm, losses.data(), n_);
  return losses;
}

float TrainingSession::train_step(const Batch& batch, float lr) {
  CAMPO_CHECK(n_ == 1, "internal: one batch for an array of ", n_, " models");
  return train_step(std::vector<const Batch*>{&batch}, std::vector<float>{lr})[0];
}

std::vector<std::vector<float>> TrainingSession::step_models(
    const std::vector<const Batch*>& batches, const std::vector<float>& lr,
    const std::vector<const Batch*>& next) {
  std::vector<std::vector<float>> out;
  for (float loss : train_step(batches, lr, next)) out.push_back({loss});
  return out;
}

std::vector<double> TrainingSession::evaluate_models(DataLoader& loader) {
  if (!evaluator_) {
    const DType input = model_input(model_) == ModelInput::tokens ? DType::i32 : DType::f32;
    evaluator_ = std::make_unique<Evaluator>(model_, model_options_, image_shape_, input, n_,
                                             conv_layout_, vars_, train_exe_->arena());
  }
  auto [correct, total] = evaluator_->run(loader);
  if (data_parallel_.on()) {  // each rank evaluated its shard of the loader's epoch
    data_parallel_.comm->all_reduce(correct.data(), n_, DType::i64, ReduceOp::sum);
    data_parallel_.comm->all_reduce(&total, 1, DType::i64, ReduceOp::sum);
  }
  CAMPO_CHECK(total > 0, "evaluation set is empty (or has no token to predict)");
  std::vector<double> accuracy;
  for (int64_t c : correct) accuracy.push_back(double(c) / double(total));
  return accuracy;
}

double TrainingSession::evaluate(DataLoader& loader) {
  CAMPO_CHECK(n_ == 1, "internal: evaluate of an array of ", n_, " models (evaluate_models)");
  return evaluate_models(loader)[0];
}

std::vector<StepGraph> TrainingSession::step_graphs() {
  return {{"training step", "", &train_graph_, info_.fetches(), info_.costs, info_.cost_plan,
           info_.f16_costs, training_timing_inputs(model_options_.num_classes)}};
}

Batch TrainingSession::random_batch(Rng& rng) const {
  // Random inputs (token models: ids) and labels; every token position is a target.
  const bool tokens = model_input(model_) == ModelInput::tokens;
  const int64_t classes = model_options_.num_classes;
  Shape shape = {batch_};
  shape.insert(shape.end(), image_shape_.begin(), image_shape_.end());
  Batch b;
  b.images = Tensor::empty(shape, tokens ? DType::i32 : DType::f32);
  b.labels = Tensor::empty(tokens ? shape : Shape{batch_}, DType::i32);
  for (int64_t i = 0; i < b.images.numel(); ++i) {
    if (tokens)
      b.images.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(classes)));
    else
      b.images.data_as<float>()[i] = rng.normal();
  }
  for (int64_t i = 0; i < b.labels.numel(); ++i)
    b.labels.data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(classes)));
  return b;
}

std::string dump_training_graph(const TrainOptions& o, const std::string& format) {
  validate(o);
  CAMPO_CHECK(step_graph_count(o.model) == 1, "campo graph shows one training graph; ", o.model,
              " trains two step graphs: see them with campo plan --model ", o.model, " --dot FILE");
  check_classifier_training_options(o);
  CAMPO_CHECK(format == "text" || format == "dot", "--format must be text or dot, got '", format,
              "'");
  DatasetOptions dopts;
  dopts.data_dir = o.data_dir;
  if (is_text_dataset(o.dataset)) set_text_options(dopts, o, std::cerr);
  std::shared_ptr<const Dataset> data = open_dataset(o.dataset, "test", dopts);
  const ModelOptions mopts = model_options_for(*data, o.dropout, o.bert_config);
  // The graph as built for the CPU (its text does not depend on where it would run).
  TrainingSession session(o.model, mopts, data->image_shape(), o.batch, optimizer_config(o), o.seed,
                          default_cpu_backend());
  return format == "dot" ? session.train_graph().to_dot() : session.train_graph().to_text();
}

double evaluate_checkpoint(const EvalOptions& o, std::ostream& log) {
  CAMPO_CHECK(!o.checkpoint.empty(), "--checkpoint is required");
  CAMPO_CHECK(o.batch > 0, "--batch must be positive, got ", o.batch);
  CAMPO_CHECK(o.limit >= 0, "--limit must be a positive number of samples (or 0: all), got ",
              o.limit);
  CAMPO_CHECK(o.image_size >= 0, "--image-size must be positive (or 0: native), got ",
              o.image_size);
  CAMPO_CHECK(o.channels >= 0, "--channels must be 1 or 3 (or 0: native), got ", o.channels);
  // The device first: one line where this build or machine lacks it, before files are read.
  // Evaluation compares nothing bit for bit: no --deterministic.
  const std::shared_ptr<Backend> backend = backend_for(o.device, o.cuda_graph, false);
  std::map<std::string, std::string> meta = read_safetensors_metadata(o.checkpoint);
  std::string model = o.model;
  if (model.empty() && meta.count("campo.model")) model = meta.at("campo.model");
  CAMPO_CHECK(!model.empty(), "checkpoint ", o.checkpoint,
              " does not name its model: pass --model");
  CAMPO_CHECK(is_known_model(model), "unknown model '", model, "'");
  CAMPO_CHECK(has_accuracy(model), model,
              " is a GAN: it has no accuracy to evaluate (its sample grids are written as it "
              "trains, --samples-dir)");
  check_model_fits_data(model, o.dataset);
  DatasetOptions dopts;
  dopts.data_dir = o.data_dir;
  dopts.image_size = o.image_size;
  dopts.channels = o.channels;
  dopts.seed = o.seed;
  std::string bert = "mini";
  if (is_text_dataset(o.dataset)) {
    // The vocabulary and the size the model was trained with, from the checkpoint.
    CAMPO_CHECK(meta.count("vocab") && meta.count("bert_config"), "checkpoint ", o.checkpoint,
                " holds no vocabulary (was it written by campo train on a text data set?)");
    dopts.tokenizer =
        std::make_shared<const WordPieceTokenizer>(WordPieceTokenizer::from_json(meta.at("vocab")));
    dopts.seq_len = o.seq_len;
    dopts.mask_prob = o.mask_prob;
    bert = meta.at("bert_config");
  }
  std::shared_ptr<const Dataset> test_set = open_dataset(o.dataset, "test", dopts);
  if (o.limit > 0) test_set = dataset_view(test_set, o.limit);
  const ModelOptions mopts = model_options_for(*test_set, 0.0f, bert);
  const DeviceReport device_report(backend);
  VariableStore vars(0, backend);
  LoaderOptions lopts;
  lopts.batch_size = std::min<int64_t>(o.batch, test_set->size());
  lopts.shuffle = false;
  DataLoader loader(test_set, lopts);
  Evaluator evaluator(model, mopts, test_set->image_shape(), test_set->input_dtype(), 1,
                      ConvLayout::blocked, vars);
  (void)evaluator.graph(lopts.batch_size);  // creates the variables the checkpoint fills
  load_checkpoint(o.checkpoint, vars, LoadOptions{.allow_missing_optimizer_state = true});
  const auto [correct, total] = evaluator.run(loader);
  // An accuracy over nothing would read as 0 correct (the text data sets mask at least one
  // token per sequence, so this guards what the data sets promise).
  CAMPO_CHECK(total > 0, test_set->name(), " has no ",
              dopts.tokenizer ? "masked token to predict" : "sample", ": no accuracy to report");
  const double accuracy = double(correct[0]) / double(total);
  log << (dopts.tokenizer ? "masked-token accuracy " : "test accuracy ") << std::fixed
      << std::setprecision(4) << accuracy << " on " << total
      << (dopts.tokenizer ? " masked tokens of " : " samples of ") << test_set->name() << "\n";
  nlohmann::json j = {{"event", "eval"},      {"model", model},
                      {"dataset", o.dataset}, {"checkpoint", o.checkpoint},
                      {"samples", total},     {"test_accuracy", accuracy}};
  device_report.add_to(j);
  log << j.dump() << "\n";
  return accuracy;
}

TrainingData open_training_data(const TrainOptions& o, std::ostream& log) {
  TrainingData d;
  DatasetOptions& dopts = d.options;
  dopts.data_dir = o.data_dir;
  dopts.seed = o.seed;
  dopts.image_size = o.image_size;
  dopts.channels = o.channels;
  const bool image_data = o.dataset == "cifar10" || o.dataset.rfind("folder", 0) == 0;
  if (is_text_dataset(o.dataset)) {
    set_text_options(dopts, o, log);
    if (!o.save_vocab_path.empty()) dopts.tokenizer->save(o.save_vocab_path);
  }
  if (image_data) {
    dopts.augment = o.augment;
    dopts.resize = o.resize;
    if (o.padding >= 0) dopts.padding = o.padding;
    dopts.skip_bad = o.skip_bad;
    dopts.holdout = o.holdout;
  } else {
    CAMPO_CHECK(!o.augment && o.resize == 0 && o.padding < 0 && !o.skip_bad && o.holdout == 0,
                "--augment, --resize, --padding, --skip-bad and --holdout apply to cifar10 and "
                "folder data sets only");
  }
  d.train = open_dataset(o.dataset, "train", dopts);
  DatasetOptions test_opts = dopts;
  if (image_data && o.augment.value_or(false))
    test_opts.augment = false;  // never augment evaluation
  d.test = open_dataset(o.dataset, "test", test_opts);
  check_splits_match(*d.train, *d.test);  // before training, not at the first evaluation
  if (o.train_limit > 0) d.train = dataset_view(d.train, o.train_limit);
  if (o.test_limit > 0) d.test = dataset_view(d.test, o.test_limit);
  CAMPO_CHECK(d.train->size() >= o.batch, "--batch ", o.batch, " is larger than the ",
              d.train->size(), " training samples of ", d.train->name());
  d.model_options = model_options_for(*d.train, o.dropout, o.bert_config);
  return d;
}

namespace {

// What every rank of a data-parallel run must have alike, beyond its training graph.
std::string run_fingerprint(const TrainOptions& o, const TrainingData& data) {
  std::ostringstream s;
  s << o.model << ' ' << o.dataset << ' ' << data.train->size() << ' ' << data.test->size() << ' '
    << o.epochs << ' ' << o.max_steps << ' ' << o.batch << ' ' << o.lr << ' '
    << lr_schedule_name(o.schedule.kind) << ' ' << o.schedule.step_epochs << ' ' << o.schedule.gamma
    << ' ' << o.schedule.warmup_steps << ' ' << optimizer_name(o.optimizer) << ' ' << o.momentum
    << ' ' << o.nesterov << ' ' << o.weight_decay << ' ' << o.dropout << ' ' << o.seed << ' '
    << precision_name(o.precision) << ' ' << o.mixed.low_precision << ' ' << o.mixed.loss_scale
    << ' ' << o.mixed.loss_scale_init << ' ' << o.data_parallel.bucket_mb << ' ' << o.array.size
    << ' ' << o.checkpoint.resume_path;
  for (float x : o.array.lr) s << ' ' << x;
  return s.str();
}

}  // namespace

void check_classifier_training_options(const TrainOptions& o) {
  CAMPO_CHECK(o.eval_batch > 0, "--eval-batch must be positive, got ", o.eval_batch);
  check_model_fits_data(o.model, o.dataset);
  if (is_text_dataset(o.dataset)) {
    (void)bert_config(o.bert_config);  // names the sizes when unknown
    CAMPO_CHECK(o.seq_len >= 8 && o.seq_len <= 512,
                "--seq-len must be in 8..512 (BERT's 512 positions), got ", o.seq_len);
    CAMPO_CHECK(o.vocab_size >= 64 && o.vocab_size <= 1000000,
                "--vocab-size must be in 64..1000000, got ", o.vocab_size);
    CAMPO_CHECK(o.mask_prob > 0 && o.mask_prob < 1, "--mask-prob must be in (0, 1), got ",
                o.mask_prob);
    if (!o.vocab_path.empty()) require_input_file(o.vocab_path, "--vocab vocabulary");
    if (!o.save_vocab_path.empty()) require_output_file(o.save_vocab_path, "--save-vocab file");
  }
  CAMPO_CHECK(o.resize >= 0, "--resize must be positive (or 0: --image-size), got ", o.resize);
  CAMPO_CHECK(o.padding >= -1, "--padding must be zero or positive, got ", o.padding);
}

TrainResult train(const TrainOptions& o, std::ostream& all_log, bool log_is_terminal,
                  const CalibrationSource& calibration) {
  check_classifier_training_options(o);
  Timer wall;
  const RunStart start = start_run(o, all_log);
  const std::shared_ptr<Backend>& backend = start.backend;
  const std::shared_ptr<Communicator>& ranks = start.ranks;
  std::ostream& log = *start.log;
  const ArrayHyperparameters& h = start.h;
  const int n = h.size();
  const bool is_array = n > 1;
  TrainingData data = open_training_data(o, log);
  PrecisionConfig pcfg = precision_config(o);
  SessionSpec spec;
  spec.graph.model = o.model;
  spec.graph.model_options = data.model_options;
  spec.graph.image_shape = data.train->image_shape();
  spec.graph.batch = o.batch;
  spec.graph.optimizer = optimizer_config(o);
  spec.graph.precision = pcfg;
  spec.graph.array = n;
  // --precision-policy on the model's graph, before a calibration or any step.
  if (const std::string note = check_precision_policy(spec.graph, o.device.type); !note.empty())
    log << "campo: " << note << "\n";
  attach_calibration(pcfg, calibration, *backend, log);
  spec.graph.precision = pcfg;
  const DeviceReport device_report(backend);
  if (ranks) check_ranks_agree(*ranks, run_fingerprint(o, data));
  const DataParallelRun data_parallel = data_parallel_run(ranks, o.data_parallel);
  spec.models = h;
  spec.conv_layout = o.conv_layout;
  spec.data_parallel = data_parallel;
  // cost-aware: its plan against fp32's and amp's, measured; the run takes the faster one.
  const SessionFactory timing_session = [&](const SessionSpec& s) {
    return std::make_unique<TrainingSession>(
        s.graph.model, s.graph.model_options, s.graph.image_shape, s.graph.batch,
        s.graph.optimizer, s.models, backend, s.graph.precision, s.conv_layout, s.data_parallel);
  };
  const GuardVerdict guard = build_with_batch_advice(
      o.batch, [&] { return guard_run(spec, timing_session, o.guard ? "" : "--no-guard", log); });
  apply_guard(spec, guard);
  pcfg = spec.graph.precision;
  TrainingSession session = build_with_batch_advice(o.batch, [&] {
    return TrainingSession(o.model, data.model_options, data.train->image_shape(), o.batch,
                           spec.graph.optimizer, h, backend, pcfg, o.conv_layout, data_parallel);
  });
  if (ranks) check_ranks_agree(*ranks, session.train_graph().to_text());
  const bool text = data.options.tokenizer != nullptr;
  if (text) {  // what campo eval and --resume need to read the text the same way
    session.set_checkpoint_extra("vocab", data.options.tokenizer->to_json());
    session.set_checkpoint_extra("bert_config", o.bert_config);
  }
  TrainingLoopOptions loop = loop_options(o, start, pcfg, log_is_terminal);
  if (o.report.numerics != NumericsScope::off) {
    loop.numerics = std::make_shared<NumericsRecorder>(o.report.numerics);
    session.record_numerics(loop.numerics);
  }
  // shared: one order (the first seed's) for every model; independent: model i's own.
  for (int i = 0; i < (o.array.shuffle == ArrayShuffle::independent ? n : 1); ++i) {
    loop.train.push_back(data.train);
    loop.shuffle_seeds.push_back(h.seed[size_t(i)]);
  }
  loop.test = data.test;
  const std::string parameters = std::to_string(session.parameter_count()) + " parameters";
  loop.what = is_array ? "an array of " + std::to_string(n) + " " + o.model + " models (" +
                             parameters + " each) as one fused step"
                       : o.model + " (" + parameters + ")";
  if (is_array) loop.model_fields = [&](int i) { return h.of_model(i); };
  if (text) {
    loop.accuracy_label = "masked-token accuracy";
    loop.eval_unit = "sequences of";
  }
  loop.result = {
      {"model", o.model}, {"dataset", o.dataset}, {"parameters", session.parameter_count()}};
  if (ranks) loop.result["gradient_bucket_bytes"] = session.gradient_bucket_bytes();
  if (guard.reported()) loop.result["guard"] = guard.json();
  if (spec.graph.optimizer.stores_low_precision()) {  // pure low-precision training
    loop.result["master_weights"] = o.master_weights;
    loop.result["optimizer_state"] = o.optimizer_state;
    loop.result["weight_rounding"] = o.weight_rounding.empty() ? "stochastic" : o.weight_rounding;
  }
  if (const std::string& path = o.checkpoint.resume_path; !path.empty()) {
    const TrainingSession::Position pos = session.restore(path, optimizer_name(o.optimizer));
    loop.resumed = Resumed{.path = path,
                           .epoch = pos.epoch,
                           .position_in_epoch = pos.position_in_epoch,
                           .steps = session.step(),
                           .skipped_steps = pos.skipped_steps};
  }
  const TrainingLoopResult run = run_training(session, loop, device_report, wall, log);
  TrainResult r;
  r.test_accuracy = run.test_accuracy[0];
  r.final_loss = run.final_values[0][0];
  r.samples_per_sec = run.samples_per_sec;
  r.wall_seconds = run.wall_seconds;
  r.steps = run.steps;
  r.parameters = session.parameter_count();
  r.losses = run.values[0][0];
  r.profile = run.profile;
  return r;
}

}  // namespace campo
