// Optimizer update nodes, appended after the backward pass so one training step is one
// graph. State lives in the VariableStore under PyTorch's optimizer-state names
// ("<param>.momentum_buffer", "<param>.exp_avg", "<param>.exp_avg_sq").
// The learning rate and the (1-based) step count are placeholders "lr" and "step", fed
// every step so schedules need no recompilation; "step" is a scalar, "lr" is a scalar or,
// for a model array of `slices` models, [slices]: one learning rate per model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/builder.h"

namespace campo {

struct OptimizerConfig {
  enum class Kind : uint8_t { sgd, adam } kind = Kind::sgd;
  float momentum = 0.9f;
  bool nesterov = false;
  float weight_decay = 0.0f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  // A model array (HFTA-style fusion): every parameter and its state hold `slices` models'
  // copies as equal contiguous slices (ops/op.h, MomentumAttrs), model i updating with
  // lr[i] and its own momentum (sgd) and weight decay. Empty vectors: `momentum` /
  // `weight_decay` for every model; otherwise exactly `slices` values. slice_momentum is
  // refused for adam.
  int slices = 1;
  std::vector<float> slice_momentum, slice_weight_decay;
  // One multi-tensor update node for all parameters (ops/op.h, MomentumAttrs::tensors)
  // instead of one node per parameter: the same bits (every variable updates with the code
  // of a single update), one node in the plan and, on the GPU, one kernel launch per up to
  // a table's worth of variables instead of one per variable. Every parameter shares the
  // hyperparameters here, so one group holds them all (split in two at most when only
  // some weights get a low-precision copy, add_weight_copies). --no-multi-tensor-updates.
  bool multi_tensor = true;
  // Pure low-precision training (--master-weights none, --optimizer-state): the type the
  // parameters are stored in (f32; bf16: no f32 master copy, the forward and backward passes
  // read the bf16 weights themselves) and the optimizer state's (f32 or bf16). The updates
  // compute in f32 and round what they store in bf16 to nearest even or, with
  // stochastic_rounding, stochastically (ops/op.h). use_storage_types applies the types.
  DType weight_dtype = DType::f32;
  DType state_dtype = DType::f32;
  bool stochastic_rounding = false;
  bool stores_low_precision() const {
    return weight_dtype != DType::f32 || state_dtype != DType::f32;
  }
};

// --optimizer's names: "sgd" or "adam"; one error line for any other. The name is also what
// checkpoints record (campo.optimizer).
OptimizerConfig::Kind parse_optimizer(const std::string& name);
const char* optimizer_name(OptimizerConfig::Kind kind);

// One ApplyMomentum / ApplyAdam for all parameters ("optimizer/ApplyMomentum", with
// config.multi_tensor and more than one parameter) or one per parameter
// ("<param>/ApplyMomentum"). grads[i] == kNoValue is an error naming
// the parameter (it does not influence the loss). With `all_finite` (an AllFinite flag of
// the gradients) every update is skipped on the device when a gradient overflowed.
// "lr" is created as a placeholder of shape [] (slices 1) or [slices]; a graph that already
// has a node "lr" reuses it (it must have that shape). With slices > 1 every parameter's
// element count must be divisible by slices. Errors name the parameter or config field.
void append_optimizer(Builder& b, const std::vector<std::string>& params,
                      const std::vector<ValueId>& grads, const OptimizerConfig& config,
                      ValueId all_finite = kNoValue);

// Stores `params` in config.weight_dtype and every optimizer state variable of `vars` in
// config.state_dtype (VariableStore::set_dtype: rounded to nearest even, as a pure bf16
// run starts from its f32 initialisation) and gives their Variable nodes in g those types.
// Their readers other than the updates then need casts (amp/policy.h's insert_casts, which
// the precision policy runs). Returns whether any variable changed type.
bool use_storage_types(Graph& g, VariableStore& vars, const std::vector<std::string>& params,
                       const OptimizerConfig& config);

// Gives every Variable node of g the type its variable has in `vars` (a graph built over a
// store that already holds bf16 weights, e.g. an evaluation graph). Returns whether any
// node changed type (its readers then need casts).
bool retype_variables_as_stored(Graph& g, const VariableStore& vars);

// The optimizer update (ApplyMomentum / ApplyAdam) that writes the variable whose value is
// `var`, or -1 when the graph updates none.
NodeId optimizer_update_of(const Graph& g, ValueId var);
// The gradient that update reads for `var` (kNoValue when no update writes var).
ValueId update_gradient_of(const Graph& g, ValueId var);

// Makes each copy (the persistent low-precision Cast of a variable, Node::weight_copy) an
// input of the update of its variable (pairs {var, copy}; every var has an update), so the
// update rewrites it. An update's variables all have copies or none does (ops/op.h): when
// only some variables of a multi-tensor update get one, those move to a new update node
// appended to the graph ("<update>/weight_copies", after the casts it reads) and the
// original keeps the others. Fails on an update that already has copies.
void add_weight_copies(Graph& g, const std::vector<std::pair<ValueId, ValueId>>& var_copies);

}  // namespace campo
