#include "runtime/strict_backend.h"

#include "runtime/check.h"

namespace campo {
namespace {

std::shared_ptr<Backend> make_strict_backend(const DeviceSpec& spec) {
  CAMPO_CHECK(spec.index == 0, "--device ", spec.str(), ": the CPU has no index");
  return std::make_shared<StrictCpuBackend>();
}

const bool strict_registered = (register_backend(Device::cpu_strict, make_strict_backend), true);

}  // namespace
}  // namespace campo
