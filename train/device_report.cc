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
    queued_ = strict->queued_copies;
    host_syncs_ = strict->host_syncs;
  }
  if (const ConvAlgoCache* cache = backend_->conv_algo_cache()) conv_algos_ = cache->counts();
}

void DeviceReport::add_to(nlohmann::json& j) const {
  j["device"] = backend_->device().str();
  j["deterministic"] = backend_->deterministic();
  if (const ConvAlgoCache* cache = backend_->conv_algo_cache()) {
    const ConvAlgoCache::Counts now = cache->counts();
    j["conv_algo_search"] = {{"searches", now.searches - conv_algos_.searches},
                             {"reused", now.hits - conv_algos_.hits},
                             {"seconds", now.search_seconds - conv_algos_.search_seconds}};
  }
  if (const auto* strict = dynamic_cast<const StrictCpuBackend*>(backend_.get())) {
    j["host_copies"] = {{"to_device", strict->to_device_copies - to_device_},
                        {"to_host", strict->to_host_copies - to_host_},
                        {"uploads", strict->uploads - uploads_},
                        {"queued", strict->queued_copies - queued_},
                        {"host_syncs", strict->host_syncs - host_syncs_}};
    j["default_cpu_allocations"] = default_cpu_allocations() - default_cpu_allocations_;
  }
}

}  // namespace campo
