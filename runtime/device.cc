#include "runtime/device.h"

#include <string>

#include "runtime/check.h"

namespace campo {

const char* device_name(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu;
  if (s == "cuda" || s == "gpu") return Device::cuda;
  CAMPO_FAIL("unknown device '", std::string(s), "' (expected cpu or cuda)");
}

}  // namespace campo
