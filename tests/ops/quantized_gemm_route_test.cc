// Which quantized GEMMs the CUDA backend runs as cuBLASLt FP8 GEMMs, which emulated, which it
// refuses (ops/quantized_gemm_route.h): host code, decided from the node alone, so it is
// tested here on any machine (the kernels themselves: tests/cuda/quantized_gemm_cuda_test.cc).
#include "ops/quantized_gemm_route.h"

#include <gtest/gtest.h>

namespace campo {
namespace {

GemmQuant fp8(ElementFormat a, ElementFormat b, Scaling scaling = Scaling::delayed) {
  GemmQuant q;
  q.enabled = true;
  q.format = "fp8";
  q.element = {a, b};
  q.recipe.scaling = scaling;
  return q;
}

constexpr ElementFormat e4m3 = ElementFormat::e4m3;
constexpr ElementFormat e5m2 = ElementFormat::e5m2;

TEST(QuantizedGemmRouteTest, MatMulsOfMultiplesOf16RunAsFp8InEveryTransposeCase) {
  // M = 32, K = 64, N = 48, each operand stored either way: the cast writes the TN layout.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Shape a = ta ? Shape{64, 32} : Shape{32, 64};
      const Shape b = tb ? Shape{48, 64} : Shape{64, 48};
      const GemmDims d = matmul_gemm_dims(OpKind::MatMul, MatMulAttrs{ta, tb}, {a, b});
      EXPECT_EQ(d.M, 32);
      EXPECT_EQ(d.K, 64);
      EXPECT_EQ(d.N, 48);
      EXPECT_EQ(d.batch, 1);
      for (const GemmQuant& q :
           {fp8(e4m3, e4m3), fp8(e4m3, e5m2, Scaling::current), fp8(e5m2, e4m3, Scaling::none)}) {
        const CudaGemmPlan p =
            plan_quantized_gemm_on_cuda(OpKind::MatMul, MatMulAttrs{ta, tb}, {a, b}, q);
        EXPECT_EQ(p.route, CudaGemmRoute::fp8) << p.reason;
        EXPECT_EQ(p.reason, "");
      }
    }
}

TEST(QuantizedGemmRouteTest, BatchMatMulFlattensItsBatchDims) {
  const BatchMatMulAttrs adj{true, false};
  const GemmDims d = matmul_gemm_dims(OpKind::BatchMatMulV2, adj, {{2, 3, 64, 16}, {2, 3, 64, 32}});
  EXPECT_EQ(d.batch, 6);
  EXPECT_EQ(d.M, 16);
  EXPECT_EQ(d.K, 64);
  EXPECT_EQ(d.N, 32);
  EXPECT_EQ(plan_quantized_gemm_on_cuda(OpKind::BatchMatMulV2, adj,
                                        {{2, 3, 64, 16}, {2, 3, 64, 32}}, fp8(e4m3, e4m3))
                .route,
            CudaGemmRoute::fp8);
}

TEST(QuantizedGemmRouteTest, OtherShapesFormatsAndOpsAreEmulatedAndSayWhy) {
  const MatMulAttrs plain{};
  CudaGemmPlan p =
      plan_quantized_gemm_on_cuda(OpKind::MatMul, plain, {{17, 64}, {64, 48}}, fp8(e4m3, e4m3));
  EXPECT_EQ(p.route, CudaGemmRoute::emulated);
  EXPECT_EQ(p.reason, "M=17 N=48 K=64 (cuBLASLt FP8 needs positive multiples of 16)");
  p = plan_quantized_gemm_on_cuda(OpKind::MatMul, plain, {{16, 0}, {0, 16}}, fp8(e4m3, e4m3));
  EXPECT_EQ(p.route, CudaGemmRoute::emulated);  // an empty sum
  p = plan_quantized_gemm_on_cuda(OpKind::MatMul, plain, {{32, 64}, {64, 48}}, fp8(e5m2, e5m2));
  EXPECT_EQ(p.route, CudaGemmRoute::emulated);
  EXPECT_EQ(p.reason, "e5m2 x e5m2 (cuBLASLt FP8 needs an e4m3 operand)");
  p = plan_quantized_gemm_on_cuda(OpKind::Conv2D, ConvAttrs{}, {{16, 16, 8, 8}, {16, 16, 3, 3}},
                                  fp8(e4m3, e4m3));
  EXPECT_EQ(p.route, CudaGemmRoute::emulated);
  EXPECT_EQ(p.reason, "Conv2D is not a matmul (cuBLASLt FP8 runs MatMul and BatchMatMulV2)");
  // A GPU without FP8 tensor cores (Ampere: 8.0); Hopper (9.0) has them.
  p = plan_quantized_gemm_on_cuda(OpKind::MatMul, plain, {{32, 64}, {64, 48}}, fp8(e4m3, e4m3), 80);
  EXPECT_EQ(p.route, CudaGemmRoute::emulated);
  EXPECT_EQ(p.reason, "compute capability 8.0 has no FP8 tensor cores (8.9 and later)");
  EXPECT_EQ(plan_quantized_gemm_on_cuda(OpKind::MatMul, plain, {{32, 64}, {64, 48}},
                                        fp8(e4m3, e4m3), 90)
                .route,
            CudaGemmRoute::fp8);
}

TEST(QuantizedGemmRouteTest, MxAndStochasticRoundingAreRefused) {
  GemmQuant mx = fp8(e4m3, e4m3, Scaling::mx);
  mx.blocks = true;
  mx.format = "mxfp8";
  CudaGemmPlan p =
      plan_quantized_gemm_on_cuda(OpKind::MatMul, MatMulAttrs{}, {{32, 64}, {64, 48}}, mx);
  EXPECT_EQ(p.route, CudaGemmRoute::refused);
  EXPECT_NE(p.reason.find("MX formats run on the CPU only"), std::string::npos) << p.reason;
  GemmQuant sr = fp8(e4m3, e4m3);
  sr.rounding = Rounding::stochastic;
  p = plan_quantized_gemm_on_cuda(OpKind::MatMul, MatMulAttrs{}, {{32, 64}, {64, 48}}, sr);
  EXPECT_EQ(p.route, CudaGemmRoute::refused);
  EXPECT_EQ(p.reason, "stochastic rounding runs on the CPU only");
  EXPECT_STREQ(cuda_gemm_route_name(CudaGemmRoute::fp8), "cuBLASLt FP8");
}

}  // namespace
}  // namespace campo
