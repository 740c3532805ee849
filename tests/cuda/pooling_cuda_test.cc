// The CUDA pooling kernels (ops/cuda/pooling.cu) against the CPU kernels on the same inputs,
// per dtype: MaxPool (y and argmax), MaxPoolGrad (from the CPU's argmax), AvgPool and
// AvgPoolGrad in both count_include_pad modes, with the windows the models use (ResNet's 3x3
// stride 2 padding 1, VGG / LeNet's 2x2 stride 2, global average pooling) on odd sizes, plus
// ties and NaNs for the max. Skipped, saying why, without a GPU.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|):
//  - MaxPool, MaxPoolGrad: exact (0, 0). The max, its argmax (same tie and NaN rule) and the
//    gradient's f32 additions in the same order are the CPU's.
//  - AvgPool, AvgPoolGrad: the same operations in the same order as the CPU's except global
//    pools, whose forward sum the CPU takes in SIMD lanes: a reordered f32 sum of at most 49
//    terms in [-1, 1] (~1e-6 absolute), then one rounding to the dtype on each side. f32
//    rtol 1e-6, atol 1e-6; f16 / bf16 one ulp of the dtype (2^-10, 2^-7) + atol 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"

namespace campo {
namespace {

using testing::cuda_matches_cpu;
using testing::random_tensor_of;
using testing::Tolerance;

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};
constexpr Tolerance kExact = {0, 0};

Tolerance avg_tolerance(DType t) {
  switch (t) {
    case DType::f16:
      return {1.0 / 1024, 1e-6};
    case DType::bf16:
      return {1.0 / 128, 1e-6};
    default:
      return {1e-6, 1e-6};
  }
}

PoolAttrs window(int kh, int kw, int sh, int sw, int ph, int pw, bool count_include_pad = false) {
  PoolAttrs a;
  a.kernel_h = kh, a.kernel_w = kw;
  a.stride_h = sh, a.stride_w = sw;
  a.pad_h = ph, a.pad_w = pw;
  a.count_include_pad = count_include_pad;
  return a;
}
PoolAttrs square(int k, int s, int p) { return window(k, k, s, s, p, p); }

struct PoolCase {
  std::string name;
  Shape x;
  PoolAttrs attrs;
};

std::vector<PoolCase> pool_cases() {
  return {
      {"resnet_stem_3x3_s2_p1", {3, 5, 17, 17}, square(3, 2, 1)},
      {"k2s2", {2, 3, 8, 8}, square(2, 2, 0)},
      {"k2s2_odd_drops_last", {3, 2, 7, 9}, square(2, 2, 0)},
      {"non_square_window", {2, 3, 9, 8}, window(3, 2, 2, 1, 1, 0)},
      {"overlapping_stride1", {1, 2, 6, 5}, square(3, 1, 1)},
      {"global_7x7", {3, 7, 7, 7}, square(7, 1, 0)},
      {"global_non_square", {1, 3, 4, 6}, window(4, 6, 1, 1, 0, 0)},
      {"batch1_single_channel", {1, 1, 5, 5}, square(2, 1, 0)},
      // Rows of more than 8 output columns (the CPU's AvgPool scales those by the reciprocal).
      {"wide_stem", {2, 3, 20, 37}, square(3, 2, 1)},
      {"wide_stride3", {1, 2, 7, 50}, square(3, 3, 1)},
  };
}

// Values on a grid of 0.25 in [-1, 1]: many ties in every window.
Tensor tied_tensor(DType t, const Shape& shape, Rng& rng) {
  Tensor f = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i)
    f.data_as<float>()[i] = std::floor(rng.uniform(-4.0f, 4.0f)) * 0.25f;
  if (t == DType::f32) return f;
  Tensor out = Tensor::empty(shape, t);
  convert(f.data(), DType::f32, out.data(), t, size_t(f.numel()));
  return out;
}

// The CPU's MaxPool outputs {y, argmax} for x.
std::vector<Tensor> cpu_max_pool(const Tensor& x, const PoolAttrs& a, DType t, const Shape& y) {
  ExecContext cpu;
  return run_op_eager(OpKind::MaxPool, a, t, {x}, {{y, t}, {y, DType::i32}}, cpu);
}

