// The CUDA backend's registration: the only place besides --version (tools/cli.cc) that
// knows whether the build has CUDA, because this file is compiled only when it has
// (CAMPO_HAVE_CUDA; CMakeLists.txt's runtime/cuda glob). Without it, make_backend says the
// build has no CUDA backend.
//
// The factory checks what is missing in the order a user fixes it: a CUDA device at all,
// the index asked for, then the kernels, which come with issue 12. Until then every
// --device cuda run stops here, before any work, with one line.
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/cuda/device_info.h"

namespace campo {
namespace {

std::shared_ptr<Backend> make_cuda_backend(const DeviceSpec& spec) {
  const int devices = cuda::device_count();
  CAMPO_CHECK(devices > 0, "--device ", spec.str(),
              ": no CUDA device is present (cuda::device_count() is 0: no GPU, or no driver "
              "for it); use --device cpu");
  CAMPO_CHECK(spec.index < devices, "--device ", spec.str(), ": this machine has ", devices,
              " CUDA device", devices == 1 ? "" : "s", " (cuda:0",
              devices == 1 ? "" : " .. cuda:" + std::to_string(devices - 1), ")");
  CAMPO_FAIL("--device ", spec.str(),
             ": the CUDA backend's kernels are not implemented yet (issue 12); use --device cpu");
}

const bool cuda_registered = (register_backend(Device::cuda, make_cuda_backend), true);

}  // namespace
}  // namespace campo
