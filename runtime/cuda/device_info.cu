// CUDA device discovery. Built only when nvcc is found (CAMPO_HAVE_CUDA); the rest of
// the runtime asks through runtime/cuda/device_info.h and never includes CUDA headers.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "runtime/cuda/device_info.h"

namespace campo::cuda {
namespace {
// Never launched: its attributes exist on a device only if this binary has code for it.
__global__ void probe_kernel() {}
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // not a failure of whatever runs next
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown";
  return prop.name;
}

int runtime_version() {
  int v = 0;
  cudaRuntimeGetVersion(&v);
  return v;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;
  return v;
}

size_t cudnn_version() { return cudnnGetVersion(); }

size_t cublaslt_version() { return cublasLtGetVersion(); }

std::string built_architectures() {
#ifdef __CUDA_ARCH_LIST__
  // nvcc's list of the targets, e.g. 750,900 (major * 100 + minor * 10).
  const int archs[] = {__CUDA_ARCH_LIST__};
  std::string s;
  for (int a : archs) s += (s.empty() ? "sm_" : ", sm_") + std::to_string(a / 10);
  return s;
#else
  return "unknown";
#endif
}

bool runs_this_build(int index) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(index) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaFuncAttributes attributes{};
  const bool ok = cudaFuncGetAttributes(&attributes, probe_kernel) == cudaSuccess;
  cudaGetLastError();  // cudaErrorNoKernelImageForDevice is an answer here, not an error
  cudaSetDevice(previous);
  return ok;
}

}  // namespace campo::cuda
