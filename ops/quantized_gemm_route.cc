// The CUDA backend's route for each quantized GEMM (ops/quantized_gemm_route.h).
#include "ops/quantized_gemm_route.h"

#include <climits>

#include "runtime/check.h"

namespace campo {

const char* cuda_gemm_route_name(CudaGemmRoute route) {
  switch (route) {
    case CudaGemmRoute::fp8:
      return "cuBLASLt FP8";
    case CudaGemmRoute::emulated:
      return "emulated";
    case CudaGemmRoute::refused:
      return "refused";
  }
  return "?";
}

GemmDims matmul_gemm_dims(OpKind kind, const Attrs& attrs, const std::vector<Shape>& inputs) {
  CAMPO_CHECK(inputs.size() == 2, "internal: a GEMM on ", inputs.size(), " inputs");
  const Shape& a = inputs[0];
  const Shape& b = inputs[1];
  GemmDims d;
  if (kind == OpKind::MatMul) {
    const auto& t = attrs_as<MatMulAttrs>(attrs);
    CAMPO_CHECK(a.size() == 2 && b.size() == 2, "internal: MatMul on ", shape_str(a), " x ",
                shape_str(b));
    d.M = t.transpose_a ? a[1] : a[0];
    d.K = t.transpose_a ? a[0] : a[1];
    d.N = t.transpose_b ? b[0] : b[1];
    return d;
  }
  CAMPO_CHECK(kind == OpKind::BatchMatMulV2, "internal: no GEMM dims for ", op_name(kind));
  const auto& t = attrs_as<BatchMatMulAttrs>(attrs);
  const size_t r = a.size();
  CAMPO_CHECK(r >= 2 && b.size() == r, "internal: BatchMatMulV2 on ", shape_str(a), " x ",
              shape_str(b));
  for (size_t i = 0; i + 2 < r; ++i) d.batch *= a[i];
  d.M = t.adj_x ? a[r - 1] : a[r - 2];
  d.K = t.adj_x ? a[r - 2] : a[r - 1];
  d.N = t.adj_y ? b[r - 2] : b[r - 1];
  return d;
}

CudaGemmPlan plan_quantized_gemm_on_cuda(OpKind kind, const Attrs& attrs,
                                         const std::vector<Shape>& inputs, const GemmQuant& q,
                                         int compute_capability) {
  CAMPO_CHECK(q.enabled, "internal: routing a GEMM that is not quantized");
  if (q.blocks || q.recipe.scaling == Scaling::mx)
    return {CudaGemmRoute::refused,
            "MX formats run on the CPU only (no CUDA kernel quantizes 32-element blocks)"};
  if (q.rounding == Rounding::stochastic)
    return {CudaGemmRoute::refused, "stochastic rounding runs on the CPU only"};
  for (ElementFormat f : q.element)
    if (f != ElementFormat::e4m3 && f != ElementFormat::e5m2)
      return {CudaGemmRoute::refused, std::string("element format ") + element_format_name(f) +
                                          " is not an FP8 format (e4m3, e5m2)"};
  if (kind != OpKind::MatMul && kind != OpKind::BatchMatMulV2)
    return {CudaGemmRoute::emulated, std::string(op_name(kind)) +
                                         " is not a matmul (cuBLASLt FP8 runs MatMul and "
                                         "BatchMatMulV2)"};
  if (q.element[0] == ElementFormat::e5m2 && q.element[1] == ElementFormat::e5m2)
    return {CudaGemmRoute::emulated, "e5m2 x e5m2 (cuBLASLt FP8 needs an e4m3 operand)"};
  const GemmDims d = matmul_gemm_dims(kind, attrs, inputs);
  auto fits = [](int64_t n) { return n > 0 && n % 16 == 0; };
  if (!fits(d.M) || !fits(d.N) || !fits(d.K))
    return {CudaGemmRoute::emulated, "M=" + std::to_string(d.M) + " N=" + std::to_string(d.N) +
                                         " K=" + std::to_string(d.K) +
                                         " (cuBLASLt FP8 needs positive multiples of 16)"};
  if (compute_capability != 0 && compute_capability < 89)
    return {CudaGemmRoute::emulated, "compute capability " + std::to_string(compute_capability / 10) +
                                         "." + std::to_string(compute_capability % 10) +
                                         " has no FP8 tensor cores (8.9 and later)"};
  if (d.batch > INT32_MAX)
    return {CudaGemmRoute::emulated, "more products than cuBLASLt's batch count (int32)"};
  return {CudaGemmRoute::fp8, ""};
}

}  // namespace campo
