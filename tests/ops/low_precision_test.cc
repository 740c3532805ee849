// Low-precision CPU kernels (ops/cpu/low_precision.h): every op's bf16 and f16 kernel
// against its f32 kernel on the same inputs, the native bf16 kernels against the emulated
// ones, f16 overflow, batch norm's f32 running statistics, the emulation workspace, and the
// CAMPO_CPU_BF16 switch. The benchmarks of these kernels are in bench/kernels/.
//
// Inputs are rounded to the low-precision type first and the f32 reference runs on those
// rounded values, so what differs is only the op's own rounding. Tolerances are the
// per-dtype table (tests/test_util.h: bf16 1.6e-2 / 1e-5, f16 1e-3 / 1e-5): one rounding
// of each output is within half an ulp (bf16 2^-9, f16 2^-11 relative), which both cover,
// and no op needs more (oneDNN's bf16 conv / matmul accumulate in f32 and round once).
#include "ops/cpu/low_precision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "amp/policy.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/optimizer.h"
#include "models/models.h"
#include "ops/kernel.h"
#include "tests/gradcheck.h"
#include "tests/ops/low_precision_util.h"
#include "tests/test_util.h"

namespace campo::testing {
namespace {

// ---- inputs ----

// A copy of `t` whose values are exactly representable in `dtype` (still an f32 tensor).
Tensor rounded_to(const Tensor& t, DType dtype) {
  if (t.dtype() != DType::f32 || dtype == DType::f32) return t.clone();
  Tensor low = Tensor::empty(t.shape(), dtype);
  convert(t.data(), DType::f32, low.data(), dtype, size_t(t.numel()));
  Tensor back = Tensor::empty(t.shape(), DType::f32);
  convert(low.data(), dtype, back.data(), DType::f32, size_t(t.numel()));
  return back;
}

Tensor labels(int64_t n, int32_t classes, Rng& rng) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = int32_t(rng.next_u64() % uint64_t(classes));
  return Tensor::from_vector(v, {n});
}

// The inputs a node of `kind` and compute dtype `dtype` gets from cast insertion: the f32
// inputs converted to `dtype`, except the schema's fp32_inputs and integer inputs.
std::vector<Tensor> node_inputs(OpKind kind, const std::vector<Tensor>& f32_inputs, DType dtype) {
  const std::vector<int>& keep = op_schema(kind).fp32_inputs;
  std::vector<Tensor> out;
  for (int i = 0; i < int(f32_inputs.size()); ++i) {
    const bool stays_f32 = std::find(keep.begin(), keep.end(), i) != keep.end();
    out.push_back(stays_f32 ? f32_inputs[size_t(i)].clone()
                            : as_dtype(f32_inputs[size_t(i)], dtype));
  }
  return out;
}

// The f32 inputs, those the node would see in `dtype` rounded to it.
std::vector<Tensor> rounded_inputs(OpKind kind, const std::vector<Tensor>& f32_inputs,
                                   DType dtype) {
  const std::vector<int>& keep = op_schema(kind).fp32_inputs;
  std::vector<Tensor> out;
  for (int i = 0; i < int(f32_inputs.size()); ++i) {
    const bool stays_f32 = std::find(keep.begin(), keep.end(), i) != keep.end();
    out.push_back(stays_f32 ? f32_inputs[size_t(i)].clone()
                            : rounded_to(f32_inputs[size_t(i)], dtype));
  }
  return out;
}

// ---- cases ----

struct LpCase {
  std::string name;
  OpKind kind;
  Attrs attrs;
  std::function<std::vector<Tensor>(Rng&)> make_inputs;  // f32 (and i32) inputs
  // Native bf16 kernel is oneDNN (agrees with the emulation within tolerance) rather than
  // a plain loop (agrees bit for bit).
  bool onednn = false;
};

std::ostream& operator<<(std::ostream& os, const LpCase& c) { return os << c.name; }

// MaxPool's argmax of x, as MaxPoolGrad's input.
Tensor argmax_of(const Tensor& x, const PoolAttrs& a) { return run_op(OpKind::MaxPool, a, {x})[1]; }

std::vector<LpCase> lp_cases() {
  using R = Rng&;
  std::vector<LpCase> c;
  // Native bf16 conv / matmul (oneDNN) multiply bf16 operands exactly and accumulate in
  // f32, in their own order, then round once: within the bf16 table of the f32 result.
  c.push_back(
      {"Conv2D_3x3", OpKind::Conv2D, conv(1, 1),
       [](R r) {
         return std::vector{random_tensor({2, 8, 9, 9}, r), random_tensor({16, 8, 3, 3}, r)};
       },
       true});
  c.push_back(
      {"Conv2D_1x1_stride2", OpKind::Conv2D, conv(2, 0),
       [](R r) {
         return std::vector{random_tensor({2, 16, 8, 8}, r), random_tensor({32, 16, 1, 1}, r)};
       },
       true});
  c.push_back({"Conv2D_grouped", OpKind::Conv2D, conv(1, 1, {}, 2),
               [](R r) {
                 return std::vector{random_tensor({2, 8, 6, 6}, r), random_tensor({8, 4, 3, 3}, r)};
               },
               true});
  c.push_back(
      {"Conv2DBackpropInput", OpKind::Conv2DBackpropInput, conv(1, 1, {2, 8, 9, 9}),
       [](R r) {
         return std::vector{random_tensor({2, 16, 9, 9}, r), random_tensor({16, 8, 3, 3}, r)};
       },
       true});
  c.push_back({"Conv2DBackpropInput_3ch", OpKind::Conv2DBackpropInput, conv(2, 3, {2, 3, 16, 16}),
               [](R r) {
                 return std::vector{random_tensor({2, 8, 8, 8}, r), random_tensor({8, 3, 7, 7}, r)};
               },
               true});
  c.push_back(
      {"Conv2DBackpropFilter", OpKind::Conv2DBackpropFilter, conv(1, 1, {16, 8, 3, 3}),
       [](R r) {
         return std::vector{random_tensor({2, 8, 9, 9}, r), random_tensor({2, 16, 9, 9}, r)};
       },
       true});
  c.push_back({"MatMul", OpKind::MatMul, MatMulAttrs{},
               [](R r) {
                 return std::vector{random_tensor({8, 64}, r), random_tensor({64, 24}, r)};
               },
               true});
  c.push_back({"MatMul_transposed", OpKind::MatMul, MatMulAttrs{true, true},
               [](R r) {
                 return std::vector{random_tensor({64, 8}, r), random_tensor({24, 64}, r)};
               },
               true});
  // BERT's attention products, smaller: q k^T and, with both adjoints, a backward one.
  c.push_back(
      {"BatchMatMulV2", OpKind::BatchMatMulV2, BatchMatMulAttrs{false, true},
       [](R r) {
         return std::vector{random_tensor({2, 3, 16, 32}, r), random_tensor({2, 3, 16, 32}, r)};
       },
       true});
  c.push_back({"BatchMatMulV2_adj_both", OpKind::BatchMatMulV2, BatchMatMulAttrs{true, true},
               [](R r) {
                 return std::vector{random_tensor({4, 32, 8}, r), random_tensor({4, 24, 32}, r)};
               },
               true});
  c.push_back({"BiasAdd_nchw", OpKind::BiasAdd, NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({2, 5, 4, 3}, r), random_tensor({5}, r)};
               }});
  c.push_back({"BiasAdd_nc", OpKind::BiasAdd, NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({6, 7}, r), random_tensor({7}, r)};
               }});
  c.push_back({"BiasAddGrad", OpKind::BiasAddGrad, NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({3, 5, 4, 4}, r)};
               }});
  auto bn_inputs = [](R r) {
    return std::vector{random_tensor({4, 3, 5, 5}, r, 1.0f, 3.0f),
                       random_tensor({3}, r, 0.5f, 1.5f), random_tensor({3}, r),
                       random_tensor({3}, r), random_tensor({3}, r, 0.5f, 2.0f)};
  };
  c.push_back({"FusedBatchNorm_training", OpKind::FusedBatchNorm, BatchNormAttrs{1e-5f, 0.1f, true},
               bn_inputs});
  c.push_back({"FusedBatchNorm_inference", OpKind::FusedBatchNorm,
               BatchNormAttrs{1e-5f, 0.1f, false}, bn_inputs});
  c.push_back(
      {"FusedBatchNorm_nc", OpKind::FusedBatchNorm, BatchNormAttrs{1e-5f, 0.1f, true}, [](R r) {
         return std::vector{random_tensor({16, 70}, r), random_tensor({70}, r),
                            random_tensor({70}, r), random_tensor({70}, r),
                            random_tensor({70}, r, 0.5f, 2.0f)};
       }});
  c.push_back({"FusedBatchNormGrad", OpKind::FusedBatchNormGrad, BatchNormAttrs{1e-5f, 0.1f, true},
               [](R r) {
                 return std::vector{random_tensor({4, 3, 5, 5}, r), random_tensor({4, 3, 5, 5}, r),
                                    random_tensor({3}, r, 0.5f, 1.5f),
                                    random_tensor({3}, r, -0.1f, 0.1f),
                                    random_tensor({3}, r, 0.8f, 1.5f)};
               }});
  auto unary = [](R r) { return std::vector{random_tensor({3, 4, 5, 6}, r, -3.0f, 3.0f)}; };
  auto binary = [](R r) {
    return std::vector{random_tensor({3, 4, 5, 6}, r, -3.0f, 3.0f),
                       random_tensor({3, 4, 5, 6}, r, -3.0f, 3.0f)};
  };
  auto grad_of_output = [](float lo, float hi) {
    return [=](R r) {
      return std::vector{random_tensor({3, 4, 5, 6}, r), random_tensor({3, 4, 5, 6}, r, lo, hi)};
    };
  };
  c.push_back({"Relu", OpKind::Relu, NoAttrs{}, unary});
  c.push_back({"ReluGrad", OpKind::ReluGrad, NoAttrs{}, grad_of_output(-1.0f, 1.0f)});
  c.push_back({"LeakyRelu", OpKind::LeakyRelu, LeakyReluAttrs{0.2f}, unary});
  c.push_back(
      {"LeakyReluGrad", OpKind::LeakyReluGrad, LeakyReluAttrs{0.2f}, grad_of_output(-1.0f, 1.0f)});
  c.push_back({"Tanh", OpKind::Tanh, NoAttrs{}, unary, true});
  c.push_back({"TanhGrad", OpKind::TanhGrad, NoAttrs{}, grad_of_output(-1.0f, 1.0f)});
  c.push_back({"Sigmoid", OpKind::Sigmoid, NoAttrs{}, unary, true});
  c.push_back({"SigmoidGrad", OpKind::SigmoidGrad, NoAttrs{}, grad_of_output(0.0f, 1.0f)});
  // Transformer ops: softmax over the last axis (attention scores' shape too), GELU in both
  // forms, layer norm over the last axis with f32 scale / offset / statistics.
  c.push_back({"Softmax", OpKind::Softmax, NoAttrs{},
               [](R r) {
                 return std::vector{random_tensor({6, 37}, r, -6.0f, 6.0f)};
               },
               true});
  c.push_back({"Softmax_attention", OpKind::Softmax, NoAttrs{},
               [](R r) {
                 return std::vector{random_tensor({2, 2, 8, 8}, r, -6.0f, 6.0f)};
               },
               true});
  c.push_back({"SoftmaxGrad", OpKind::SoftmaxGrad, NoAttrs{}, grad_of_output(0.0f, 1.0f)});
  c.push_back({"Gelu_erf", OpKind::Gelu, GeluAttrs{false}, unary, true});
  c.push_back({"Gelu_tanh", OpKind::Gelu, GeluAttrs{true}, unary, true});
  c.push_back({"GeluGrad_erf", OpKind::GeluGrad, GeluAttrs{false}, binary, true});
  c.push_back({"GeluGrad_tanh", OpKind::GeluGrad, GeluAttrs{true}, binary, true});
  auto ln_inputs = [](Shape x) {
    return [x](R r) {
      const int64_t c = x.back();
      return std::vector{random_tensor(x, r, 1.0f, 3.0f), random_tensor({c}, r, 0.5f, 1.5f),
                         random_tensor({c}, r)};
    };
  };
  c.push_back({"LayerNorm", OpKind::LayerNorm, LayerNormAttrs{1e-12f}, ln_inputs({4, 6, 40})});
  c.push_back(
      {"LayerNorm_parallel", OpKind::LayerNorm, LayerNormAttrs{1e-5f}, ln_inputs({50, 768})});
  c.push_back({"LayerNormGrad", OpKind::LayerNormGrad, LayerNormAttrs{1e-12f}, [](R r) {
                 return std::vector{random_tensor({4, 6, 40}, r), random_tensor({4, 6, 40}, r),
                                    random_tensor({40}, r, 0.5f, 1.5f),
                                    random_tensor({4, 6}, r, -0.1f, 0.1f),
                                    random_tensor({4, 6}, r, 0.8f, 1.5f)};
               }});
  c.push_back({"LayerNormGrad_parallel", OpKind::LayerNormGrad, LayerNormAttrs{1e-5f}, [](R r) {
                 return std::vector{random_tensor({100, 400}, r), random_tensor({100, 400}, r),
                                    random_tensor({400}, r, 0.5f, 1.5f),
                                    random_tensor({100}, r, -0.1f, 0.1f),
                                    random_tensor({100}, r, 0.8f, 1.5f)};
               }});
  c.push_back({"Add", OpKind::Add, NoAttrs{}, binary});
  c.push_back({"AddN_3", OpKind::AddN, NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({5000}, r), random_tensor({5000}, r),
                                    random_tensor({5000}, r)};
               }});
  // Large enough for the kernels' multithreaded paths (and several AddN / Dropout blocks).
  c.push_back(
      {"Add_parallel", OpKind::Add, NoAttrs{}, [](R r) {
         return std::vector{random_tensor({4, 64, 16, 16}, r), random_tensor({4, 64, 16, 16}, r)};
       }});
  c.push_back({"AddN_parallel", OpKind::AddN, NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({70000}, r), random_tensor({70000}, r)};
               }});
  c.push_back({"Dropout_parallel", OpKind::Dropout, DropoutAttrs{0.3f},
               [](R r) { return std::vector{random_tensor({70000}, r)}; }});
  c.push_back(
      {"AddN_1", OpKind::AddN, NoAttrs{}, [](R r) { return std::vector{random_tensor({7}, r)}; }});
  c.push_back({"Mul", OpKind::Mul, NoAttrs{}, binary});
  c.push_back({"Mul_scalar", OpKind::Mul, NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({4, 9}, r), random_tensor({}, r)};
               }});
  c.push_back({"Mul_prefix", OpKind::Mul, NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({80, 3}, r), random_tensor({80}, r)};
               }});
  c.push_back({"Dropout", OpKind::Dropout, DropoutAttrs{0.5f}, unary});
  c.push_back({"Reshape", OpKind::Reshape, ReshapeAttrs{{12, -1}}, unary});
  c.push_back({"ConcatV2", OpKind::ConcatV2, ConcatAttrs{1}, [](R r) {
                 return std::vector{random_tensor({3, 4, 5, 6}, r), random_tensor({3, 2, 5, 6}, r)};
               }});
  c.push_back({"SplitV", OpKind::SplitV, SplitAttrs{-1, {2, 3, 1}}, unary});
  c.push_back({"Transpose_bert", OpKind::Transpose, TransposeAttrs{{0, 2, 1, 3}}, [](R r) {
                 return std::vector{random_tensor({2, 5, 3, 8}, r)};
               }});
  c.push_back({"Transpose_last_moves", OpKind::Transpose, TransposeAttrs{{2, 0, 1}}, [](R r) {
                 return std::vector{random_tensor({3, 4, 7}, r)};
               }});
  c.push_back({"GatherV2", OpKind::GatherV2, GatherAttrs{0}, [](R r) {
                 return std::vector{random_tensor({12, 5}, r), labels(9, 12, r)};
               }});
  c.push_back(
      {"UnsortedSegmentSum", OpKind::UnsortedSegmentSum, UnsortedSegmentSumAttrs{5}, [](R r) {
         return std::vector{random_tensor({9, 6}, r), labels(9, 5, r)};
       }});
  const PoolAttrs stem = pool(3, 2, 1);
  c.push_back({"MaxPool", OpKind::MaxPool, stem, [](R r) {
                 return std::vector{random_tensor({2, 3, 13, 13}, r)};
               }});
  // Overlapping windows: an input can collect the gradient of several outputs.
  c.push_back({"MaxPoolGrad", OpKind::MaxPoolGrad, pool(3, 2, 1, {2, 3, 13, 13}), [stem](R r) {
                 const Tensor x = random_tensor({2, 3, 13, 13}, r);
                 return std::vector{random_tensor({2, 3, 7, 7}, r), argmax_of(x, stem)};
               }});
  c.push_back({"AvgPool", OpKind::AvgPool, pool(2, 2, 0), [](R r) {
                 return std::vector{random_tensor({2, 3, 8, 8}, r)};
               }});
  c.push_back({"AvgPool_global", OpKind::AvgPool, pool(7, 1, 0), [](R r) {
                 return std::vector{random_tensor({2, 5, 7, 7}, r)};
               }});
  c.push_back(
      {"AvgPoolGrad_overlapping", OpKind::AvgPoolGrad, pool(3, 1, 1, {1, 2, 6, 6}), [](R r) {
         return std::vector{random_tensor({1, 2, 6, 6}, r)};
       }});
  // Inception-v3's branch pool: padding counted in the divisor (PyTorch's default).
  PoolAttrs branch_pool = pool(3, 1, 1), branch_pool_grad = pool(3, 1, 1, {2, 3, 9, 9});
  branch_pool.count_include_pad = branch_pool_grad.count_include_pad = true;
  c.push_back({"AvgPool_count_include_pad", OpKind::AvgPool, branch_pool, [](R r) {
                 return std::vector{random_tensor({2, 3, 9, 9}, r)};
               }});
  c.push_back({"AvgPoolGrad_count_include_pad", OpKind::AvgPoolGrad, branch_pool_grad, [](R r) {
                 return std::vector{random_tensor({2, 3, 9, 9}, r)};
               }});
  c.push_back({"AvgPoolGrad_global", OpKind::AvgPoolGrad, pool(7, 1, 0, {2, 5, 7, 7}), [](R r) {
                 return std::vector{random_tensor({2, 5, 1, 1}, r)};
               }});
  // Deny-list ops never run in low precision under a policy, but their kernels exist
  // (emulated) for any dtype a caller asks for; losses and reductions produce f32.
  c.push_back({"SparseSoftmaxCrossEntropyWithLogits", OpKind::SparseSoftmaxCrossEntropyWithLogits,
               NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({6, 10}, r, -4.0f, 4.0f), labels(6, 10, r)};
               }});
  c.push_back({"SparseSoftmaxCrossEntropyWithLogits_ignore_label",
               OpKind::SparseSoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyAttrs{-100},
               [](R r) {
                 Tensor l = labels(6, 10, r);
                 l.data_as<int32_t>()[1] = l.data_as<int32_t>()[4] = -100;
                 return std::vector{random_tensor({6, 10}, r, -4.0f, 4.0f), l};
               }});
  c.push_back(
      {"SigmoidCrossEntropyWithLogits", OpKind::SigmoidCrossEntropyWithLogits, NoAttrs{}, [](R r) {
         return std::vector{random_tensor({4, 8}, r, -4.0f, 4.0f),
                            random_tensor({4, 8}, r, 0.0f, 1.0f)};
       }});
  c.push_back({"SigmoidCrossEntropyWithLogitsGrad", OpKind::SigmoidCrossEntropyWithLogitsGrad,
               NoAttrs{}, [](R r) {
                 return std::vector{random_tensor({4, 8}, r), random_tensor({4, 8}, r, -4.0f, 4.0f),
                                    random_tensor({4, 8}, r, 0.0f, 1.0f)};
               }});
  c.push_back({"Mean", OpKind::Mean, ReduceAttrs{{1}, false, {}}, [](R r) {
                 return std::vector{random_tensor({4, 6, 3}, r)};
               }});
  c.push_back({"Sum", OpKind::Sum, ReduceAttrs{{}, false, {}}, [](R r) {
                 return std::vector{random_tensor({4, 6, 3}, r)};
               }});
  c.push_back({"MeanGrad", OpKind::MeanGrad, ReduceAttrs{{1}, false, {4, 6, 3}}, [](R r) {
                 return std::vector{random_tensor({4, 3}, r)};
               }});
  c.push_back({"BroadcastTo", OpKind::BroadcastTo, ReduceAttrs{{0, 2}, true, {4, 6, 3}}, [](R r) {
                 return std::vector{random_tensor({1, 6, 1}, r)};
               }});
  return c;
}

