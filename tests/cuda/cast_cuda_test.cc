// CUDA Cast (ops/cuda/cast.cu) against the CPU's conversion (runtime/dtype.cc), for every
// pair of f32, f16 and bf16 (the node's compute dtype is the source dtype, ops/cast.cc), on
// sizes that exercise the 16-byte chunks' tail (1, 7, 1000003), on misaligned views, and
// on the values where conversions differ: ties, subnormals, overflow, infinities and NaN
// payloads. Tolerance: none; the outputs are compared bit for bit (both sides round to
// nearest even and keep NaN payloads the same way).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/kernel.h"
#include "ops/op.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/elementwise_cuda_util.h"

namespace campo {
namespace {

using testing::misaligned_copy;
using testing::random_tensor_of;

const std::vector<DType> kDtypes = {DType::f32, DType::f16, DType::bf16};

// Whether two tensors hold the same bytes; names the first differing element.
::testing::AssertionResult same_bits(const Tensor& actual, const Tensor& expected) {
  if (actual.nbytes() != expected.nbytes()) return ::testing::AssertionFailure() << "sizes differ";
  const size_t esize = dtype_size(actual.dtype());
  const auto* a = static_cast<const unsigned char*>(actual.data());
  const auto* e = static_cast<const unsigned char*>(expected.data());
  for (size_t i = 0; i < actual.nbytes(); i += esize)
    if (std::memcmp(a + i, e + i, esize) != 0)
      return ::testing::AssertionFailure()
             << "element " << i / esize << " differs (of " << actual.numel() << ")";
  return ::testing::AssertionSuccess();
}

// Cast of `host` to `to` on the CPU and on the GPU (aligned or misaligned device buffers).
::testing::AssertionResult cast_matches_cpu(Backend& gpu, const Tensor& host, DType to,
                                            bool misaligned) {
  const Attrs attrs = CastAttrs{to};
  const std::vector<TensorDesc> out = {{host.shape(), to}};
  ExecContext cpu_ctx;
  const Tensor expected = run_op_eager(OpKind::Cast, attrs, host.dtype(), {host}, out, cpu_ctx)[0];

  auto gpu_ptr = std::shared_ptr<Backend>(&gpu, [](Backend*) {});
  ExecContext gpu_ctx(gpu_ptr);
  std::vector<Tensor> keep;
  const Tensor x = misaligned ? misaligned_copy(gpu, host, keep) : gpu.to_device(host);
  const Tensor y = misaligned ? misaligned_copy(gpu, Tensor::zeros(host.shape(), to), keep)
                              : gpu.zeros(host.shape(), to);
  KernelSpec spec{OpKind::Cast, attrs, host.dtype(), {{host.shape(), host.dtype()}}, out, "Cast"};
  create_kernel(spec, gpu_ctx)->run(gpu_ctx, {x}, {y});
  gpu.synchronize();
  auto r = same_bits(gpu.to_host(y), expected);
  if (!r)
    return ::testing::AssertionFailure()
           << dtype_name(host.dtype()) << " -> " << dtype_name(to)
           << (misaligned ? " (misaligned)" : "") << ": " << r.message();
  return r;
}

TEST(CastCudaTest, EveryPairMatchesCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  for (DType from : kDtypes)
    for (DType to : kDtypes)
      for (int64_t n : {1, 7, 1000003}) {
        SCOPED_TRACE("n=" + std::to_string(n));
        // Values over many binades, so f32 -> f16 sees subnormals, overflow and rounding.
        Tensor f = testing::random_tensor({n}, rng, -1.0f, 1.0f);
        float* p = f.data_as<float>();
        for (int64_t i = 0; i < n; ++i) p[i] = std::ldexp(p[i], int(rng.below(60)) - 30);
        Tensor x = Tensor::empty({n}, from);
        convert(f.data(), DType::f32, x.data(), from, size_t(n));
        EXPECT_TRUE(cast_matches_cpu(*gpu, x, to, false));
        EXPECT_TRUE(cast_matches_cpu(*gpu, x, to, true));
      }
}

// Ties to even, the smallest subnormals, overflow to infinity, infinities and NaNs with
// payloads and signs, as f32 bit patterns (and each source dtype's own rounding of them).
TEST(CastCudaTest, SpecialValuesMatchCpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const std::vector<uint32_t> bits = {
      0x00000000u, 0x80000000u, 0x3f800000u,
      0x3f801000u, 0x3f803000u,  // 1 + f16 halfway ties
      0x3f808000u, 0x3f818000u,  // bf16 halfway ties
      0x33800000u, 0x33000000u, 0x33c00000u,
      0x00000001u, 0x807fffffu,  // f16 subnormal edges, f32 subnormals
      0x477fe000u, 0x477ff000u, 0x47800000u,
      0x7f7fffffu, 0xff7fffffu,  // f16 max, overflow, bf16 overflow
      0x7f800000u, 0xff800000u, 0x7fc00000u,
      0xffc00001u, 0x7f800001u,  // inf, NaN (quiet, signalling)
      0x7fa5a5a5u, 0xff812345u};
  Tensor f = Tensor::empty({int64_t(bits.size())}, DType::f32);
  std::memcpy(f.data(), bits.data(), bits.size() * 4);
  for (DType from : kDtypes) {
    Tensor x = Tensor::empty(f.shape(), from);
    convert(f.data(), DType::f32, x.data(), from, size_t(f.numel()));
    for (DType to : kDtypes) {
      EXPECT_TRUE(cast_matches_cpu(*gpu, x, to, false));
      EXPECT_TRUE(cast_matches_cpu(*gpu, x, to, true));
    }
  }
}

}  // namespace
}  // namespace campo
