#include "train/model_array.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "models/models.h"

namespace campo {

bool supports_model_array(const std::string& model, std::string* why) {
  const std::string reason = is_known_model(model) ? why_no_model_array(model) : "unknown model";
  if (reason.empty()) return true;
  if (why) {
    *why = "--array does not support " + model + " (" + reason + "); arrays train ";
    const std::vector<std::string> names = model_array_names();
    for (size_t i = 0; i < names.size(); ++i)
      *why += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
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

void ArrayHyperparameters::check() const {
  CAMPO_CHECK(size() >= 1, "a model array needs at least one model");
  for (const auto* v : {&lr, &momentum, &weight_decay, &dropout})
    CAMPO_CHECK(int(v->size()) == size(), "internal: per-model hyperparameters of ", v->size(),
                " models for an array of ", size());
}

nlohmann::ordered_json ArrayHyperparameters::of_model(int i) const {
  const size_t k = size_t(i);
  return {{"lr", lr.at(k)},
          {"momentum", momentum.at(k)},
          {"weight_decay", weight_decay.at(k)},
          {"dropout", dropout.at(k)},
          {"seed", seed.at(k)}};
}

ArrayHyperparameters one_model(const OptimizerConfig& optimizer, uint64_t seed, float dropout) {
  return {{0.0f}, {optimizer.momentum}, {optimizer.weight_decay}, {dropout}, {seed}};
}

OptimizerConfig model_optimizer(OptimizerConfig o, const ArrayHyperparameters& h, int i) {
  o.slices = 1;
  o.slice_momentum.clear();
  o.slice_weight_decay.clear();
  o.momentum = h.momentum.at(size_t(i));
  o.weight_decay = h.weight_decay.at(size_t(i));
  return o;
}

OptimizerConfig array_optimizer(OptimizerConfig o, const ArrayHyperparameters& h) {
  o = model_optimizer(o, h, 0);
  if (h.size() == 1) return o;
  o.slices = h.size();
  if (o.kind == OptimizerConfig::Kind::sgd) o.slice_momentum = h.momentum;
  o.slice_weight_decay = h.weight_decay;
  return o;
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

void ArraySlices::save_model(const std::string& path, const VariableStore& array, int i,
                             const ArrayHyperparameters& h, CheckpointMeta meta) const {
  meta.extra["array_index"] = std::to_string(i);
  meta.extra["array_size"] = std::to_string(n_);
  // As a plain json: its keys sorted, as these checkpoints have always written them.
  meta.extra["hyperparameters"] = nlohmann::json(h.of_model(i)).dump();
  save_checkpoint(path, single_store(array, i, h.seed.at(size_t(i))), meta);
}

Tensor stack_model_inputs(const std::vector<const Tensor*>& xs, int64_t rows) {
  if (xs.size() == 1) return *xs[0];
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

std::string array_checkpoint_path(const std::string& path, int i) {
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  const std::string stem = has_ext ? path.substr(0, dot) : path;
  const std::string ext = has_ext ? path.substr(dot) : "";
  return stem + "-" + std::to_string(i) + ext;
}

}  // namespace campo
