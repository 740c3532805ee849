#include "train/gan_trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "datasets/loader.h"
#include "datasets/registry.h"
#include "datasets/synthetic.h"
#include "graph/autodiff.h"
#include "graph/checkpoint.h"
#include "runtime/atomic_file.h"
#include "runtime/file_check.h"
#include "runtime/timer.h"
#include "train/calibrate.h"
#include "train/interrupt.h"
#include "train/profiling.h"
#include "train/progress.h"
#include "train/trainer.h"

// The only stb_image_write implementation in campo; static so that no other translation
// unit (or a system libstb) can clash with it.
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace campo {

namespace {

// A view of a data set that maps every pixel x to tanh(x) (synthetic data, ~N(0, 1)
// pixels, into (-1, 1)) and/or keeps only the first `limit` samples.
class GanDataset final : public Dataset {
 public:
  GanDataset(std::shared_ptr<const Dataset> base, int64_t limit, bool apply_tanh)
      : base_(std::move(base)),
        size_(limit > 0 ? std::min(limit, base_->size()) : base_->size()),
        apply_tanh_(apply_tanh) {}
  int64_t size() const override { return size_; }
  Shape image_shape() const override { return base_->image_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  std::string name() const override {
    return size_ < base_->size() ? base_->name() + "[:" + std::to_string(size_) + "]"
                                 : base_->name();
  }
  void get(int64_t index, float* image, int32_t* label) const override {
    check_index(index);
    base_->get(index, image, label);
    if (apply_tanh_)
      for (int64_t i = 0, n = image_numel(); i < n; ++i) image[i] = std::tanh(image[i]);
  }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t size_;
  bool apply_tanh_;
};

ValueId variable_value(const Graph& g, const std::string& name) {
  NodeId id = g.find_node(name);
  CAMPO_CHECK(id >= 0, "internal: no variable '", name, "' in the graph");
  return g.node(id).outputs[0];
}

// Mean over the last `window` values of a history.
double tail_mean(const std::vector<float>& v, size_t window = 50) {
  if (v.empty()) return 0.0;
  const size_t n = std::min(window, v.size());
  double s = 0;
  for (size_t i = v.size() - n; i < v.size(); ++i) s += v[i];
  return s / double(n);
}

}  // namespace

// ---- GanSession ----

namespace {

// A host f32 tensor of `shape` holding `value` everywhere.
Tensor filled(const Shape& shape, float value) {
  Tensor t = Tensor::empty(shape, DType::f32);
  std::fill_n(t.data_as<float>(), t.numel(), value);
  return t;
}

// The gradients of `loss` (seeded by a "loss_scale" placeholder) with respect to the
// parameters of one network (`net`: netG or netD), and their optimizer updates.
void append_net_update(Builder& b, const Graph& g, const VariableStore& vars, ValueId loss,
                       const char* net, const OptimizerConfig& optimizer) {
  const std::vector<std::string> params = dcgan_parameter_names(vars, net);
  std::vector<ValueId> values;
  for (const auto& p : params) values.push_back(variable_value(g, p));
  ValueId seed_grad = b.placeholder("loss_scale", {});
  append_optimizer(b, params, append_gradients(b, loss, seed_grad, values), optimizer);
}

struct DStep {
  ValueId loss, d_x, d_g_z1;
  std::vector<ValueId> fetches() const { return {loss, d_x, d_g_z1}; }
};
// D step: loss_D = BCE(D(x), 1) + BCE(D(G(z)), 0); update D only.
DStep build_d_step(Graph& g, VariableStore& vars, const DcganOptions& model, int64_t batch,
                   const OptimizerConfig& optimizer) {
  Builder b(g, vars);
  b.set_training(true);
  ValueId real =
      b.placeholder("images", {batch, model.channels, model.image_size, model.image_size});
  ValueId z = b.placeholder("z", {batch, model.nz, 1, 1});
  ValueId ones = b.placeholder("real_label", {batch});
  ValueId zeros = b.placeholder("fake_label", {batch});
  ValueId fake = build_dcgan_generator(b, z, model);
  ValueId d_real = build_dcgan_discriminator(b, real, model);
  ValueId d_fake = build_dcgan_discriminator(b, fake, model);
  DStep d;
  d.loss = b.add(b.mean(b.sigmoid_cross_entropy(d_real, ones)),
                 b.mean(b.sigmoid_cross_entropy(d_fake, zeros)));
  d.d_x = b.mean(b.sigmoid(d_real));
  d.d_g_z1 = b.mean(b.sigmoid(d_fake));
  append_net_update(b, g, vars, d.loss, kDiscriminatorScope, optimizer);
  return d;
}

struct GStep {
  ValueId loss, d_g_z2;
  std::vector<ValueId> fetches() const { return {loss, d_g_z2}; }
};
// G step: loss_G = BCE(D(G(z)), 1); update G only.
GStep build_g_step(Graph& g, VariableStore& vars, const DcganOptions& model, int64_t batch,
                   const OptimizerConfig& optimizer) {
  Builder b(g, vars);
  b.set_training(true);
  ValueId z = b.placeholder("z", {batch, model.nz, 1, 1});
  ValueId ones = b.placeholder("real_label", {batch});
  ValueId d_fake = build_dcgan_discriminator(b, build_dcgan_generator(b, z, model), model);
  GStep s;
  s.loss = b.mean(b.sigmoid_cross_entropy(d_fake, ones));
  s.d_g_z2 = b.mean(b.sigmoid(d_fake));
  append_net_update(b, g, vars, s.loss, kGeneratorScope, optimizer);
  return s;
}

// cost-aware: the costs of a step graph built by `build`, which it calls on scratch
// variables so that the session's weights and optimizer state are not touched by the timed
// steps; null for the other policies.
std::shared_ptr<const CostTable> gan_step_costs(
    const PrecisionConfig& precision,
    const std::function<std::vector<ValueId>(Graph&, VariableStore&)>& build) {
  if (precision.policy != Precision::cost_aware) return nullptr;
  CAMPO_CHECK(!precision.costs,
              "dcgan: cost-aware profiles its two step graphs itself; a "
              "fixed cost table describes one graph and cannot be used");
  Graph scratch;
  VariableStore scratch_vars(1);
  const std::vector<ValueId> fetches = build(scratch, scratch_vars);
  TimingInputs inputs;
  inputs.constants = {{"lr", 0.0f},
                      {"step", 1.0f},
                      {"loss_scale", 1.0f},
                      {"real_label", 1.0f},
                      {"fake_label", 0.0f}};
  return std::make_shared<const CostTable>(
      graph_costs(scratch, scratch_vars, fetches, inputs, precision));
}

}  // namespace

GanSession::GanSession(const DcganOptions& model, int64_t batch, const OptimizerConfig& optimizer,
                       uint64_t seed, int64_t num_samples, const PrecisionConfig& precision,
                       ConvLayout conv_layout)
    : model_(model), batch_(batch), vars_(seed), noise_rng_(mix_seed(seed, 0x6e6f697365)) {
  check_dcgan_options(model);
  CAMPO_CHECK(!precision.scaler.enabled,
              "dynamic loss scaling is not supported for dcgan yet: use --low-precision bf16 or "
              "--loss-scale none");
  CAMPO_CHECK(batch > 0, "GAN batch must be positive, got ", batch);
  CAMPO_CHECK(num_samples > 0, "GAN sample count must be positive, got ", num_samples);
  {
    const DStep d = build_d_step(d_graph_, vars_, model, batch, optimizer);
    loss_d_ = d.loss;
    d_x_ = d.d_x;
    d_g_z1_ = d.d_g_z1;
    d_costs_ = gan_step_costs(precision, [&](Graph& g, VariableStore& v) {
      return build_d_step(g, v, model, batch, optimizer).fetches();
    });
    d_policy_ = apply_policy(d_graph_, precision, d_costs_.get());
    CompileOptions co;
    co.fetches = d_fetches();
    co.seed = seed;
    co.conv_layout = conv_layout;
    d_exe_ = std::make_unique<Executable>(d_graph_, vars_, co);
    d_exe_->feed_scalar("loss_scale", 1.0f);
    d_exe_->feed("real_label", filled({batch}, 1.0f));
    d_exe_->feed("fake_label", filled({batch}, 0.0f));
  }
  {
    const GStep s = build_g_step(g_graph_, vars_, model, batch, optimizer);
    loss_g_ = s.loss;
    d_g_z2_ = s.d_g_z2;
    g_costs_ = gan_step_costs(precision, [&](Graph& g, VariableStore& v) {
      return build_g_step(g, v, model, batch, optimizer).fetches();
    });
    g_policy_ = apply_policy(g_graph_, precision, g_costs_.get());
    CompileOptions co;
    co.fetches = g_fetches();
    co.seed = seed + 1;
    co.conv_layout = conv_layout;
    g_exe_ = std::make_unique<Executable>(g_graph_, vars_, co);
    g_exe_->feed_scalar("loss_scale", 1.0f);
    g_exe_->feed("real_label", filled({batch}, 1.0f));
  }
  {  // Samples of the fixed noise, G in training mode (as the example).
    Builder b(sample_graph_, vars_);
    b.set_training(true);
    ValueId z = b.placeholder("z", {num_samples, model.nz, 1, 1});
    samples_ = build_dcgan_generator(b, z, model);
    CompileOptions co;
    co.fetches = {samples_};
    co.conv_layout = conv_layout;
    sample_exe_ = std::make_unique<Executable>(sample_graph_, vars_, co);
    Rng fixed(mix_seed(seed, 0x6669786564));
    Tensor fz = Tensor::empty(sample_exe_->input_shape("z"), DType::f32);
    float* p = fz.data_as<float>();
    for (int64_t i = 0; i < fz.numel(); ++i) p[i] = fixed.normal();
    sample_exe_->feed("z", fz);
  }
}

GanSession::~GanSession() = default;

void GanSession::save(const std::string& path, int64_t epoch, int64_t position_in_epoch,
                      const std::string& optimizer) {
  CheckpointMeta meta;
  meta.model = "dcgan";
  meta.step = iterations_;
  meta.epoch = epoch;
  meta.position_in_epoch = position_in_epoch;
  meta.optimizer = optimizer;
  meta.rng_states["noise"] = rng_state_to_string(noise_rng_.state());
  meta.rng_states["d_step"] = rng_state_to_string(d_exe_->context().rng.state());
  meta.rng_states["g_step"] = rng_state_to_string(g_exe_->context().rng.state());
  meta.extra["d_executor_step"] = std::to_string(d_exe_->context().step);
  meta.extra["g_executor_step"] = std::to_string(g_exe_->context().step);
  save_checkpoint(path, vars_, meta);
}

GanSession::Position GanSession::restore(const std::string& path, const std::string& optimizer) {
  // Everything is checked before anything changes: the metadata from the header first
  // (a classifier's checkpoint fails here, not on a missing tensor), then load_checkpoint
  // validates and stages every tensor before it writes any.
  const std::map<std::string, std::string> header = read_safetensors_metadata(path);
  const auto model = header.find("campo.model");
  CAMPO_CHECK(model != header.end() && model->second == "dcgan", "checkpoint ", path,
              " holds model '", model == header.end() ? std::string() : model->second,
              "', not 'dcgan' (resume a dcgan run from a checkpoint its --save wrote)");
  const auto trained = header.find("campo.optimizer");
  CAMPO_CHECK(trained != header.end() && trained->second == optimizer, "checkpoint ", path,
              " was trained with optimizer '",
              trained == header.end() ? std::string() : trained->second, "', not '", optimizer,
              "'");
  for (const char* name : {"noise", "d_step", "g_step"})
    CAMPO_CHECK(header.count(std::string("campo.rng.") + name), "checkpoint ", path,
                " has no metadata 'campo.rng.", name,
                "' (it was not written by a dcgan run's --save)");
  const Rng::State noise = rng_state_from_string(header.at("campo.rng.noise"));
  const Rng::State d_rng = rng_state_from_string(header.at("campo.rng.d_step"));
  const Rng::State g_rng = rng_state_from_string(header.at("campo.rng.g_step"));
  CheckpointMeta counters;  // the executor steps, read as load_checkpoint's extra fields
  for (const char* key : {"d_executor_step", "g_executor_step"})
    if (auto it = header.find(key); it != header.end()) counters.extra[key] = it->second;
  const int64_t most = int64_t(1) << 53;
  const int64_t d_step = checkpoint_extra_int(path, counters, "d_executor_step", 0, most, 0);
  const int64_t g_step = checkpoint_extra_int(path, counters, "g_executor_step", 0, most, 0);
  // Validates the whole file and changes the variables only when all of it loads.
  const CheckpointMeta meta = load_checkpoint(path, vars_);
  iterations_ = meta.step;
  noise_rng_.set_state(noise);
  d_exe_->context().rng.set_state(d_rng);
  g_exe_->context().rng.set_state(g_rng);
  d_exe_->context().step = d_step;
  g_exe_->context().step = g_step;
  return {meta.epoch, meta.position_in_epoch};
}

int64_t GanSession::generator_parameters() const {
  int64_t n = 0;
  for (const auto& name : dcgan_parameter_names(vars_, kGeneratorScope))
    n += vars_.at(name).numel();
  return n;
}

int64_t GanSession::discriminator_parameters() const {
  int64_t n = 0;
  for (const auto& name : dcgan_parameter_names(vars_, kDiscriminatorScope))
    n += vars_.at(name).numel();
  return n;
}

void GanSession::set_profiling(bool on) {
  op_ms_.assign(size_t(OpKind::kCount), 0.0);
  using Pair = std::pair<Executable*, const Graph*>;
  for (auto [exe, graph] : {Pair{d_exe_.get(), &d_graph_}, Pair{g_exe_.get(), &g_graph_}}) {
    exe->set_timing(on);
    if (on)
      exe->set_node_hook(
          [this, g = graph](NodeId id, double ms) { op_ms_[size_t(g->node(id).kind)] += ms; });
    else
      exe->set_node_hook(nullptr);
  }
}

std::vector<std::pair<std::string, double>> GanSession::profile_by_op() const {
  std::vector<std::pair<std::string, double>> out;
  for (size_t k = 0; k < op_ms_.size(); ++k)
    if (op_ms_[k] > 0) out.push_back({op_name(OpKind(k)), op_ms_[k]});
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second > b.second; });
  return out;
}

