#include "runtime/cpu_backend.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <oneapi/dnnl/dnnl.hpp>
#include <thread>

#include "runtime/check.h"
#include "runtime/cpu_features.h"
#include "runtime/memory_info.h"

namespace campo {

struct CpuBackend::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

namespace {
// CAMPO_CPU_BF16 / CAMPO_CPU_F16: unset, empty or `native` -> true; `emulate` -> false.
bool native_allowed_by(const char* variable) {
  const char* mode = std::getenv(variable);
  if (mode == nullptr || *mode == '\0') return true;
  CAMPO_CHECK(std::strcmp(mode, "native") == 0 || std::strcmp(mode, "emulate") == 0, variable,
              " must be 'native' or 'emulate', got '", mode, "'");
  return std::strcmp(mode, "native") == 0;
}
}  // namespace

CpuBackend::CpuBackend()
    : impl_(std::make_unique<Impl>()),
      native_bf16_allowed_(native_allowed_by("CAMPO_CPU_BF16")),
      native_f16_allowed_(native_allowed_by("CAMPO_CPU_F16")) {}
CpuBackend::~CpuBackend() = default;

dnnl::engine& CpuBackend::engine() { return impl_->engine; }
dnnl::stream& CpuBackend::stream() { return impl_->stream; }

std::string CpuBackend::describe() const {
  const std::string model = cpu_model_name();
  return "cpu: " + (model == "unknown" ? "unknown CPU" : model) + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " logical cores";
}

BackendIdentity CpuBackend::identity() const {
  BackendIdentity id;
  id.kind = device_name(device().type);
  id.fields = {
      {"cpu_model", cpu_model_name()},
      {"logical_cores", std::to_string(std::thread::hardware_concurrency())},
      {"onednn_isa", onednn_isa_name()},
      {"onednn_version", onednn_version(), /*is_version=*/true},
      {"native_bf16", cpu_has_native_bf16() && allows_native_low_precision() ? "true" : "false",
       false, "CAMPO_CPU_BF16"},
      {"native_f16", cpu_has_native_f16() && allows_native_f16() ? "true" : "false", false,
       "CAMPO_CPU_F16", /*absent_means=*/"false"},
  };
  return id;
}

std::string CpuBackend::counters_unavailable() const {
  const std::string none = "the " + device().str() + " backend reads no hardware counters per node";
  std::ifstream paranoid_file("/proc/sys/kernel/perf_event_paranoid");
  int paranoid = 99;
  if (!(paranoid_file >> paranoid))
    return none + " (/proc/sys/kernel/perf_event_paranoid unreadable)";
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.type = PERF_TYPE_HARDWARE;
  attr.size = sizeof attr;
  attr.config = PERF_COUNT_HW_INSTRUCTIONS;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  const long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
  const std::string where = ", perf_event_paranoid " + std::to_string(paranoid) + ")";
  if (fd < 0) return none + " (perf_event_open(instructions): " + std::strerror(errno) + where;
  close(int(fd));
  return none + " (perf_event_open(instructions) works" + where;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    return name;
  }
  return "unknown";
}

std::string onednn_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx_fp16:
      return "avx512_core_amx_fp16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_fp16:
      return "avx512_core_fp16";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni_2:
      return "avx2_vnni_2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    default:
      return "other";
  }
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

namespace {
// Whether oneDNN's effective ISA includes `isa` (the ISA values are sets of feature bits).
bool onednn_isa_includes(dnnl::cpu_isa isa) {
  return (unsigned(dnnl::get_effective_cpu_isa()) & unsigned(isa)) == unsigned(isa);
}
}  // namespace

bool cpu_has_native_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") &&
                          onednn_isa_includes(dnnl::cpu_isa::avx512_core_bf16);
  return has;
}

bool cpu_has_native_f16() {
  static const bool has = __builtin_cpu_supports("avx512f") &&
                          cpu_has_avx512_fp16_instructions() &&
                          onednn_isa_includes(dnnl::cpu_isa::avx512_core_fp16);
  return has;
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
  CAMPO_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(),
              "copy: ", dtype_name(src.dtype()), shape_str(src.shape()), " into ",
              dtype_name(dst.dtype()), shape_str(dst.shape()));
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
