// What a command's run did on its device, for its JSON result: the device it ran on and,
// on --device cpu:strict (runtime/strict_backend.h), the copies that crossed the host
// boundary and the default CPU backend's allocations during the run: 0 proves that every
// buffer of the run came from the named backend, as the CLI tests check for every command.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>

#include "runtime/backend.h"

namespace campo {

class DeviceReport {
 public:
  // Counts from now: make it before the run's first allocation (its session or graphs).
  explicit DeviceReport(std::shared_ptr<Backend> backend);
  // "device", "deterministic" (Backend::deterministic: --deterministic), where the device
  // has a cuDNN algorithm cache "conv_algo_search" {searches, reused, seconds} (since
  // construction); on cpu:strict also "host_copies" {to_device, to_host, uploads: the input
  // prefetch's, train/prefetch.h, queued: per-step values copied in queue order, both also
  // counted in to_device; host_syncs: the calls that would wait for a GPU} (since
  // construction) and "default_cpu_allocations".
  void add_to(nlohmann::json& j) const;
  const std::shared_ptr<Backend>& backend() const { return backend_; }

 private:
  std::shared_ptr<Backend> backend_;
  int64_t default_cpu_allocations_ = 0, to_device_ = 0, to_host_ = 0, uploads_ = 0, queued_ = 0,
          host_syncs_ = 0;
  ConvAlgoCache::Counts conv_algos_;
};

}  // namespace campo
