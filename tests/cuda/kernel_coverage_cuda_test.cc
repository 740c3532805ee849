// The CUDA backend has a kernel for every op the CPU runs, in every dtype a graph can give
// it: f32, and f16 / bf16 wherever mixed precision may lower the op (its AMP list is not
// fp32: optimizer updates, AllFinite and Const always run in f32). The GPU has no emulation
// rule (Backend::emulates_low_precision), so a gap here would be an error at the first step
// on the GPU. The registry is filled at start-up, so this runs without a GPU.
#include <gtest/gtest.h>

#include "ops/kernel.h"
#include "ops/schema.h"

namespace campo {
namespace {

TEST(KernelCoverageCudaTest, EveryCpuOpHasACudaKernelInEveryDtypeAGraphGivesIt) {
#ifndef CAMPO_HAVE_CUDA
  GTEST_SKIP() << "this build has no CUDA backend (configured without nvcc, or CAMPO_CUDA=OFF)";
#endif
  int checked = 0;
  for (int k = 0; k < int(OpKind::kCount); ++k) {
    const OpKind kind = OpKind(k);
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
      if (!has_kernel(kind, Device::cpu, dtype, /*emulates_low_precision=*/true)) continue;
      if (dtype != DType::f32 && op_schema(kind).amp_list == AmpList::fp32) continue;
      EXPECT_TRUE(has_kernel(kind, Device::cuda, dtype, /*emulates_low_precision=*/false))
          << op_name(kind) << " " << dtype_name(dtype) << " has a CPU kernel but no CUDA one";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);  // 50-odd ops, most in three dtypes
}

}  // namespace
}  // namespace campo
