#include "runtime/cpu_backend.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <oneapi/dnnl/dnnl.hpp>
#include <thread>

#include "runtime/check.h"
#include "runtime/memory_info.h"

namespace campo {

struct CpuBackend::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

CpuBackend::CpuBackend() : impl_(std::make_unique<Impl>()) {
  const char* mode = std::getenv("CAMPO_CPU_BF16");
  if (mode != nullptr && *mode != '\0') {
    CAMPO_CHECK(std::strcmp(mode, "native") == 0 || std::strcmp(mode, "emulate") == 0,
                "CAMPO_CPU_BF16 must be 'native' or 'emulate', got '", mode, "'");
    native_bf16_allowed_ = std::strcmp(mode, "native") == 0;
  }
}
CpuBackend::~CpuBackend() = default;

dnnl::engine& CpuBackend::engine() { return impl_->engine; }
dnnl::stream& CpuBackend::stream() { return impl_->stream; }

std::string CpuBackend::describe() const {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 1);
      model.erase(0, model.find_first_not_of(" \t"));
      break;
    }
  return "cpu: " + model + ", " + std::to_string(std::thread::hardware_concurrency()) +
         " logical cores";
}

std::optional<size_t> CpuBackend::available_memory() const { return host_available_memory(); }

std::shared_ptr<void> CpuBackend::allocate(size_t bytes) {
  ++allocations_;
  return std::shared_ptr<void>(alloc_host(bytes), free_host);
}

void CpuBackend::copy_from_host(const Tensor& dst, const void* src) {
  if (dst.nbytes()) std::memmove(dst.device_data(), src, dst.nbytes());
}

void CpuBackend::copy_to_host(void* dst, const Tensor& src) {
  if (src.nbytes()) std::memmove(dst, src.device_data(), src.nbytes());
}

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  CAMPO_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "copy: ",
              dtype_name(src.dtype()), shape_str(src.shape()), " into ", dtype_name(dst.dtype()),
              shape_str(dst.shape()));
  if (dst.nbytes() && dst.device_data() != src.device_data())
    std::memmove(dst.device_data(), src.device_data(), dst.nbytes());
}

void CpuBackend::fill_zero(const Tensor& t) {
  if (t.nbytes()) std::memset(t.device_data(), 0, t.nbytes());
}

std::unique_ptr<NodeTimer> CpuBackend::make_timer(size_t slots) {
  return std::make_unique<HostNodeTimer>(slots);
}

namespace {
std::shared_ptr<Backend> make_cpu_backend(const DeviceSpec& spec) {
  CAMPO_CHECK(spec.index == 0, "--device ", spec.str(), ": the CPU has no index (use cpu)");
  return std::make_shared<CpuBackend>();
}

const bool cpu_registered = (register_backend(Device::cpu, make_cpu_backend), true);
}  // namespace

void HostNodeTimer::start(size_t) { timer_.reset(); }
void HostNodeTimer::stop(size_t slot) { ms_.at(slot) = timer_.milliseconds(); }

std::shared_ptr<Backend> default_cpu_backend() {
  static const std::shared_ptr<Backend> backend = make_backend({Device::cpu, 0});
  return backend;
}

}  // namespace campo
