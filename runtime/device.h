// Devices a tensor can live on and a kernel can run on.
#pragma once

#include <cstdint>
#include <string_view>

namespace campo {

// `cpu_strict` (--device cpu:strict): the CPU's kernels over host memory that refuses host
// access like a GPU's (runtime/strict_backend.h), a debugging device for backend authors that
// proves every host boundary of a run goes through the backend's copies.
enum class Device : uint8_t { cpu, cuda, cpu_strict };

const char* device_name(Device d);
Device parse_device(std::string_view s);

}  // namespace campo
