// Helpers of the CUDA element-wise, bias, cast and dropout tests: the tolerances they state,
// and cuda_matches_cpu on misaligned device views (each input and output starts one element
// past a 64-byte aligned allocation, so the kernels take their one-element-at-a-time path
// instead of the 16-byte one). Plain C++ on the Backend interface, like cuda_test_util.h.
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace campo::testing {

// The same f32 arithmetic as the CPU (no contraction into FMA on either side), so the same
// bits: exact.
inline Tolerance exact_tolerance() { return {0.0, 0.0}; }

// One unit in the last place of dtype, relative (2^-10 for f16, 2^-7 for bf16), or `f32_rtol`
// for f32; plus `atol` for values near zero. For results computed in f32 by two
// implementations that agree to a few f32 ulp and are then rounded once to f16 / bf16: the
// roundings may fall on either side of a tie point, one output ulp apart.
inline Tolerance output_ulp(DType dtype, double f32_rtol, double atol) {
  switch (dtype) {
    case DType::f16:
      return {1.0 / 1024, atol};
    case DType::bf16:
      return {1.0 / 128, atol};
    default:
      return {f32_rtol, atol};
  }
}

// A device view of `host`'s values starting one element past an aligned allocation (the
// storage is kept in `keep`).
inline Tensor misaligned_copy(Backend& gpu, const Tensor& host, std::vector<Tensor>& keep) {
  const size_t esize = dtype_size(host.dtype());
  Tensor padded = Tensor::zeros({host.numel() + 1}, host.dtype());
  if (host.numel() > 0)
    std::memcpy(static_cast<char*>(padded.data()) + esize, host.data(), host.nbytes());
  Tensor device = gpu.to_device(padded);
  keep.push_back(device);
  return Tensor::borrow(static_cast<char*>(device.device_data()) + esize, host.shape(),
                        host.dtype(), device.device());
}

// cuda_matches_cpu with every GPU input and output a misaligned view.
inline ::testing::AssertionResult cuda_matches_cpu_misaligned(
    Backend& gpu, OpKind kind, const Attrs& attrs, DType dtype,
    const std::vector<Tensor>& host_inputs, const std::vector<TensorDesc>& outputs, Tolerance tol) {
  ExecContext cpu_ctx;
  const std::vector<Tensor> expected =
      run_op_eager(kind, attrs, dtype, host_inputs, outputs, cpu_ctx);

  auto gpu_ptr = std::shared_ptr<Backend>(&gpu, [](Backend*) {});
  ExecContext gpu_ctx(gpu_ptr);
  std::vector<Tensor> keep, inputs, results;
  KernelSpec spec{kind, attrs, dtype, {}, outputs, op_name(kind)};
  for (const Tensor& t : host_inputs) {
    inputs.push_back(misaligned_copy(gpu, t, keep));
    spec.inputs.push_back({t.shape(), t.dtype()});
  }
  for (const TensorDesc& d : outputs)
    results.push_back(misaligned_copy(gpu, Tensor::zeros(d.shape, d.dtype), keep));
  auto kernel = create_kernel(spec, gpu_ctx);
  run_kernel(*kernel, gpu_ctx, inputs, results);
  gpu.synchronize();
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto r = all_close(gpu.to_host(results[i]), expected[i], tol.rtol, tol.atol);
    if (!r)
      return ::testing::AssertionFailure() << op_name(kind) << " " << dtype_name(dtype)
                                           << " (misaligned) output " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace campo::testing
