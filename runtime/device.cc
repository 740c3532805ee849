#include "runtime/device.h"

#include <string>

#include "runtime/check.h"

namespace campo {

const char* device_name(Device d) {
  switch (d) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
    case Device::cpu_strict: return "cpu:strict";
  }
  return "?";
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda" || s == "gpu") return Device::cuda;
  CAMPO_FAIL("unknown device '", std::string(s), "' (expected cpu or cuda)");
}

}  // namespace campo