// ---- every op, bf16 and f16, against f32 ----

class LowPrecisionOp : public ::testing::TestWithParam<std::tuple<LpCase, DType>> {};

TEST_P(LowPrecisionOp, MatchesF32OnRoundedInputs) {
  const auto& [c, dtype] = GetParam();
  Rng rng(42);
  const std::vector<Tensor> inputs = c.make_inputs(rng);
  const std::vector<Tensor> expected =
      run_op(c.kind, c.attrs, rounded_inputs(c.kind, inputs, dtype), DType::f32);
  const std::vector<Tensor> actual =
      run_op(c.kind, c.attrs, node_inputs(c.kind, inputs, dtype), dtype);
  ASSERT_EQ(actual.size(), expected.size());
  const Tolerance tol = tolerance_for(dtype);
  for (size_t k = 0; k < actual.size(); ++k) {
    // Outputs keep the schema's dtype: floating outputs of the node's dtype unless declared
    // f32 (statistics, losses, reductions); integer outputs (argmax) unchanged.
    if (expected[k].dtype() == DType::f32)
      EXPECT_TRUE(actual[k].dtype() == dtype || actual[k].dtype() == DType::f32);
    else
      EXPECT_EQ(actual[k].dtype(), expected[k].dtype());
    EXPECT_TRUE(all_close(actual[k], expected[k], tol.rtol, tol.atol))
        << "output " << k << " (" << dtype_name(actual[k].dtype()) << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, LowPrecisionOp,
                         ::testing::Combine(::testing::ValuesIn(lp_cases()),
                                            ::testing::Values(DType::bf16, DType::f16)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

// ---- native bf16 against emulated bf16 ----

// Runs the node's kernel created with `ctx` on copies of `inputs`; also reports whether
// the kernel was the emulated one.
std::vector<Tensor> run_with(const LpCase& c, const std::vector<Tensor>& inputs, DType dtype,
                             ExecContext& ctx, bool* emulated) {
  std::vector<TensorDesc> outs;
  for (const Tensor& t : run_op(c.kind, c.attrs, inputs, dtype))
    outs.push_back({t.shape(), t.dtype()});
  KernelSpec spec{c.kind, c.attrs, dtype, {}, outs, c.name};
  for (const Tensor& t : inputs) spec.inputs.push_back({t.shape(), t.dtype()});
  auto kernel = create_kernel(spec, ctx);
  *emulated = is_emulated_kernel(*kernel);
  std::vector<Tensor> copies, results;
  for (const Tensor& t : inputs) copies.push_back(t.clone());
  for (const TensorDesc& d : outs) results.push_back(Tensor::zeros(d.shape, d.dtype));
  kernel->run(ctx, copies, results);
  return results;
}

class NativeBf16 : public ::testing::TestWithParam<LpCase> {};

TEST_P(NativeBf16, AgreesWithEmulation) {
  const LpCase& c = GetParam();
  if (c.onednn && !cpu_has_native_bf16())
    GTEST_SKIP() << "this CPU has no AVX-512 BF16: oneDNN bf16 kernels are emulated here";
  Rng rng(7);
  const std::vector<Tensor> inputs = node_inputs(c.kind, c.make_inputs(rng), DType::bf16);
  ExecContext native_ctx, emulated_ctx;
  native_ctx.native_bf16 = true;
  emulated_ctx.native_bf16 = false;
  bool native_was_emulated = true, emulated_was_emulated = false, unused = false;
  const auto native = run_with(c, inputs, DType::bf16, native_ctx, &native_was_emulated);
  const auto emulated = run_with(c, inputs, DType::bf16, emulated_ctx, &emulated_was_emulated);
  // The loops' baseline x86-64 code, which CPUs without AVX-512 run.
  ExecContext baseline_ctx;  // fresh: Dropout draws its mask from the context's Rng
  baseline_ctx.native_bf16 = true;
  set_avx512_loops_enabled(false);
  const auto baseline = run_with(c, inputs, DType::bf16, baseline_ctx, &unused);
  set_avx512_loops_enabled(true);
  // Reshape, ConcatV2, SplitV, Transpose and GatherV2 are byte copies, one kernel for every
  // dtype: never emulated.
  const std::set<OpKind> byte_copies = {OpKind::Reshape, OpKind::ConcatV2, OpKind::SplitV,
                                        OpKind::Transpose, OpKind::GatherV2};
  EXPECT_EQ(emulated_was_emulated, byte_copies.count(c.kind) == 0);
  // Which ops have a native kernel is a fixed list: conv, matmul, element-wise, bias,
  // batch norm, pooling, softmax, layer norm, segment sum.
  const std::set<OpKind> no_native = {OpKind::SparseSoftmaxCrossEntropyWithLogits,
                                      OpKind::SigmoidCrossEntropyWithLogits,
                                      OpKind::SigmoidCrossEntropyWithLogitsGrad,
                                      OpKind::Mean,
                                      OpKind::Sum,
                                      OpKind::MeanGrad,
                                      OpKind::BroadcastTo};
  EXPECT_EQ(native_was_emulated, no_native.count(c.kind) != 0);
  // Loops compute what the emulation computes, but a sum over bf16 data vectorises in
  // another order than over f32 (batch-norm statistics, dscale, dbias): f32 results differ
  // in the last bits, and a bf16 result may round one ulp (2^-8 relative) the other way.
  // oneDNN's bf16 primitives sum in their own order and round the result: the bf16 table.
  const Tolerance tol = c.onednn ? tolerance_for(DType::bf16) : Tolerance{4e-3, 1e-6};
  for (size_t k = 0; k < native.size(); ++k) {
    EXPECT_TRUE(all_close(native[k], emulated[k], tol.rtol, tol.atol)) << "output " << k;
    EXPECT_TRUE(all_close(baseline[k], emulated[k], tol.rtol, tol.atol))
        << "output " << k << ", baseline loops";
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, NativeBf16, ::testing::ValuesIn(lp_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- kernel selection ----

TEST(LowPrecisionKernels, EveryOpWithAnF32KernelHasLowPrecisionKernels) {
  for (int k = 0; k < int(OpKind::kCount); ++k) {
    const OpKind kind = OpKind(k);
    if (!has_kernel(kind, Device::cpu, DType::f32, true)) continue;
    EXPECT_TRUE(has_kernel(kind, Device::cpu, DType::bf16, true)) << op_name(kind);
    EXPECT_TRUE(has_kernel(kind, Device::cpu, DType::f16, true)) << op_name(kind);
  }
  // No f32 kernel, nothing to emulate: still an error naming op, device and dtype.
  EXPECT_FALSE(has_kernel(OpKind::Placeholder, Device::cpu, DType::f16, true));
  KernelSpec spec{OpKind::Placeholder, PlaceholderAttrs{}, DType::f16, {}, {}, "p"};
  ExecContext ctx;
  try {
    create_kernel(spec, ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("no kernel for op Placeholder on device cpu with dtype f16"),
        std::string::npos)
        << e.what();
  }
}

KernelSpec conv_spec(DType dtype) {
  return {
      OpKind::Conv2D,           conv(1, 1), dtype, {{{2, 8, 9, 9}, dtype}, {{16, 8, 3, 3}, dtype}},
      {{{2, 16, 9, 9}, dtype}}, "conv"};
}

TEST(LowPrecisionKernels, F16AndBf16AreNativeWhereTheCpuAllows) {
  ExecContext ctx;
  ctx.native_bf16 = true;
  ctx.native_f16 = true;
  // oneDNN's f16 convolution exists only with AVX-512 FP16 (Sapphire Rapids and later).
  EXPECT_EQ(is_emulated_kernel(*create_kernel(conv_spec(DType::f16), ctx)),
            !cpu_has_native_f16());
  ctx.native_f16 = false;
  EXPECT_TRUE(is_emulated_kernel(*create_kernel(conv_spec(DType::f16), ctx)));
  EXPECT_EQ(is_emulated_kernel(*create_kernel(conv_spec(DType::bf16), ctx)),
            !cpu_has_native_bf16());
  EXPECT_FALSE(is_emulated_kernel(*create_kernel(conv_spec(DType::f32), ctx)));
  ctx.native_bf16 = false;
  EXPECT_TRUE(is_emulated_kernel(*create_kernel(conv_spec(DType::bf16), ctx)));
}

TEST(LowPrecisionKernels, EnvironmentForcesEmulation) {
  {
    ScopedEnv env("CAMPO_CPU_BF16", "emulate");
    ExecContext ctx;
    EXPECT_FALSE(ctx.native_bf16);
    EXPECT_TRUE(is_emulated_kernel(*create_kernel(conv_spec(DType::bf16), ctx)));
  }
  {
    ScopedEnv env("CAMPO_CPU_BF16", "native");
    EXPECT_TRUE(ExecContext().native_bf16);
  }
  {
    ScopedEnv env("CAMPO_CPU_F16", "emulate");
    ExecContext ctx;
    EXPECT_FALSE(ctx.native_f16);
    EXPECT_TRUE(ctx.native_bf16);
    EXPECT_TRUE(is_emulated_kernel(*create_kernel(conv_spec(DType::f16), ctx)));
  }
  {
    ScopedEnv env("CAMPO_CPU_F16", "yes");  // a typo is an error, not ignored
    EXPECT_THROW(ExecContext(), Error);
  }
  {
    ScopedEnv env("CAMPO_CPU_BF16", "emulated");  // a typo is an error, not ignored
    try {
      ExecContext ctx;
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("CAMPO_CPU_BF16 must be 'native' or 'emulate'"),
                std::string::npos)
          << e.what();
    }
  }
}

// ---- numerics the policies rely on ----

// f16's largest finite value is 65504: a product or sum beyond it is inf, which the loss
// scaler's AllFinite check sees (and bf16, with f32's range, does not overflow).
TEST(LowPrecisionNumerics, F16OverflowIsInf) {
  const Tensor a = Tensor::from_vector(std::vector<float>{300.0f, -300.0f, 2.0f}, {3});
  const Tensor b = Tensor::from_vector(std::vector<float>{300.0f, 300.0f, 3.0f}, {3});
  const auto f16 = run_op(OpKind::Mul, NoAttrs{},
                          {as_dtype(a, DType::f16), as_dtype(b, DType::f16)}, DType::f16)[0]
                       .to_float_vector();
  EXPECT_EQ(f16[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16[2], 6.0f);
  const auto bf16 = run_op(OpKind::Mul, NoAttrs{},
                           {as_dtype(a, DType::bf16), as_dtype(b, DType::bf16)}, DType::bf16)[0]
                        .to_float_vector();
  EXPECT_EQ(bf16[0], 90112.0f);  // 90000 rounded to bf16's 8 significant bits

  // A matmul whose f32 accumulation (80000) is finite overflows only in the rounding.
  const Tensor x = Tensor::from_vector(std::vector<float>{200.0f, 200.0f}, {1, 2});
  const Tensor w = Tensor::from_vector(std::vector<float>{200.0f, 200.0f}, {2, 1});
  const auto y = run_op(OpKind::MatMul, MatMulAttrs{},
                        {as_dtype(x, DType::f16), as_dtype(w, DType::f16)}, DType::f16)[0]
                     .to_float_vector();
  EXPECT_EQ(y[0], std::numeric_limits<float>::infinity());
}

// NaN and inf survive every low-precision path (the loss scaler's AllFinite check relies on
// seeing them): Relu keeps NaN, Add keeps inf, natively and emulated, bf16 and f16.
TEST(LowPrecisionNumerics, NanAndInfPropagate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_vector(std::vector<float>{nan, -1.0f, inf, 2.0f}, {4});
  const Tensor one = Tensor::from_vector(std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f}, {4});
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (bool native : {true, false}) {
      ExecContext ctx;
      ctx.native_bf16 = native;
      const TensorDesc desc{{4}, dtype};
      const auto relu =
          run_op_eager(OpKind::Relu, NoAttrs{}, dtype, {as_dtype(x, dtype)}, {desc}, ctx)[0]
              .to_float_vector();
      EXPECT_TRUE(std::isnan(relu[0])) << dtype_name(dtype);
      EXPECT_EQ(relu[1], 0.0f);
      EXPECT_EQ(relu[2], inf);
      const auto sum = run_op_eager(OpKind::Add, NoAttrs{}, dtype,
                                    {as_dtype(x, dtype), as_dtype(one, dtype)}, {desc}, ctx)[0]
                           .to_float_vector();
      EXPECT_TRUE(std::isnan(sum[0]));
      EXPECT_EQ(sum[2], inf);
      EXPECT_EQ(sum[3], 3.0f);
    }
  }
}

// Batch norm in bf16 takes f32 scale / offset / running statistics and updates the running
// statistics in place, in the caller's buffers, exactly as the f32 kernel does on the same
// (bf16-representable) data — natively and emulated.
TEST(LowPrecisionNumerics, BatchNormBf16UpdatesF32RunningStatsInPlace) {
  Rng rng(3);
  const Shape xs{4, 3, 5, 5};
  const Tensor x = rounded_to(random_tensor(xs, rng, 1.0f, 3.0f), DType::bf16);
  const Tensor scale = random_tensor({3}, rng, 0.5f, 1.5f), offset = random_tensor({3}, rng);
  const Tensor mean0 = random_tensor({3}, rng), var0 = random_tensor({3}, rng, 0.5f, 2.0f);
  const BatchNormAttrs attrs{1e-5f, 0.1f, true};

  ExecContext f32_ctx;
  Tensor ref_mean = mean0.clone(), ref_var = var0.clone();
  run_op_eager(OpKind::FusedBatchNorm, attrs, DType::f32, {x, scale, offset, ref_mean, ref_var},
               {{xs, DType::f32}, {{3}, DType::f32}, {{3}, DType::f32}}, f32_ctx);

  for (bool native : {true, false}) {
    ExecContext ctx;
    ctx.native_bf16 = native;
    Tensor running_mean = mean0.clone(), running_var = var0.clone();
    const auto out =
        run_op_eager(OpKind::FusedBatchNorm, attrs, DType::bf16,
                     {as_dtype(x, DType::bf16), scale, offset, running_mean, running_var},
                     {{xs, DType::bf16}, {{3}, DType::f32}, {{3}, DType::f32}}, ctx);
    EXPECT_EQ(out[0].dtype(), DType::bf16);
    EXPECT_EQ(out[1].dtype(), DType::f32);
    EXPECT_EQ(running_mean.dtype(), DType::f32);
    EXPECT_FALSE(all_close(running_mean, mean0, 0, 0)) << "running mean was not updated";
    EXPECT_TRUE(all_close(running_mean, ref_mean, 0, 0)) << (native ? "native" : "emulated");
    EXPECT_TRUE(all_close(running_var, ref_var, 0, 0)) << (native ? "native" : "emulated");
  }
}

// Emulated kernels of one context share one workspace; a later, larger reservation moves
// it, and the earlier kernel follows (and keeps giving the same answer on every run).
TEST(LowPrecisionKernels, EmulatedKernelsShareAGrowingWorkspace) {
  Rng rng(5);
  ExecContext ctx;
  auto small_spec = conv_spec(DType::f16);
  auto small = create_kernel(small_spec, ctx);
  const void* before = ctx.workspace();
  KernelSpec big_spec{
      OpKind::Relu, NoAttrs{}, DType::f16, {{{1 << 16}, DType::f16}}, {{{1 << 16}, DType::f16}},
      "relu"};
  auto big = create_kernel(big_spec, ctx);
  EXPECT_NE(ctx.workspace(), before);

  const Tensor x = as_dtype(rounded_to(random_tensor({2, 8, 9, 9}, rng), DType::f16), DType::f16);
  const Tensor w = as_dtype(rounded_to(random_tensor({16, 8, 3, 3}, rng), DType::f16), DType::f16);
  const Tensor expected = run_op(OpKind::Conv2D, conv(1, 1), {x, w}, DType::f16)[0];
  Tensor y = Tensor::zeros({2, 16, 9, 9}, DType::f16);
  Tensor r_in = as_dtype(random_tensor({1 << 16}, rng), DType::f16);
  Tensor r_out = Tensor::zeros({1 << 16}, DType::f16);
  for (int step = 0; step < 2; ++step) {
    small->run(ctx, {x, w}, {y});
    big->run(ctx, {r_in}, {r_out});
    EXPECT_TRUE(all_close(y, expected, 0, 0)) << "step " << step;
  }
}

// ---- whole training steps ----

// LeNet's whole training step (forward, loss, backward, SGD) under the `amp` policy: every
// op it paints runs its bf16 / f16 kernel, and the losses of two steps stay within a few
// percent of f32's (weights identical at the start; bf16 has 8 significant bits).
TEST(LowPrecisionTraining, LenetStepMatchesF32) {
  const Shape images{8, 1, 28, 28};
  TrainingStep f32("lenet", images, DType::f32);
  const float f32_loss0 = f32.run(), f32_loss1 = f32.run();
  for (DType dtype : {DType::bf16, DType::f16}) {
    TrainingStep low("lenet", images, dtype);
    int low_nodes = 0;
    for (const Node& n : low.graph.nodes()) low_nodes += n.dtype == dtype;
    EXPECT_GT(low_nodes, 10) << dtype_name(dtype);
    const float loss0 = low.run(), loss1 = low.run();
    EXPECT_NEAR(loss0, f32_loss0, 0.03 * f32_loss0) << dtype_name(dtype);
    EXPECT_NEAR(loss1, f32_loss1, 0.03 * f32_loss1) << dtype_name(dtype);
    EXPECT_LT(loss1, loss0) << dtype_name(dtype);  // the step learned something
  }
}

}  // namespace
}  // namespace campo::testing

namespace campo::testing {
namespace {

// A cast folded into Conv2DBackpropFilter (Node::f32_output): bf16 x and dy, f32 dw. The
// f32 result is the f32 kernel's on the same (bf16-exact) inputs to bf16 precision (exactly
// where oneDNN writes f32 itself; to one bf16 rounding where its GEMM path computes bf16
// and the kernel widens it), and rounding it to bf16 gives the bf16-output kernel's result
// to one bf16 ulp. A 3x3 and a 1x1 convolution (oneDNN's direct and GEMM paths here), for
// the oneDNN kernel (AVX-512 BF16) and the emulated one.
TEST(LowPrecisionTest, Bf16BackpropFilterWritesF32Weights) {
  struct Case {
    Shape x, dy, w;
    ConvAttrs a;
  };
  const Case cases[] = {
      {{4, 8, 10, 10}, {4, 16, 10, 10}, {16, 8, 3, 3}, conv(1, 1, {16, 8, 3, 3})},
      {{4, 64, 4, 4}, {4, 256, 4, 4}, {256, 64, 1, 1}, conv(1, 0, {256, 64, 1, 1})}};
  Rng rng(11);
  for (const Case& c : cases) {
    const Tensor x = rounded_to(random_tensor(c.x, rng), DType::bf16);
    const Tensor dy = rounded_to(random_tensor(c.dy, rng), DType::bf16);
    const Tensor want = run_op(OpKind::Conv2DBackpropFilter, c.a, {x, dy}, DType::f32)[0];
    for (bool native : {true, false}) {
      if (native && !cpu_has_native_bf16()) continue;
      ExecContext ctx;
      ctx.native_bf16 = native;
      auto run = [&](DType out_dtype) {
        KernelSpec spec{OpKind::Conv2DBackpropFilter,
                        c.a,
                        DType::bf16,
                        {{c.x, DType::bf16}, {c.dy, DType::bf16}},
                        {{c.w, out_dtype}},
                        "dw"};
        auto kernel = create_kernel(spec, ctx);
        std::vector<Tensor> out = {Tensor::zeros(c.w, out_dtype)};
        kernel->run(ctx, {as_dtype(x, DType::bf16), as_dtype(dy, DType::bf16)}, out);
        return out[0];
      };
      const Tensor f32_out = run(DType::f32), bf16_out = run(DType::bf16);
      ASSERT_EQ(f32_out.dtype(), DType::f32);
      const float* got = f32_out.data_as<float>();
      const float* ref = want.data_as<float>();
      const size_t n = size_t(f32_out.numel());
      Tensor rounded = Tensor::empty(c.w, DType::bf16);
      convert(got, DType::f32, rounded.data(), DType::bf16, n);
      std::vector<float> r(n), b(n);
      convert(rounded.data(), DType::bf16, r.data(), DType::f32, n);
      convert(bf16_out.data(), DType::bf16, b.data(), DType::f32, n);
      double moved = 0;
      for (size_t i = 0; i < n; ++i) {
        moved = std::max(moved, double(std::abs(got[i])));
        EXPECT_NEAR(got[i], ref[i], std::abs(ref[i]) / 128.0f + 1e-4f)
            << (native ? "native " : "emulated ") << shape_str(c.w) << " " << i;
        EXPECT_NEAR(r[i], b[i], std::abs(b[i]) / 128.0f + 1e-6f) << shape_str(c.w) << " " << i;
      }
      EXPECT_GT(moved, 0.1) << shape_str(c.w);  // not left at zero
    }
  }
}

}  // namespace
}  // namespace campo::testing
