// CUDA AllFinite against the CPU kernel (ops/cpu/all_finite.cc): finite inputs of mixed
// dtypes and odd sizes (tails of the 16-byte loads and of the chunks), an inf or a NaN
// planted at the last element of the last tensor, the first element of the first, more
// inputs than one launch takes, empty inputs, and an input view that is not 16-byte aligned.
// The flag is exactly 0 or 1 on both sides, so the comparison is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;

const testing::Tolerance kExact{0.0, 0.0};

// Gradients of mixed dtypes and sizes 1, 7, 1000003, ...
std::vector<Tensor> gradients(Rng& rng) {
  return {
      random_tensor_of(DType::f32, {1}, rng),     random_tensor_of(DType::f16, {7}, rng),
      random_tensor_of(DType::bf16, {3, 5}, rng), random_tensor_of(DType::f32, {1000003}, rng),
      random_tensor_of(DType::f16, {16385}, rng), random_tensor_of(DType::bf16, {40000, 3}, rng),
      random_tensor_of(DType::f32, {17, 33}, rng)};
}

// Writes `value` (rounded to the tensor's dtype) into element `i` of host tensor `t`.
void plant(Tensor& t, int64_t i, float value) {
  Tensor one = Tensor::empty({1}, t.dtype());
  convert(&value, DType::f32, one.data(), t.dtype(), 1);
  const size_t size = dtype_size(t.dtype());
  std::memcpy(static_cast<char*>(t.data()) + size_t(i) * size, one.data(), size);
}

::testing::AssertionResult flag_matches(Backend& gpu, const std::vector<Tensor>& in) {
  return cuda_matches_cpu(gpu, OpKind::AllFinite, NoAttrs{}, DType::f32, in, {{{}, DType::f32}},
                          kExact);
}

float gpu_flag(Backend& gpu, const std::vector<Tensor>& host) {
  ExecContext ctx(std::shared_ptr<Backend>(&gpu, [](Backend*) {}));
  std::vector<Tensor> device;
  for (const Tensor& t : host) device.push_back(gpu.to_device(t));
  return gpu.read_scalar(
      run_op_eager(OpKind::AllFinite, NoAttrs{}, DType::f32, device, {{{}, DType::f32}}, ctx)[0]);
}

TEST(AllFiniteCudaTest, FiniteInputs) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(41);
  const std::vector<Tensor> in = gradients(rng);
  EXPECT_TRUE(flag_matches(*gpu, in));
  EXPECT_EQ(gpu_flag(*gpu, in), 1.0f);
}

TEST(AllFiniteCudaTest, InfOrNanAtTheLastElementOfTheLastTensor) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(42);
  for (DType last : {DType::f32, DType::f16, DType::bf16})
    for (float bad :
         {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<Tensor> in = gradients(rng);
      in.push_back(random_tensor_of(last, {1000003}, rng));
      plant(in.back(), in.back().numel() - 1, bad);
      EXPECT_TRUE(flag_matches(*gpu, in)) << dtype_name(last) << " " << bad;
      EXPECT_EQ(gpu_flag(*gpu, in), 0.0f) << dtype_name(last) << " " << bad;
    }
}

TEST(AllFiniteCudaTest, NanAtTheFirstElement) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(43);
  std::vector<Tensor> in = gradients(rng);
  plant(in.front(), 0, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(gpu_flag(*gpu, in), 0.0f);
}

// f16's range ends at 65504: a value that overflows when rounded to f16 is inf there.
TEST(AllFiniteCudaTest, F16Overflow) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(44);
  Tensor t = random_tensor_of(DType::f16, {33}, rng);
  plant(t, 32, 70000.0f);
  EXPECT_EQ(gpu_flag(*gpu, {t}), 0.0f);
}

// More inputs than one launch's table holds (96), the bad value in the last launch.
TEST(AllFiniteCudaTest, ManyInputs) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(45);
  std::vector<Tensor> in;
  for (int i = 0; i < 250; ++i)
    in.push_back(random_tensor_of(i % 2 ? DType::f16 : DType::f32, {i % 37 + 1}, rng));
  EXPECT_EQ(gpu_flag(*gpu, in), 1.0f);
  plant(in.back(), in.back().numel() - 1, std::numeric_limits<float>::infinity());
  EXPECT_TRUE(flag_matches(*gpu, in));
  EXPECT_EQ(gpu_flag(*gpu, in), 0.0f);
}

TEST(AllFiniteCudaTest, EmptyInputs) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  EXPECT_EQ(gpu_flag(*gpu, {Tensor::empty({0}, DType::f32), Tensor::empty({2, 0}, DType::f16)}),
            1.0f);
}

// A gradient that is a view at an odd offset of a larger buffer (no 16-byte loads there).
TEST(AllFiniteCudaTest, UnalignedView) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(46);
  Tensor whole = random_tensor_of(DType::f32, {1001}, rng);
  plant(whole, 1000, std::numeric_limits<float>::quiet_NaN());
  const Tensor device = gpu->to_device(whole);
  ExecContext ctx(gpu);
  // Elements [3, 1001) viewed as their own tensor: the address is 12 bytes past alignment.
  const Tensor view =
      Tensor::borrow(device.device_data<float>() + 3, {998}, DType::f32, device.device());
  EXPECT_EQ(gpu->read_scalar(run_op_eager(OpKind::AllFinite, NoAttrs{}, DType::f32, {view},
                                          {{{}, DType::f32}}, ctx)[0]),
            0.0f);
}

}  // namespace
}  // namespace campo
