// Shared by the model-array tests (model_array_test.cc, gan_array_test.cc): the control run's
// perturbation that calibrates how far float rounding alone moves a training run.
#pragma once

#include "graph/variables.h"
#include "runtime/rng.h"

namespace campo::testing {

// Each parameter element times 1 + 1e-6 u, u uniform in [-1, 1]: a perturbation of the size
// of the fused kernels' rounding differences.
inline void perturb_parameters(VariableStore& vars) {
  Rng rng(4);
  for (const std::string& name : vars.names_of_kind(VariableKind::parameter)) {
    Tensor host = vars.read(name);
    for (int64_t k = 0; k < host.numel(); ++k)
      host.data_as<float>()[k] *= 1.0f + 1e-6f * rng.uniform(-1, 1);
    vars.write(name, host);
  }
}

}  // namespace campo::testing
