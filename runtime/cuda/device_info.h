// What CUDA devices exist. Callable only when CAMPO_HAVE_CUDA is defined.
#pragma once

#include <cstddef>
#include <string>

namespace campo::cuda {

int device_count();  // 0 when no driver or no device
std::string device_name(int index);
int runtime_version();  // e.g. 13000
int driver_version();   // the newest CUDA the driver supports, e.g. 13000; 0 when no driver
// The libraries loaded at run time (not the headers built against): cuDNN (e.g. 91400)
// and cuBLASLt (e.g. 130100).
size_t cudnn_version();
size_t cublaslt_version();
// The GPU architectures this binary holds code for, as nvcc was told ("sm_90").
std::string built_architectures();
// Whether device `index` can run this binary's kernels (SASS for its architecture, or PTX
// it can compile): asked of a probe kernel, so it answers for the build as it is.
bool runs_this_build(int index);

}  // namespace campo::cuda
