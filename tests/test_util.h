// Shared test helpers: tolerances per dtype, random tensors, closeness checks.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace campo::testing {

// Sets an environment variable (or unsets it, given nullopt) for one scope, restoring what
// was there before.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value)
      setenv(name_.c_str(), value->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Whether this build and machine have a CUDA backend: tests of the error line for a
// missing GPU skip where there is one.
inline bool have_cuda_backend() {
  try {
    (void)make_backend({Device::cuda, 0});
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Runs fn, expects a campo::Error, and returns its message, checked to be one line (a test
// failure, and "", when nothing or something else is thrown).
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const campo::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected campo::Error, got std::exception: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a campo::Error, nothing was thrown";
  return "";
}

// Passes when `text` contains `part`; prints both otherwise.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << text << "\"\n  does not contain \"" << part << "\"";
}

// A fresh directory under the system temp directory, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("campo_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // Writes `text` to the file `name` in the directory; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = file(name);
    std::ofstream(path) << text;
    return path;
  }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Tolerances per dtype (rtol / atol), loosened per op only with a comment saying why.
struct Tolerance {
  double rtol, atol;
};
inline Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::f16:
      return {1e-3, 1e-5};
    case DType::bf16:
      return {1.6e-2, 1e-5};
    default:
      return {1.3e-6, 1e-5};
  }
}

// The inputs of a classifier's training step (graph::Executable or alike): normal random
// "images", labels uniform in [0, classes), loss scale 1, learning rate `lr`.
template <typename Executable>
void fill_classifier_step_inputs(Executable& exe, uint64_t seed, int classes, float lr) {
  Rng rng(seed);
  Tensor& x = exe.input("images");
  for (int64_t i = 0; i < x.numel(); ++i) x.template data_as<float>()[i] = rng.normal();
  Tensor& y = exe.input("labels");
  for (int64_t i = 0; i < y.numel(); ++i)
    y.template data_as<int32_t>()[i] = int32_t(rng.below(uint64_t(classes)));
  exe.input("loss_scale").template data_as<float>()[0] = 1.0f;
  exe.input("lr").template data_as<float>()[0] = lr;
}

inline Tensor random_tensor(const Shape& shape, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::f32);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
  return t;
}

// Asserts |actual - expected| <= atol + rtol * |expected| element-wise; reports the first
// few offending indices.
inline ::testing::AssertionResult all_close(const std::vector<float>& actual,
                                            const std::vector<float>& expected, double rtol,
                                            double atol) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected " << expected.size();
  int bad = 0;
  std::string msg;
  double worst = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double a = actual[i], e = expected[i];
    double err = std::fabs(a - e);
    bool ok = err <= atol + rtol * std::fabs(e) || (std::isnan(a) && std::isnan(e));
    if (!ok) {
      worst = std::max(worst, err);
      if (bad < 5)
        msg += " [" + std::to_string(i) + "] " + std::to_string(a) + " vs " + std::to_string(e);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements differ (worst abs error " << worst
         << "):" << msg;
}

inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected,
                                            double rtol, double atol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  return all_close(actual.to_float_vector(), expected.to_float_vector(), rtol, atol);
}

}  // namespace campo::testing
