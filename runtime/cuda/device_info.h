// What CUDA devices exist. Callable only when CAMPO_HAVE_CUDA is defined.
#pragma once

#include <string>

namespace campo::cuda {

int device_count();  // 0 when no driver or no device
std::string device_name(int index);
int runtime_version();  // e.g. 13000

}  // namespace campo::cuda