GanSession::StepStats GanSession::step(const Tensor& real, float lr) {
  const Shape expected = {batch_, model_.channels, model_.image_size, model_.image_size};
  CAMPO_CHECK(real.shape() == expected, "GAN step: real images have shape ",
              shape_str(real.shape()), ", the graphs were compiled for ", shape_str(expected));
  ++iterations_;
  const float t = float(iterations_);

  Tensor z = Tensor::empty(d_exe_->input_shape("z"), DType::f32);
  float* zp = z.data_as<float>();
  for (int64_t i = 0; i < z.numel(); ++i) zp[i] = noise_rng_.normal();
  d_exe_->feed("z", z);
  d_exe_->feed("images", real);
  d_exe_->feed_scalar("lr", lr);
  if (d_exe_->has_input("step")) d_exe_->feed_scalar("step", t);  // Adam's bias correction
  d_exe_->run();
  StepStats s;
  s.loss_d = d_exe_->fetch_scalar(loss_d_);
  s.d_x = d_exe_->fetch_scalar(d_x_);
  s.d_g_z1 = d_exe_->fetch_scalar(d_g_z1_);

  g_exe_->feed("z", z);
  g_exe_->feed_scalar("lr", lr);
  if (g_exe_->has_input("step")) g_exe_->feed_scalar("step", t);  // Adam's bias correction
  g_exe_->run();
  s.loss_g = g_exe_->fetch_scalar(loss_g_);
  s.d_g_z2 = g_exe_->fetch_scalar(d_g_z2_);
  return s;
}

