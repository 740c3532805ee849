// Devices a tensor can live on and a kernel can run on.
#pragma once

#include <string_view>

namespace campo {

enum class Device : uint8_t { cpu, cuda };

const char* device_name(Device d);
Device parse_device(std::string_view s);

}  // namespace campo
