// check_precision_policy's line for the log of a run on cuda (train/training_graph.h): how many
// of the quantized GEMMs run as cuBLASLt FP8 GEMMs and how many emulated
// (ops/quantized_gemm_route.h). The graph only: runs without a GPU, and in a build without CUDA
// the same check is one error line instead.
#include <gtest/gtest.h>

#include "amp/lists.h"
#include "amp/precision_policy.h"
#include "ops/kernel.h"
#include "train/training_graph.h"

namespace campo {
namespace {

// The MLP at batch 16 with every GEMM in fp8: fc1's and fc2's GEMMs have dimensions that are
// multiples of 16 (5 of them: fc1's weight gradient, not its input gradient), fc3's three
// (10 classes) do not.
TrainingGraphSpec mlp_every_gemm_fp8() {
  TrainingGraphSpec spec;
  spec.model = "mlp";
  spec.image_shape = {1, 28, 28};
  spec.batch = 16;
  spec.precision.policy = Precision::amp;
  spec.precision.low = DType::bf16;
  spec.precision.lists = AmpLists::defaults(Device::cpu, DType::bf16);
  spec.precision.padding = false;
  spec.precision.rules = std::make_shared<const PrecisionPolicy>(
      parse_precision_policy(R"({"rules": [{"name": "*", "format": "fp8"}]})", "policy.json"));
  return spec;
}

TEST(PrecisionPolicyCheckTest, CudaNoteCountsFp8AndEmulatedGemms) {
  const TrainingGraphSpec spec = mlp_every_gemm_fp8();
  EXPECT_EQ(check_precision_policy(spec, Device::cpu), "");  // one way only there
  if (!has_quantized_gemm_kernel(Device::cuda)) {
    EXPECT_THROW(check_precision_policy(spec, Device::cuda), Error);
    return;
  }
  EXPECT_EQ(check_precision_policy(spec, Device::cuda),
            "quantized GEMMs on cuda: 5 as cuBLASLt FP8 GEMMs, 3 emulated (f32 kernels on the "
            "decoded codes; campo plan --device cuda says which and why)");
}

}  // namespace
}  // namespace campo
