#include "graph/variables.h"

#include <cmath>

namespace campo {

Init Init::kaiming_normal(int64_t fan) { return normal(0.0f, std::sqrt(2.0f / float(fan))); }

Init Init::pytorch_default(int64_t fan_in) {
  float bound = 1.0f / std::sqrt(float(fan_in));
  return uniform(-bound, bound);
}

static void fill(Tensor& t, const Init& init, Rng& rng) {
  float* p = t.data_as<float>();
  const int64_t n = t.numel();
  switch (init.kind) {
    case Init::Kind::zeros: t.fill_zero(); break;
    case Init::Kind::ones:
      for (int64_t i = 0; i < n; ++i) p[i] = 1.0f;
      break;
    case Init::Kind::constant:
      for (int64_t i = 0; i < n; ++i) p[i] = init.a;
      break;
    case Init::Kind::normal:
      for (int64_t i = 0; i < n; ++i) p[i] = rng.normal(init.a, init.b);
      break;
    case Init::Kind::uniform:
      for (int64_t i = 0; i < n; ++i) p[i] = rng.uniform(init.a, init.b);
      break;
  }
}

Tensor& VariableStore::get_or_create(const std::string& name, const Shape& shape, Init init,
                                     VariableKind kind) {
  ++generation_;
  auto it = vars_.find(name);
  if (it != vars_.end()) {
    CAMPO_CHECK(it->second.tensor.shape() == shape, "variable '", name, "' exists with shape ",
                shape_str(it->second.tensor.shape()), ", requested ", shape_str(shape));
    return it->second.tensor;
  }
  Tensor host = Tensor::empty(shape, DType::f32);
  fill(host, init, rng_);
  VariableEntry e{backend_->device().type == Device::cpu ? host : backend_->to_device(host), kind};
  order_.push_back(name);
  return vars_.emplace(name, std::move(e)).first->second.tensor;
}

VariableStore::VariableStore(uint64_t seed, std::shared_ptr<Backend> backend)
    : backend_(required_backend(std::move(backend))), rng_(seed) {}

Tensor VariableStore::read(const std::string& name) const { return backend_->to_host(at(name)); }

void VariableStore::write(const std::string& name, const Tensor& host) {
  Tensor& t = at(name);  // counts as an outside write (generation)
  CAMPO_CHECK(host.dtype() == t.dtype() && host.shape() == t.shape(), "variable '", name,
              "' is ", dtype_name(t.dtype()), shape_str(t.shape()), ", written with ",
              dtype_name(host.dtype()), shape_str(host.shape()));
  backend_->write(t, host);
}

void VariableStore::set_dtype(const std::string& name, DType dtype) {
  Tensor& t = at(name);  // counts as an outside write (generation)
  CAMPO_CHECK(is_floating(dtype), "variable '", name, "' cannot be stored in ", dtype_name(dtype),
              " (f32, f16 or bf16)");
  if (t.dtype() == dtype) return;
  const Tensor host = backend_->to_host(t);
  Tensor converted = Tensor::empty(t.shape(), dtype);
  convert(host.data(), host.dtype(), converted.data(), dtype, size_t(host.numel()));
  t = backend_->device().type == Device::cpu ? converted : backend_->to_device(converted);
}

Tensor& VariableStore::at(const std::string& name) {
  ++generation_;
  auto it = vars_.find(name);
  CAMPO_CHECK(it != vars_.end(), "no variable named '", name, "'");
  return it->second.tensor;
}

const Tensor& VariableStore::at(const std::string& name) const {
  auto it = vars_.find(name);
  CAMPO_CHECK(it != vars_.end(), "no variable named '", name, "'");
  return it->second.tensor;
}

VariableKind VariableStore::kind(const std::string& name) const {
  auto it = vars_.find(name);
  CAMPO_CHECK(it != vars_.end(), "no variable named '", name, "'");
  return it->second.kind;
}

std::vector<std::string> VariableStore::names_of_kind(VariableKind k) const {
  std::vector<std::string> out;
  for (const auto& n : order_)
    if (vars_.at(n).kind == k) out.push_back(n);
  return out;
}

int64_t VariableStore::count_elements(VariableKind k) const {
  int64_t total = 0;
  for (const auto& [n, e] : vars_)
    if (e.kind == k) total += e.tensor.numel();
  return total;
}

}  // namespace campo
