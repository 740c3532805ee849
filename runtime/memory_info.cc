#include "runtime/memory_info.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace campo {

namespace {

// The first number in a file ("max" and unreadable files: unset).
std::optional<size_t> read_number(const char* path) {
  std::ifstream in(path);
  unsigned long long v = 0;
  if (in >> v) return size_t(v);
  return std::nullopt;
}

}  // namespace

std::optional<size_t> host_available_memory() {
  std::optional<size_t> available;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  unsigned long long kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") {
      available = size_t(kib) * 1024;
      break;
    }
  const std::optional<size_t> limit = read_number("/sys/fs/cgroup/memory.max");
  const std::optional<size_t> used = read_number("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const size_t left = *limit > *used ? *limit - *used : 0;
    available = available ? std::min(*available, left) : left;
  }
  return available;
}

size_t resident_memory_bytes() {
  std::ifstream statm("/proc/self/statm");
  unsigned long long pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return size_t(resident) * size_t(::sysconf(_SC_PAGESIZE));
}

size_t peak_resident_memory_bytes() {
  rusage usage{};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return size_t(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string format_bytes(size_t bytes) {
  char text[32];
  if (bytes >= (size_t(1) << 30))
    std::snprintf(text, sizeof text, "%.1f GiB", double(bytes) / double(size_t(1) << 30));
  else
    std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / double(size_t(1) << 20));
  return text;
}

MemoryShortfall::MemoryShortfall(size_t needed, size_t available, const std::string& device)
    : Error("the step needs " + format_bytes(needed) +
                " (its memory plan: activations, gradients and inputs), more than the " +
                format_bytes(available) + " available on " + device,
            ""),
      needed_(needed),
      available_(available) {}

}  // namespace campo
