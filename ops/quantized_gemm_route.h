// How the CUDA backend runs each quantized GEMM (ops/cuda/quantized_gemm.cu; docs/formats.md,
// "On the GPU"). Host code, built in every configuration, so that the kernel, the policy check
// (train/training_graph.cc) and `campo plan` decide alike, and CPU tests check the decision.
//
//  - fp8:      cuBLASLt's FP8 GEMM on the codes themselves (FP8 tensor cores, Hopper and
//              later): MatMul and BatchMatMulV2 with per-tensor scaling (delayed, current,
//              none) and nearest rounding, operands e4m3 x e4m3, e4m3 x e5m2 or e5m2 x e4m3
//              (cuBLASLt has no e5m2 x e5m2), M, N and K positive multiples of 16 (cuBLASLt
//              FP8's 16-byte leading dimensions; its "TN" layout is the cast's to write).
//  - emulated: what the CPU does: each operand quantized and decoded on the GPU (the same
//              scale and codes), the op's f32 kernel on the decoded codes, the result times
//              1/s_a * 1/s_b. Per-tensor formats on every other quantizable GEMM and shape.
//  - refused:  MX formats and stochastic rounding, which run on the CPU only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/op.h"
#include "runtime/gemm_quant.h"
#include "runtime/tensor.h"

namespace campo {

enum class CudaGemmRoute : uint8_t { fp8, emulated, refused };
// "cuBLASLt FP8", "emulated", "refused"
const char* cuda_gemm_route_name(CudaGemmRoute route);

struct CudaGemmPlan {
  CudaGemmRoute route = CudaGemmRoute::emulated;
  std::string reason;  // why not fp8 (emulated), why not at all (refused); empty for fp8
};

// The GEMM of a MatMul or BatchMatMulV2 node: `batch` products C [M, N] = op(A) [M, K] op(B)
// [K, N] (batch 1 for MatMul; BatchMatMulV2's batch dims flattened).
struct GemmDims {
  int64_t batch = 1, M = 0, N = 0, K = 0;
};
GemmDims matmul_gemm_dims(OpKind kind, const Attrs& attrs, const std::vector<Shape>& inputs);

// The route of a quantized GEMM node (`q.enabled`) of op `kind` on inputs of these shapes, on
// a GPU of `compute_capability` (major * 10 + minor; FP8 tensor cores from 89, Ada and Hopper;
// 0: not known, as when planning from the graph alone, taken to have them).
CudaGemmPlan plan_quantized_gemm_on_cuda(OpKind kind, const Attrs& attrs,
                                         const std::vector<Shape>& inputs, const GemmQuant& q,
                                         int compute_capability = 0);

}  // namespace campo
