#include "train/device_report.h"

#include <nlohmann/json.hpp>

#include "runtime/cpu_backend.h"
#include "runtime/strict_backend.h"

namespace campo {
namespace {

int64_t default_cpu_allocations() {
  return dynamic_cast<const CpuBackend&>(*default_cpu_backend()).allocation_count();
}

}  // namespace

DeviceReport::DeviceReport(std::shared_ptr<Backend> backend)
    : backend_(std::move(backend)), default_cpu_allocations_(default_cpu_allocations()) {
  if (const auto* strict = dynamic_cast<const StrictCpuBackend*>(backend_.get())) {
    to_device_ = strict->to_device_copies;
    to_host_ = strict->to_host_copies;
    uploads_ = strict->uploads;
  }
}

void DeviceReport::add_to(nlohmann::json& j) const {
  j["device"] = backend_->device().str();
  if (const auto* strict = dynamic_cast<const StrictCpuBackend*>(backend_.get())) {
    j["host_copies"] = {{"to_device", strict->to_device_copies - to_device_},
                        {"to_host", strict->to_host_copies - to_host_},
                        {"uploads", strict->uploads - uploads_}};
    j["default_cpu_allocations"] = default_cpu_allocations() - default_cpu_allocations_;
  }
}

}  // namespace campo
