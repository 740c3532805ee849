// Op-level test drivers built on the real graph machinery:
//  - run_op: one op through shape inference (its schema) and its CPU kernel.
//  - check_gradients: the op's gradient builder + backward kernels (through autodiff and
//    the executor) against central finite differences of the forward kernel.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "ops/op.h"
#include "runtime/tensor.h"

namespace campo::testing {

// Runs `kind` on host tensors (f32 compute unless `dtype` says otherwise) and returns all
// its outputs. Output shapes come from the op's schema, the values from its CPU kernel.
std::vector<Tensor> run_op(OpKind kind, const Attrs& attrs, const std::vector<Tensor>& inputs,
                           DType dtype = DType::f32);

struct GradCheckOptions {
  // Central-difference step. The forward runs in f32, so the numeric derivative has an
  // error of about ulp(loss) / eps; tolerances below are sized for that.
  float eps = 1e-2f;
  double rtol = 2e-2, atol = 2e-3;
  std::vector<int> check_inputs;  // default: every f32 input
  std::vector<int> loss_outputs;  // outputs that feed the loss; default {0}
  uint64_t seed = 1234;
};

// loss = sum_k sum(output_k * R_k) with fixed random R_k; every f32 input becomes a
// variable, others (labels) placeholders. Compares d loss / d input from autodiff with
// (loss(x + eps) - loss(x - eps)) / (2 eps), element by element.
::testing::AssertionResult check_gradients(OpKind kind, const Attrs& attrs,
                                           const std::vector<Tensor>& inputs,
                                           const GradCheckOptions& opts = {});

}  // namespace campo::testing
