// safetensors files and checkpoints (graph/checkpoint.cc): the input is one file, read
// through every reader: the metadata, the tensor names, all tensors, and a checkpoint load
// into a small model (parameters, a batch-norm buffer, optimizer state) with either
// option set. A refused load must leave the model untouched.
#include <cstring>

#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"
#include "graph/checkpoint.h"

namespace campo::fuzz {
namespace {

VariableStore small_model() {
  VariableStore vars(7, default_cpu_backend());
  vars.get_or_create("fc.weight", {2, 3}, Init::constant(0.5f), VariableKind::parameter);
  vars.get_or_create("fc.bias", {2}, Init::constant(-1.0f), VariableKind::parameter);
  vars.get_or_create("bn.running_mean", {2}, Init::zeros(), VariableKind::buffer);
  vars.get_or_create("fc.weight.momentum", {2, 3}, Init::ones(), VariableKind::optimizer_state);
  return vars;
}

bool same_values(VariableStore& a, VariableStore& b) {
  for (const std::string& name : a.names())
    if (std::memcmp(a.at(name).data(), b.at(name).data(), a.at(name).nbytes()) != 0) return false;
  return true;
}

}  // namespace

void safetensors(const uint8_t* data, size_t size) {
  TempInput input("safetensors", data, size);
  reject_or_accept([&] { read_safetensors_metadata(input.path()); });
  reject_or_accept([&] { checkpoint_tensor_names(input.path()); });
  reject_or_accept([&] { read_safetensors(input.path()); });
  for (bool lenient : {false, true}) {
    VariableStore vars = small_model(), untouched = small_model();
    LoadOptions options;
    options.allow_missing_optimizer_state = lenient;
    options.strict_unexpected = !lenient;
    try {
      load_checkpoint(input.path(), vars, options);
    } catch (const Error&) {
      require(same_values(vars, untouched), "a refused checkpoint load changed the model");
    }
  }
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::safetensors)
