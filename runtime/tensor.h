// Tensor: a shape, an element type, a device and a view into storage.
// Storage is either owned (64-byte aligned memory of its device, shared by views) or
// borrowed (the caller keeps it alive). Host code reads and writes only CPU tensors
// (data / data_as check it); a tensor of another device is reached through its Backend's
// copies (runtime/backend.h), and by kernels of that device through device_data. Tensors are always dense and row-major (NCHW for images,
// OIHW for convolution filters, as PyTorch).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/check.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace campo {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[64, 1, 28, 28]"
std::string compact_shape(const Shape& s);  // "[64,1,28,28]": plans' tables, messages

// 64-byte aligned host allocation; freed with free_host.
void* alloc_host(size_t bytes);
void free_host(void* p);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::f16; }  // raw bits; f16 or bf16

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu);
  static Tensor borrow(void* data, const Shape& shape, DType dtype, Device device = Device::cpu);
  // Owned storage of any device (Backend::empty).
  static Tensor from_storage(std::shared_ptr<void> storage, const Shape& shape, DType dtype,
                             Device device);
  // A copy of host floats (or ints) as a new owned tensor.
  static Tensor from_vector(const std::vector<float>& v, const Shape& shape);
  static Tensor from_vector(const std::vector<int32_t>& v, const Shape& shape);

  bool defined() const { return data_ != nullptr || (shape_numel(shape_) == 0 && has_shape_); }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return int(shape_.size()); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  // Host access: only for CPU tensors (anything else throws, naming the device).
  void* data() const {
    check_host_access();
    return data_;
  }
  // Typed host access; checks the element type (uint16_t accepts f16 and bf16).
  template <typename T>
  T* data_as() const {
    check_host_access();
    return device_data<T>();
  }
  // The address as the tensor's own device sees it: for kernels of that device.
  template <typename T = void>
  T* device_data() const {
    if constexpr (std::is_void_v<T>) return data_;
    else return typed<T>();
  }
  bool is_host() const { return device_ == Device::cpu; }

 private:
  void check_host_access() const {
    CAMPO_CHECK(device_ == Device::cpu, "a ", device_name(device_),
                " tensor was read or written from the host; copy it through its backend "
                "(Backend::to_host / write)");
  }
  template <typename T>
  T* typed() const {
    if constexpr (std::is_same_v<T, uint16_t>) {
      CAMPO_CHECK(dtype_ == DType::f16 || dtype_ == DType::bf16, "tensor of type ",
                  dtype_name(dtype_), " accessed as 16-bit float");
    } else {
      CAMPO_CHECK(dtype_ == dtype_of<T>(), "tensor of type ", dtype_name(dtype_),
                  " accessed as ", dtype_name(dtype_of<T>()));
    }
    return static_cast<T*>(data_);
  }

 public:
  // A view with another shape of the same number of elements.
  Tensor reshaped(const Shape& shape) const;
  // A deep copy (host tensors).
  Tensor clone() const;
  // Copies the bytes of src (same dtype and numel) into this tensor (host tensors).
  void copy_from(const Tensor& src);
  void fill_zero();  // host tensors
  // Host values as floats (converting f16/bf16/ints); for tests and logging.
  std::vector<float> to_float_vector() const;

 private:
  std::shared_ptr<void> storage_;
  void* data_ = nullptr;
  Shape shape_;
  bool has_shape_ = false;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
};

}  // namespace campo
