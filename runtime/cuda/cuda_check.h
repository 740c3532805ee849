// Error checks for the CUDA runtime, cuBLASLt and cuDNN: each failing call throws a
// campo::Error naming the call (the expression text), the library's own error string and the
// file and line (tiny-cuda-nn's CUDA_CHECK_THROW is the model). Compiled only with
// CAMPO_HAVE_CUDA (runtime/cuda/ and ops/cuda/ are globbed only then).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "runtime/check.h"

namespace campo::cuda {

[[noreturn]] void fail_call(const char* file, int line, const char* expr, const char* library,
                            const char* what);

}  // namespace campo::cuda

#define CAMPO_CUDA_CHECK(expr)                                                          \
  do {                                                                                  \
    const cudaError_t campo_cuda_status_ = (expr);                                      \
    if (campo_cuda_status_ != cudaSuccess)                                              \
      ::campo::cuda::fail_call(__FILE__, __LINE__, #expr, "CUDA",                       \
                               cudaGetErrorString(campo_cuda_status_));                 \
  } while (0)

#define CAMPO_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                  \
    const cublasStatus_t campo_cublas_status_ = (expr);                                 \
    if (campo_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                  \
      ::campo::cuda::fail_call(__FILE__, __LINE__, #expr, "cuBLAS",                     \
                               cublasLtGetStatusString(campo_cublas_status_));          \
  } while (0)

#define CAMPO_CUDNN_CHECK(expr)                                                         \
  do {                                                                                  \
    const cudnnStatus_t campo_cudnn_status_ = (expr);                                   \
    if (campo_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                    \
      ::campo::cuda::fail_call(__FILE__, __LINE__, #expr, "cuDNN",                      \
                               cudnnGetErrorString(campo_cudnn_status_));               \
  } while (0)
