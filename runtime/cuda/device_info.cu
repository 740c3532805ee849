// CUDA device discovery. Built only when nvcc is found (CAMPO_HAVE_CUDA); the rest of
// the runtime asks through runtime/cuda/device_info.h and never includes CUDA headers.
#include <cuda_runtime.h>

#include "runtime/cuda/device_info.h"

namespace campo::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
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

}  // namespace campo::cuda