Tensor GanSession::generate_samples() {
  sample_exe_->run();
  return sample_exe_->fetch(samples_);
}

// ---- PNG output ----

void write_png_grid(const std::string& path, const Tensor& images, int nrow, int padding) {
  CAMPO_CHECK(images.rank() == 4 && images.dtype() == DType::f32,
              "image grid: expected f32 images [N, C, H, W], got ", dtype_name(images.dtype()), " ",
              shape_str(images.shape()));
  const int64_t n = images.dim(0), c = images.dim(1), h = images.dim(2), w = images.dim(3);
  CAMPO_CHECK(c == 1 || c == 3, "image grid: images need 1 or 3 channels, got ", c);
  CAMPO_CHECK(n > 0 && nrow > 0 && padding >= 0, "image grid: bad layout (", n, " images, ", nrow,
              " per row, padding ", padding, ")");
  const int64_t cols = std::min<int64_t>(nrow, n), rows = (n + cols - 1) / cols;
  const int64_t gw = cols * (w + padding) + padding, gh = rows * (h + padding) + padding;
  std::vector<uint8_t> pixels(size_t(gw * gh * c), 0);
  const float* src = images.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y0 = (i / cols) * (h + padding) + padding;
    const int64_t x0 = (i % cols) * (w + padding) + padding;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const float v = src[((i * c + ch) * h + y) * w + x];
          const float u = std::isfinite(v) ? std::clamp((v + 1.0f) * 0.5f, 0.0f, 1.0f) : 0.0f;
          pixels[size_t(((y0 + y) * gw + x0 + x) * c + ch)] = uint8_t(std::lround(u * 255.0f));
        }
  }
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(size));
  };
  CAMPO_CHECK(stbi_write_png_to_func(append, &png, int(gw), int(gh), int(c), pixels.data(),
                                     int(gw * c)) != 0,
              "cannot encode the PNG image '", path, "'");
  write_file_atomically(path, png, "PNG image");
}

