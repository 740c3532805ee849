// Helpers shared by tests/ops/low_precision_test.cc and the kernel benchmarks
// (bench/kernels/low_precision_bench.cc): low-precision copies of f32 tensors, conv / pool
// attributes, a scoped environment variable, and one whole training step of a model.
#pragma once

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "ops/kernel.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

namespace campo::testing {

// `t` (f32) in `dtype`; the values must be representable (see rounded_to).
inline Tensor as_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() != DType::f32 || dtype == DType::f32) return t.clone();
  Tensor out = Tensor::empty(t.shape(), dtype);
  convert(t.data(), DType::f32, out.data(), dtype, size_t(t.numel()));
  return out;
}

inline ConvAttrs conv(int stride, int pad, Shape output_shape = {}, int groups = 1) {
  ConvAttrs a;
  a.stride_h = a.stride_w = stride;
  a.pad_h = a.pad_w = pad;
  a.groups = groups;
  a.output_shape = std::move(output_shape);
  return a;
}

inline PoolAttrs pool(int k, int s, int p, Shape input_shape = {}) {
  return PoolAttrs{k, k, s, s, p, p, std::move(input_shape)};
}

// One SGD training step of a model, f32 or under the `amp` policy in a low-precision type,
// with every placeholder filled from a fixed seed (images, labels, lr, step, loss scale 1).
struct TrainingStep {
  Graph graph;
  VariableStore vars{0, default_cpu_backend()};
  ValueId loss = kNoValue;
  std::unique_ptr<Executable> exe;

  TrainingStep(const std::string& model, const Shape& images, DType low_type) {
    Builder b(graph, vars);
    ModelOptions mo;
    mo.in_channels = int(images[1]);
    mo.image_size = int(images[2]);
    const ValueId x = b.placeholder("images", images);
    const ValueId y = b.placeholder("labels", {images[0]}, DType::i32);
    loss = b.mean(b.sparse_softmax_cross_entropy(build_model(model, b, x, mo), y));
    const auto params = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> pv;
    for (const auto& p : params) pv.push_back(graph.node(graph.find_node(p)).outputs[0]);
    append_optimizer(b, params, append_gradients(b, loss, b.placeholder("loss_scale", {}), pv), {});
    if (low_type != DType::f32) apply_amp_policy(graph, AmpLists::defaults(Device::cpu, low_type), low_type);
    CompileOptions co;
    co.fetches = {loss};
    exe = std::make_unique<Executable>(graph, vars, co);
    Rng rng(11);
    for (const Node& n : graph.nodes()) {
      if (n.kind != OpKind::Placeholder) continue;
      Tensor& t = exe->input(n.name);
      if (n.name == "labels") {
        for (int64_t i = 0; i < t.numel(); ++i) t.data_as<int32_t>()[i] = int32_t(i % 10);
      } else if (n.name == "lr") {
        t.data_as<float>()[0] = 0.01f;
      } else {  // images; step and loss_scale are 1
        float* d = t.data_as<float>();
        for (int64_t i = 0; i < t.numel(); ++i) d[i] = t.numel() == 1 ? 1.0f : rng.uniform(-1, 1);
      }
    }
  }
  float run() {
    exe->run();
    return exe->output(loss).to_float_vector()[0];
  }
};

}  // namespace campo::testing
