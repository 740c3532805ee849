// dst[i] = float(src[i]) for i < n, src f32, f16 or bf16, issued on `stream` (ops/cuda/
// conv_widen.cu). The f32 dw of a low-precision Conv2DBackpropFilter (Node::f32_output).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/dtype.h"

namespace campo::cuda {

void widen_to_f32(const void* src, DType src_type, float* dst, int64_t n, int multiprocessors,
                  cudaStream_t stream);

}  // namespace campo::cuda