// ---- the training loop ----

void validate_gan(const GanOptions& o) {
  CAMPO_CHECK(o.dataset == "fashion-mnist" || o.dataset == "mnist" || o.dataset == "synthetic",
              "unknown GAN dataset '", o.dataset, "' (expected fashion-mnist, mnist or synthetic)");
  CAMPO_CHECK(o.image_size == 32 || o.image_size == 64, "--image-size must be 32 or 64, got ",
              o.image_size);
  CAMPO_CHECK(o.channels == 1 || o.channels == 3, "--channels must be 1 or 3, got ", o.channels);
  CAMPO_CHECK(o.epochs > 0, "--epochs must be positive, got ", o.epochs);
  CAMPO_CHECK(o.steps >= 0, "--steps must be zero (full epochs) or positive, got ", o.steps);
  CAMPO_CHECK(o.batch > 0, "--batch must be a positive number of samples, got ", o.batch);
  CAMPO_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a positive learning rate, got ", o.lr);
  CAMPO_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
              "Adam betas must lie in [0, 1), got beta1 ", o.beta1, ", beta2 ", o.beta2);
  CAMPO_CHECK(o.nz > 0 && o.ngf > 0 && o.ndf > 0, "--nz, --ngf and --ndf must be positive, got ",
              o.nz, ", ", o.ngf, ", ", o.ndf);
  CAMPO_CHECK(o.train_limit >= 0, "--limit-train must be >= 0, got ", o.train_limit);
  CAMPO_CHECK(
      o.progress == "auto" || o.progress == "bar" || o.progress == "lines" || o.progress == "none",
      "--progress must be auto, bar, lines or none, got '", o.progress, "'");
  check_threads(o.threads);
  CAMPO_CHECK(o.weight_decay >= 0 && std::isfinite(o.weight_decay),
              "--weight-decay must be non-negative, got ", o.weight_decay);
  CAMPO_CHECK(o.optimizer == "adam" || o.optimizer == "sgd", "unknown optimizer '", o.optimizer,
              "' (expected adam or sgd)");
  CAMPO_CHECK(o.momentum >= 0 && o.momentum < 1, "--momentum must be in [0, 1), got ", o.momentum);
  CAMPO_CHECK(!o.nesterov || o.optimizer == "sgd",
              "--nesterov applies to --optimizer sgd only, not ", o.optimizer);
  CAMPO_CHECK(o.lr_schedule == "constant" || o.lr_schedule == "step" || o.lr_schedule == "cosine",
              "--lr-schedule must be constant, step or cosine, got '", o.lr_schedule, "'");
  CAMPO_CHECK(o.lr_step_epochs > 0, "--lr-step-epochs must be positive, got ", o.lr_step_epochs);
  CAMPO_CHECK(o.lr_gamma > 0 && o.lr_gamma <= 1, "--lr-gamma must be in (0, 1], got ", o.lr_gamma);
  CAMPO_CHECK(o.warmup_steps >= 0, "--warmup-steps must be >= 0, got ", o.warmup_steps);
  CAMPO_CHECK(o.save_every >= 0, "--save-every must be a positive number of steps, got ",
              o.save_every);
  CAMPO_CHECK(o.save_every == 0 || !o.save_path.empty(),
              "--save-every needs --save (the checkpoint path to write every ", o.save_every,
              " steps)");
  check_training_device(o.device);
  // Outputs and inputs before any work is spent (a calibration or a training run).
  if (!o.samples_dir.empty()) require_output_directory(o.samples_dir, "--samples-dir");
  if (!o.save_path.empty()) require_output_file(o.save_path, "--save checkpoint");
  if (!o.resume_path.empty()) require_input_file(o.resume_path, "--resume checkpoint");
}

