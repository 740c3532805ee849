// VariableStore: the persistent tensors of a model, by name — parameters, buffers
// (batch-norm running statistics) and optimizer state. Graphs refer to them by name
// through Variable nodes, so a training graph and an evaluation graph share one store.
// Names follow PyTorch's state_dict ("conv1.weight", "bn1.running_mean").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace campo {

// quantization_state: a quantized GEMM operand's scale, step count and amax history
// (runtime/gemm_quant.h), updated by its kernel every step.
enum class VariableKind : uint8_t { parameter, buffer, optimizer_state, quantization_state };

// How a new variable is filled.
struct Init {
  enum class Kind : uint8_t { zeros, ones, constant, normal, uniform } kind = Kind::zeros;
  float a = 0, b = 0;  // constant: a; normal: mean a, stddev b; uniform: [a, b)

  static Init zeros() { return {Kind::zeros}; }
  static Init ones() { return {Kind::ones}; }
  static Init constant(float v) { return {Kind::constant, v}; }
  static Init normal(float mean, float stddev) { return {Kind::normal, mean, stddev}; }
  static Init uniform(float lo, float hi) { return {Kind::uniform, lo, hi}; }
  // Kaiming/He normal for ReLU: std = sqrt(2 / fan).
  static Init kaiming_normal(int64_t fan);
  // PyTorch's default for Linear/Conv weights and biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  static Init pytorch_default(int64_t fan_in);
};

struct VariableEntry {
  Tensor tensor;
  VariableKind kind = VariableKind::parameter;
};

// The tensors live on the store's backend, which every store is given (there is no default:
// a store of a run is on the run's device); they are initialised on the host from the store's
// RNG and copied there, so a model starts
// from the same values on every device. Host code reads and writes them with read / write
// (through the backend's copies); at() gives the device tensor itself (executables bind it).
class VariableStore {
 public:
  VariableStore(uint64_t seed, std::shared_ptr<Backend> backend);
  Backend& backend() const { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const { return backend_; }

  // Returns the variable, creating and initialising it on first use. A later request
  // with another shape is an error.
  Tensor& get_or_create(const std::string& name, const Shape& shape, Init init, VariableKind kind);
  bool contains(const std::string& name) const { return vars_.count(name) != 0; }
  Tensor& at(const std::string& name);
  const Tensor& at(const std::string& name) const;
  VariableKind kind(const std::string& name) const;
  // A host copy of a variable's values.
  Tensor read(const std::string& name) const;
  // Sets a variable from a host tensor of its dtype and shape (counts as an outside write).
  void write(const std::string& name, const Tensor& host);
  // Stores variable `name` in `dtype` (f32, f16 or bf16) from now on: its values converted,
  // rounded to nearest even when narrowing (exact when widening); new storage, so convert
  // before any executable binds the variable. Pure low-precision training's bf16 weights
  // and optimizer state (graph/optimizer.h).
  void set_dtype(const std::string& name, DType dtype);
  // Names in creation order.
  const std::vector<std::string>& names() const { return order_; }
  std::vector<std::string> names_of_kind(VariableKind kind) const;
  int64_t count_elements(VariableKind kind) const;
  Rng& rng() { return rng_; }
  // Counts the calls that could change a variable from outside a compiled step (get_or_create
  // and the non-const at()), so that executables holding low-precision weight copies know
  // when to refresh them (Node::weight_copy). Optimizer updates inside a step do not count.
  uint64_t generation() const { return generation_; }

 private:
  std::shared_ptr<Backend> backend_;
  std::map<std::string, VariableEntry> vars_;
  std::vector<std::string> order_;
  Rng rng_;
  uint64_t generation_ = 0;
};

}  // namespace campo
