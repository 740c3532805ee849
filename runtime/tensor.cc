#include "runtime/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

namespace campo {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

std::string compact_shape(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + "]";
}

void* alloc_host(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  CAMPO_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
  return p;
}

void free_host(void* p) { std::free(p); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  CAMPO_CHECK(device == Device::cpu, "Tensor::empty: only host tensors are allocated here");
  for (int64_t d : shape) CAMPO_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape));
  Tensor t;
  size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  void* p = alloc_host(bytes);
  t.storage_ = std::shared_ptr<void>(p, free_host);
  t.data_ = p;
  t.shape_ = shape;
  t.has_shape_ = true;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_zero();
  return t;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t;
  t.data_ = data;
  t.shape_ = shape;
  t.has_shape_ = true;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::from_storage(std::shared_ptr<void> storage, const Shape& shape, DType dtype,
                            Device device) {
  Tensor t;
  t.data_ = storage.get();
  t.storage_ = std::move(storage);
  t.shape_ = shape;
  t.has_shape_ = true;
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& shape) {
  CAMPO_CHECK(int64_t(v.size()) == shape_numel(shape), "from_vector: ", v.size(),
              " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::f32);
  if (!v.empty()) std::memcpy(t.data_, v.data(), v.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_vector(const std::vector<int32_t>& v, const Shape& shape) {
  CAMPO_CHECK(int64_t(v.size()) == shape_numel(shape), "from_vector: ", v.size(),
              " values for shape ", shape_str(shape));
  Tensor t = empty(shape, DType::i32);
  if (!v.empty()) std::memcpy(t.data_, v.data(), v.size() * sizeof(int32_t));
  return t;
}

Tensor Tensor::reshaped(const Shape& shape) const {
  CAMPO_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_str(shape_), " to ",
              shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone() const {
  check_host_access();
  Tensor t = empty(shape_, dtype_, device_);
  if (nbytes()) std::memcpy(t.data_, data_, nbytes());
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  CAMPO_CHECK(src.dtype_ == dtype_ && src.numel() == numel(), "copy_from: ", dtype_name(src.dtype_),
              shape_str(src.shape_), " into ", dtype_name(dtype_), shape_str(shape_));
  check_host_access();
  src.check_host_access();
  if (nbytes() && src.data_ != data_) std::memmove(data_, src.data_, nbytes());
}

void Tensor::fill_zero() {
  check_host_access();
  if (nbytes()) std::memset(data_, 0, nbytes());
}

std::vector<float> Tensor::to_float_vector() const {
  check_host_access();
  std::vector<float> out(static_cast<size_t>(numel()));
  switch (dtype_) {
    case DType::f32:
      if (!out.empty()) std::memcpy(out.data(), data_, nbytes());
      break;
    case DType::f16:
    case DType::bf16:
      convert(data_, dtype_, out.data(), DType::f32, out.size());
      break;
    case DType::i32:
      for (size_t i = 0; i < out.size(); ++i) out[i] = float(static_cast<int32_t*>(data_)[i]);
      break;
    case DType::i64:
      for (size_t i = 0; i < out.size(); ++i) out[i] = float(static_cast<int64_t*>(data_)[i]);
      break;
  }
  return out;
}

}  // namespace campo