namespace {

// The learning-rate schedule of a GAN run as learning_rate_at reads it.
TrainOptions schedule_options(const GanOptions& o) {
  TrainOptions t;
  t.lr = o.lr;
  t.lr_schedule = o.lr_schedule;
  t.lr_step_epochs = o.lr_step_epochs;
  t.lr_gamma = o.lr_gamma;
  t.warmup_steps = o.warmup_steps;
  return t;
}

}  // namespace

GanResult train_gan(const GanOptions& o, std::ostream& log, bool log_is_terminal) {
  validate_gan(o);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  Timer wall;

  DatasetOptions dopts;
  dopts.data_dir = o.data_dir;
  dopts.image_size = o.image_size;
  dopts.channels = o.channels;
  dopts.mean = 0.5f;  // [0, 1] pixels -> [-1, 1]
  dopts.stddev = 0.5f;
  dopts.seed = o.seed;
  if (o.dataset == "synthetic" && o.train_limit > 0) dopts.synthetic_size = o.train_limit;
  std::shared_ptr<const Dataset> data = std::make_shared<GanDataset>(
      open_dataset(o.dataset, "train", dopts), o.train_limit, o.dataset == "synthetic");
  const Shape expected = {o.channels, o.image_size, o.image_size};
  CAMPO_CHECK(data->image_shape() == expected, "internal: ", data->name(), " gives images ",
              shape_str(data->image_shape()), ", expected ", shape_str(expected));
  CAMPO_CHECK(data->size() >= o.batch, "--batch ", o.batch, " is larger than the ", data->size(),
              " training samples of ", data->name());

  DcganOptions mopts;
  mopts.image_size = o.image_size;
  mopts.channels = o.channels;
  mopts.nz = o.nz;
  mopts.ngf = o.ngf;
  mopts.ndf = o.ndf;
  OptimizerConfig optimizer;
  optimizer.kind = o.optimizer == "sgd" ? OptimizerConfig::Kind::sgd : OptimizerConfig::Kind::adam;
  optimizer.beta1 = o.beta1;
  optimizer.beta2 = o.beta2;
  optimizer.momentum = o.momentum;
  optimizer.nesterov = o.nesterov;
  optimizer.weight_decay = o.weight_decay;
  PrecisionConfig precision = o.precision;
  attach_calibration(precision, o.calibration, log);
  GanSession session(mopts, o.batch, optimizer, o.seed, 64, precision, o.conv_layout);
  if (o.profile) session.set_profiling(true);

  if (!o.samples_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.samples_dir, ec);
    CAMPO_CHECK(!ec && std::filesystem::is_directory(o.samples_dir),
                "cannot create the samples directory '", o.samples_dir, "'",
                ec ? ": " + ec.message() : std::string());
  }

  LoaderOptions lopts;
  lopts.batch_size = o.batch;
  lopts.shuffle = true;
  lopts.drop_last = true;  // the graphs have a static batch size
  lopts.seed = o.seed;
  DataLoader loader(data, lopts);

  const std::string mode = o.progress == "auto" ? (log_is_terminal ? "bar" : "lines") : o.progress;
  const int64_t per_epoch = loader.batches_per_epoch();
  const int64_t total_steps =
      o.steps > 0 ? std::min<int64_t>(o.steps, per_epoch * o.epochs) : per_epoch * o.epochs;
  GanResult r;
  r.parameters_g = session.generator_parameters();
  r.parameters_d = session.discriminator_parameters();
  log << "campo: training dcgan " << o.image_size << "x" << o.image_size << "x" << o.channels
      << " (G " << r.parameters_g << ", D " << r.parameters_d << " parameters) on " << data->name()
      << ", " << data->size() << " samples, batch " << o.batch << ", " << total_steps
      << " steps, precision " << precision_name(o.precision.policy);
  if (o.precision.policy != Precision::fp32) {
    const PrecisionSummary ps = session.precision_summary();
    log << " (" << dtype_name(o.precision.low) << ": " << ps.low_nodes << " nodes low precision, "
        << ps.casts.casts << " casts)";
  }
  log << "\n";
  log.flush();

  int64_t step = 0;
  int start_epoch = 0;
  int64_t start_batch = 0;
  if (!o.resume_path.empty()) {
    const GanSession::Position pos = session.restore(o.resume_path, o.optimizer);
    const ResumePoint at = resume_point(o.resume_path, pos.epoch, pos.position_in_epoch,
                                        session.iterations(), 0, per_epoch, o.epochs);
    start_epoch = at.epoch;
    start_batch = at.batch;
    step = session.iterations();
    log << "campo: resumed from " << o.resume_path << " at step " << step << " (epoch "
        << start_epoch + 1 << ", batch " << start_batch << ")\n";
  }
  const TrainOptions schedule = schedule_options(o);

  auto write_samples = [&](int epoch) {
    if (o.samples_dir.empty()) return;
    char name[32];
    std::snprintf(name, sizeof name, "epoch_%03d.png", epoch + 1);
    const std::string path = (std::filesystem::path(o.samples_dir) / name).string();
    write_png_grid(path, session.generate_samples(), 8, 2);
    r.sample_files.push_back(path);
    if (mode != "none") log << "wrote " << path << "\n";
  };

  // From here on Ctrl-C and SIGTERM finish the step, save (with --save) and stop.
  InterruptScope interrupt_scope;
  std::vector<float> d_x, d_g_z;
  Timer train_timer;
  double last_print = -1;
  const int64_t first_step = step;
  Batch batch;
  for (int epoch = start_epoch; epoch < o.epochs && step < total_steps; ++epoch) {
    int64_t in_epoch = epoch == start_epoch ? start_batch : 0;
    loader.start_epoch(epoch, in_epoch);
    // The position saved after a step: an epoch's end is saved as the next one's start.
    auto save = [&] {
      const bool finished_epoch = in_epoch == per_epoch;
      session.save(o.save_path, finished_epoch ? epoch + 1 : epoch, finished_epoch ? 0 : in_epoch,
                   o.optimizer);
    };
    while (step < total_steps && loader.next(batch)) {
      const GanSession::StepStats s =
          session.step(batch.images, learning_rate_at(schedule, step, total_steps, per_epoch));
      CAMPO_CHECK(std::isfinite(s.loss_d) && std::isfinite(s.loss_g),
                  "DCGAN training diverged at step ", step + 1, ": loss_D ", s.loss_d, ", loss_G ",
                  s.loss_g, " (try a smaller --lr)");
      ++step;
      ++in_epoch;
      r.loss_d_history.push_back(s.loss_d);
      r.loss_g_history.push_back(s.loss_g);
      d_x.push_back(s.d_x);
      d_g_z.push_back(s.d_g_z1);
      if (!o.save_path.empty() && o.save_every > 0 && step % o.save_every == 0) save();
      if (const int signal = interrupt_signal()) {
        if (!o.save_path.empty()) save();  // the step is complete
        if (mode == "bar") log << "\n";
        log.flush();
        throw Interrupted(signal, "at step " + std::to_string(step), o.save_path,
                          "no --save given");
      }
      const double elapsed = train_timer.seconds();
      const double rate = double((step - first_step) * o.batch) / std::max(elapsed, 1e-9);
      const double eta = double(total_steps - step) * o.batch / std::max(rate, 1e-9);
      const bool last = step == total_steps || in_epoch == per_epoch;
      std::ostringstream stats;
      stats << std::fixed << std::setprecision(4) << "loss_D " << tail_mean(r.loss_d_history, 10)
            << "  loss_G " << tail_mean(r.loss_g_history, 10) << "  D(x) " << s.d_x << "  D(G(z)) "
            << s.d_g_z1 << "/" << s.d_g_z2 << "  " << std::setprecision(0) << rate << " samples/s";
      if (mode == "bar" && (elapsed - last_print >= 0.1 || last)) {
        last_print = elapsed;
        log << "\repoch " << epoch + 1 << "/" << o.epochs << " " << in_epoch << "/" << per_epoch
            << "  " << stats.str() << "  ETA " << format_duration(eta) << "   ";
        if (last) log << "\n";
        log.flush();
      } else if (mode == "lines") {
        const int64_t every = std::max<int64_t>(1, per_epoch / 10);
        if (in_epoch % every == 0 || last) {
          log << "epoch " << epoch + 1 << "/" << o.epochs << " step " << in_epoch << "/"
              << per_epoch << " " << stats.str() << " eta " << format_duration(eta) << "\n";
          log.flush();
        }
      }
    }
    if (!o.save_path.empty()) save();
    write_samples(epoch);
  }
  const double train_seconds = train_timer.seconds();
  if (!o.save_path.empty()) log << "campo: checkpoint " << o.save_path << "\n";

  r.steps = step;
  r.loss_d = tail_mean(r.loss_d_history);
  r.loss_g = tail_mean(r.loss_g_history);
  r.d_x = tail_mean(d_x);
  r.d_g_z = tail_mean(d_g_z);
  r.samples_per_sec = double((step - first_step) * o.batch) / std::max(train_seconds, 1e-9);
  r.wall_seconds = wall.seconds();
  if (o.profile) print_profile(session.profile_by_op(), step, log);
  nlohmann::json j = {{"event", "result"},
                      {"model", "dcgan"},
                      {"dataset", o.dataset},
                      {"precision", precision_name(o.precision.policy)},
                      {"image_size", o.image_size},
                      {"channels", o.channels},
                      {"epochs", o.epochs},
                      {"steps", r.steps},
                      {"batch", o.batch},
                      {"parameters_g", r.parameters_g},
                      {"parameters_d", r.parameters_d},
                      {"loss_d", r.loss_d},
                      {"loss_g", r.loss_g},
                      {"d_x", r.d_x},
                      {"d_g_z", r.d_g_z},
                      {"samples_per_sec", r.samples_per_sec},
                      {"wall_seconds", r.wall_seconds},
                      {"samples", r.sample_files.empty() ? "" : r.sample_files.back()}};
  log << j.dump() << "\n";
  log.flush();
  return r;
}

}  // namespace campo

namespace campo {

PrecisionSummary GanSession::precision_summary() const {
  PrecisionSummary d = summarize_precision(d_graph_, d_fetches()),
                   g = summarize_precision(g_graph_, g_fetches());
  d.low_nodes += g.low_nodes;
  d.f32_nodes += g.f32_nodes;
  d.casts.casts += g.casts.casts;
  d.casts.cast_elements += g.casts.cast_elements;
  d.casts.folded += g.casts.folded;
  d.casts.weight_copies += g.casts.weight_copies;
  return d;
}

}  // namespace campo
