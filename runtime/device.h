// Devices a tensor can live on and a kernel can run on.
#pragma once

#include <cstdint>
#include <string_view>

namespace campo {

// `test`: the test-only staging backend (tests/runtime/staging_backend.h): host memory
// that refuses host access like a GPU's, to prove every host boundary goes through a copy.
enum class Device : uint8_t { cpu, cuda, test };

const char* device_name(Device d);
Device parse_device(std::string_view s);

}  // namespace campo