Shape pooled(const Shape& x, const PoolAttrs& a) {
  return {x[0], x[1], window_output_size(x[2], a.kernel_h, a.stride_h, a.pad_h),
          window_output_size(x[3], a.kernel_w, a.stride_w, a.pad_w)};
}

TEST(PoolingCudaTest, MaxPoolMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const PoolCase& c : pool_cases())
    for (DType t : kDtypes)
      for (bool ties : {false, true}) {
        Rng rng(21);
        const Tensor x = ties ? tied_tensor(t, c.x, rng) : random_tensor_of(t, c.x, rng);
        const Shape y = pooled(c.x, c.attrs);
        EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::MaxPool, c.attrs, t, {x},
                                     {{y, t}, {y, DType::i32}}, kExact))
            << c.name << (ties ? " (ties)" : "");
      }
}

// NaNs win a window (the last one if several), as on the CPU; -inf never does.
TEST(PoolingCudaTest, MaxPoolNaNAndInfinityMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const PoolAttrs a = square(3, 2, 1);
  const Shape xs = {2, 3, 9, 9};
  for (DType t : kDtypes) {
    Rng rng(22);
    Tensor f = testing::random_tensor(xs, rng);
    float* p = f.data_as<float>();
    for (int64_t i = 0; i < f.numel(); i += 7) p[i] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t i = 3; i < f.numel(); i += 5) p[i] = -std::numeric_limits<float>::infinity();
    Tensor x = f;
    if (t != DType::f32) {
      x = Tensor::empty(xs, t);
      convert(f.data(), DType::f32, x.data(), t, size_t(f.numel()));
    }
    const Shape y = pooled(xs, a);
    EXPECT_TRUE(
        cuda_matches_cpu(*gpu, OpKind::MaxPool, a, t, {x}, {{y, t}, {y, DType::i32}}, kExact))
        << dtype_name(t);
  }
}

TEST(PoolingCudaTest, MaxPoolGradMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const PoolCase& c : pool_cases())
    for (DType t : kDtypes)
      for (bool ties : {false, true}) {
        Rng rng(23);
        const Tensor x = ties ? tied_tensor(t, c.x, rng) : random_tensor_of(t, c.x, rng);
        const Shape y = pooled(c.x, c.attrs);
        const Tensor argmax = cpu_max_pool(x, c.attrs, t, y)[1];
        const Tensor dy = random_tensor_of(t, y, rng);
        PoolAttrs ga = c.attrs;
        ga.input_shape = c.x;
        EXPECT_TRUE(
            cuda_matches_cpu(*gpu, OpKind::MaxPoolGrad, ga, t, {dy, argmax}, {{c.x, t}}, kExact))
            << c.name << (ties ? " (ties)" : "");
      }
}

TEST(PoolingCudaTest, AvgPoolMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const PoolCase& c : pool_cases())
    for (DType t : kDtypes)
      for (bool include_pad : {false, true}) {
        Rng rng(24);
        PoolAttrs a = c.attrs;
        a.count_include_pad = include_pad;
        const Tensor x = random_tensor_of(t, c.x, rng);
        EXPECT_TRUE(cuda_matches_cpu(*gpu, OpKind::AvgPool, a, t, {x}, {{pooled(c.x, a), t}},
                                     avg_tolerance(t)))
            << c.name << (include_pad ? " count_include_pad" : "");
      }
}

TEST(PoolingCudaTest, AvgPoolGradMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  for (const PoolCase& c : pool_cases())
    for (DType t : kDtypes)
      for (bool include_pad : {false, true}) {
        Rng rng(25);
        PoolAttrs a = c.attrs;
        a.count_include_pad = include_pad;
        a.input_shape = c.x;
        const Tensor dy = random_tensor_of(t, pooled(c.x, a), rng);
        EXPECT_TRUE(
            cuda_matches_cpu(*gpu, OpKind::AvgPoolGrad, a, t, {dy}, {{c.x, t}}, avg_tolerance(t)))
            << c.name << (include_pad ? " count_include_pad" : "");
      }
}

}  // namespace
}  // namespace campo
