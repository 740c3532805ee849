#include "runtime/backend.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>

#include "runtime/check.h"
#include "runtime/hash.h"

namespace campo {

std::string DeviceSpec::str() const {
  if (type == Device::cuda) return "cuda:" + std::to_string(index);
  return device_name(type);
}

DeviceSpec parse_device_spec(std::string_view s) {
  const std::string text(s);
  if (s == "cpu") return {Device::cpu, 0};
  if (s == "cpu:strict") return {Device::cpu_strict, 0};
  if (s == "cuda" || s == "gpu") return {Device::cuda, 0};
  for (std::string_view prefix : {"cuda:", "gpu:"}) {
    if (s.substr(0, prefix.size()) != prefix) continue;
    const std::string_view number = s.substr(prefix.size());
    int index = -1;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), index);
    CAMPO_CHECK(
        !number.empty() && ec == std::errc() && end == number.data() + number.size() && index >= 0,
        "--device '", text, "': the GPU index must be a number 0 or more (cuda:0)");
    return {Device::cuda, index};
  }
  CAMPO_FAIL("--device '", text, "' is not a device (expected cpu, cuda, cuda:N or cpu:strict)");
}

const BackendIdentity::Field* BackendIdentity::find(std::string_view name) const {
  for (const Field& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

std::string BackendIdentity::hardware_hash() const {
  std::string key = kind;
  for (const Field& f : fields)
    if (!f.is_version) key += "|" + f.value;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a64(key)));
  return buf;
}

const char* cuda_graph_mode_name(CudaGraphMode mode) {
  switch (mode) {
    case CudaGraphMode::automatic:
      return "auto";
    case CudaGraphMode::on:
      return "on";
    case CudaGraphMode::off:
      return "off";
  }
  return "?";
}

CudaGraphMode parse_cuda_graph_mode(std::string_view s) {
  for (CudaGraphMode m : {CudaGraphMode::automatic, CudaGraphMode::on, CudaGraphMode::off})
    if (s == cuda_graph_mode_name(m)) return m;
  CAMPO_FAIL("--cuda-graph '", std::string(s), "': expected auto, on or off");
}

std::string Backend::capture_unsupported() const {
  return "the " + device().str() + " backend runs each kernel on the host as it is issued";
}

void Backend::begin_capture() {
  CAMPO_FAIL("internal: begin_capture on a backend that cannot capture: ", capture_unsupported());
}

std::unique_ptr<CapturedWork> Backend::end_capture() {
  CAMPO_FAIL("internal: end_capture on a backend that cannot capture: ", capture_unsupported());
}

std::string Backend::counters_unavailable() const {
  return "the " + device().str() + " backend reads no hardware counters";
}

std::unique_ptr<NodeCounterReader> Backend::make_counter_reader(size_t, std::string& why) {
  why = counters_unavailable();
  return nullptr;
}

void Backend::upload(const Tensor& staged, const void* src) { copy_from_host(staged, src); }

void Backend::queue_copy_from_host(const Tensor& dst, const void* src) {
  CAMPO_CHECK(dst.nbytes() <= kQueuedCopyMax, "internal: a queued copy of ", dst.nbytes(),
              " bytes (at most ", kQueuedCopyMax, ")");
  copy_from_host(dst, src);
}

void Backend::land_uploads(const std::vector<UploadCopy>& copies) {
  for (const auto& [dst, staged] : copies) {
    CAMPO_CHECK(dst->nbytes() == staged->nbytes(), "internal: landing an upload of ",
                staged->nbytes(), " bytes in a tensor of ", dst->nbytes());
    copy(*dst, *staged);
  }
}

void Backend::set_cuda_graph(CudaGraphMode mode) {
  if (mode == CudaGraphMode::on) {
    const std::string why = capture_unsupported();
    CAMPO_CHECK(why.empty(), "--cuda-graph on: ", why, "; CUDA graphs need --device cuda");
  }
  cuda_graph_ = mode;
}

Tensor Backend::wrap(std::shared_ptr<void> storage, const Shape& shape, DType dtype) const {
  return Tensor::from_storage(std::move(storage), shape, dtype, device().type);
}

Tensor Backend::empty(const Shape& shape, DType dtype) {
  for (int64_t d : shape) CAMPO_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  return wrap(allocate(size_t(shape_numel(shape)) * dtype_size(dtype)), shape, dtype);
}

Tensor Backend::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  fill_zero(t);
  return t;
}

Tensor Backend::to_device(const Tensor& host) {
  Tensor t = empty(host.shape(), host.dtype());
  if (t.nbytes()) copy_from_host(t, host.data());
  return t;
}

Tensor Backend::to_host(const Tensor& t) {
  CAMPO_CHECK(t.device() == device().type, "to_host: a ", device_name(t.device()),
              " tensor given to the ", device().str(), " backend");
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  if (t.nbytes()) copy_to_host(host.data(), t);
  return host;
}

void Backend::write(const Tensor& dst, const Tensor& host) {
  CAMPO_CHECK(dst.device() == device().type, "write: a ", device_name(dst.device()),
              " tensor given to the ", device().str(), " backend");
  CAMPO_CHECK(host.dtype() == dst.dtype() && host.numel() == dst.numel(),
              "write: ", dtype_name(host.dtype()), shape_str(host.shape()), " into ",
              dtype_name(dst.dtype()), shape_str(dst.shape()));
  if (dst.nbytes()) copy_from_host(dst, host.data());
}

float Backend::read_scalar(const Tensor& t) {
  CAMPO_CHECK(t.dtype() == DType::f32 && t.numel() == 1, "read_scalar: ", dtype_name(t.dtype()),
              shape_str(t.shape()), " is not an f32 scalar");
  float v = 0;
  copy_to_host(&v, t);
  return v;
}

void Backend::write_scalar(const Tensor& dst, float value) {
  CAMPO_CHECK(dst.dtype() == DType::f32 && dst.numel() == 1,
              "write_scalar: ", dtype_name(dst.dtype()), shape_str(dst.shape()),
              " is not an f32 scalar");
  CAMPO_CHECK(dst.device() == device().type, "write_scalar: a ", device_name(dst.device()),
              " tensor given to the ", device().str(), " backend");
  queue_copy_from_host(dst, &value);
}

namespace {
std::map<Device, BackendFactory>& backend_registry() {
  static std::map<Device, BackendFactory> r;
  return r;
}
}  // namespace

void register_backend(Device type, BackendFactory factory) { backend_registry()[type] = factory; }

std::shared_ptr<Backend> make_backend(const DeviceSpec& spec) {
  auto it = backend_registry().find(spec.type);
  if (it == backend_registry().end()) {
    CAMPO_CHECK(spec.type != Device::cuda, "--device ", spec.str(),
                ": this build has no CUDA backend (it was built without nvcc, or with "
                "-DCAMPO_CUDA=OFF); use --device cpu");
    CAMPO_FAIL("no backend for device ", spec.str());
  }
  return it->second(spec);
}

std::shared_ptr<Backend> required_backend(std::shared_ptr<Backend> backend) {
  CAMPO_CHECK(backend != nullptr,
              "internal: no backend given (a session or variable store runs "
              "on its run's backend, never on a default one)");
  return backend;
}

}  // namespace campo
