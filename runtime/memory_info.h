// How much memory the process uses and the machine has left: for the executor's check that
// a step's memory plan fits before any work is spent, and for the resident-memory figures
// of --metrics and the result JSON.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "runtime/check.h"

namespace campo {

// The host memory a new allocation can still get: /proc/meminfo's MemAvailable, lowered to
// what the process's cgroup (v2: memory.max - memory.current) leaves. Unset where neither
// can be read.
std::optional<size_t> host_available_memory();
// The process's resident memory now (/proc/self/statm) and at its peak (getrusage); 0 where
// unknown.
size_t resident_memory_bytes();
size_t peak_resident_memory_bytes();

// "1.5 GiB", "320.0 MiB": a byte count as a person reads it.
std::string format_bytes(size_t bytes);

// A step whose memory plan needs more than the device has: thrown by the executor before it
// allocates (graph/executor.h), so that a run stops before any work with the figures.
class MemoryShortfall : public Error {
 public:
  MemoryShortfall(size_t needed, size_t available, const std::string& device);
  size_t needed() const { return needed_; }
  size_t available() const { return available_; }

 private:
  size_t needed_, available_;
};

}  // namespace campo
