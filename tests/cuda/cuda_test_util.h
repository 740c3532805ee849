// Helpers of the CUDA tests: the CUDA backend or a skip that says why, and the comparison
// every CUDA kernel is tested with: the same op on the same inputs on the CPU (the
// specification) and on the GPU, outputs compared with a stated tolerance.
//
// These tests are plain C++ on the Backend interface, so they build in every configuration:
// in a build without CUDA, or on a machine without a GPU, each one reports itself skipped
// with the reason (make_backend's error line) and nothing fails.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "runtime/backend.h"
#include "tests/test_util.h"

namespace campo::testing {

// The CUDA backend of device 0, or nullptr and the reason there is none: one backend for
// the whole test process (its cuDNN and cuBLASLt handles, caching allocator and cuDNN
// algorithm cache reused by every test, as one training run reuses them; a new backend per
// test would search every convolution again), made at the first ask. It is deterministic
// (Backend::set_deterministic): tests compare CUDA graph replays with launched steps and
// prefetched with fed steps bit for bit, so no cuDNN algorithm with atomics may run. A test
// that changes its settings (set_cuda_graph) puts them back before it ends.
inline std::shared_ptr<Backend> try_cuda_backend(std::string* why_not) {
  struct Shared {
    std::shared_ptr<Backend> backend;
    std::string why_not;
  };
  // Never destroyed: its handles would otherwise be released by a static destructor after
  // the CUDA runtime has begun unloading (PyTorch keeps its handles to the end likewise).
  static const Shared& shared = *[] {
    auto* s = new Shared;
    try {
      s->backend = make_backend({Device::cuda, 0});
      s->backend->set_deterministic(true);
    } catch (const Error& e) {
      s->why_not = e.what();
    }
    return s;
  }();
  if (!shared.backend) *why_not = shared.why_not;
  return shared.backend;
}

// In a test body: `auto gpu = CAMPO_CUDA_OR_SKIP();` gives the CUDA backend or skips the
// test with the reason.
#define CAMPO_CUDA_OR_SKIP()                                                      \
  ({                                                                              \
    std::string campo_why_not_;                                                   \
    auto campo_gpu_ = ::campo::testing::try_cuda_backend(&campo_why_not_);        \
    if (!campo_gpu_) GTEST_SKIP() << "no CUDA: " << campo_why_not_;               \
    campo_gpu_;                                                                   \
  })

// Runs `kind` with `attrs` and compute type `dtype` on `host_inputs` (host tensors, in the
// dtypes the op takes) on the CPU and on `gpu`, and compares every output: |gpu - cpu| <=
// atol + rtol |cpu|. The failure names the op, the dtype and the output.
inline ::testing::AssertionResult cuda_matches_cpu(Backend& gpu, OpKind kind, const Attrs& attrs,
                                                   DType dtype,
                                                   const std::vector<Tensor>& host_inputs,
                                                   const std::vector<TensorDesc>& outputs,
                                                   Tolerance tol) {
  ExecContext cpu_ctx;
  const std::vector<Tensor> expected = run_op_eager(kind, attrs, dtype, host_inputs, outputs, cpu_ctx);

  auto gpu_ptr = std::shared_ptr<Backend>(&gpu, [](Backend*) {});
  ExecContext gpu_ctx(gpu_ptr);
  std::vector<Tensor> device_inputs;
  for (const Tensor& t : host_inputs) device_inputs.push_back(gpu.to_device(t));
  const std::vector<Tensor> actual = run_op_eager(kind, attrs, dtype, device_inputs, outputs, gpu_ctx);
  gpu.synchronize();
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto r = all_close(gpu.to_host(actual[i]), expected[i], tol.rtol, tol.atol);
    if (!r)
      return ::testing::AssertionFailure()
             << op_name(kind) << " " << dtype_name(dtype) << " output " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// A host tensor of `dtype` holding uniform values in [lo, hi) (rounded to dtype).
inline Tensor random_tensor_of(DType dtype, const Shape& shape, Rng& rng, float lo = -1.0f,
                               float hi = 1.0f) {
  Tensor f = random_tensor(shape, rng, lo, hi);
  if (dtype == DType::f32) return f;
  Tensor t = Tensor::empty(shape, dtype);
  convert(f.data_as<float>(), DType::f32, t.data(), dtype, size_t(f.numel()));
  return t;
}

}  // namespace campo::testing
