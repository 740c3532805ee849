// The mixed-precision lists per (device, low-precision type): the CPU's are the op schemas'
// (unchanged, so the pinned losses hold); CUDA's follow TensorFlow's CUDA lists
// (AutoMixedPrecisionListsFp16, tensorflow/core/grappler/optimizers/
// auto_mixed_precision_lists.h), transcribed here by TensorFlow's op names independently of
// amp/lists.cc's table.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "amp/lists.h"
#include "graph/graph.h"

namespace campo {
namespace {

// TensorFlow's CUDA lists, campo's ops only, by name. FusedBatchNorm(Grad) stand for
// TensorFlow's V2/V3 (its rewrite turns V1 into V2); Add for Add/AddV2. Dropout,
// SigmoidCrossEntropyWithLogits(Grad), MeanGrad, SoftmaxGrad, Gelu(Grad) and
// LayerNorm(Grad) are not TensorFlow ops (it composes them): they keep the CPU's lists
// (amp/lists.cc says why).
const std::map<std::string, AmpList> kTensorFlowCuda = {
    {"Conv2D", AmpList::allow},
    {"Conv2DBackpropFilter", AmpList::allow},
    {"Conv2DBackpropInput", AmpList::allow},
    {"MatMul", AmpList::allow},
    {"BatchMatMulV2", AmpList::allow},
    {"Add", AmpList::infer},
    {"AddN", AmpList::infer},
    {"AvgPool", AmpList::infer},
    {"AvgPoolGrad", AmpList::infer},
    {"BiasAdd", AmpList::infer},
    {"BiasAddGrad", AmpList::infer},
    {"FusedBatchNorm", AmpList::infer},
    {"FusedBatchNormGrad", AmpList::infer},
    {"LeakyRelu", AmpList::infer},
    {"LeakyReluGrad", AmpList::infer},
    {"Mul", AmpList::infer},
    {"Sigmoid", AmpList::infer},
    {"SigmoidGrad", AmpList::infer},
    {"Tanh", AmpList::infer},
    {"TanhGrad", AmpList::infer},
    {"Softmax", AmpList::infer},
    {"Mean", AmpList::deny},
    {"Sum", AmpList::deny},
    {"SparseSoftmaxCrossEntropyWithLogits", AmpList::deny},
    {"BroadcastTo", AmpList::clear},
    {"MaxPool", AmpList::clear},
    {"MaxPoolGrad", AmpList::clear},
    {"Relu", AmpList::clear},
    {"ReluGrad", AmpList::clear},
    {"Reshape", AmpList::clear},
    {"ConcatV2", AmpList::clear},
    {"SplitV", AmpList::clear},
    {"Transpose", AmpList::clear},
    {"GatherV2", AmpList::clear},
    // UnsortedSegmentSum is on none of TensorFlow's lists: absent here, so f32.
    // Not TensorFlow ops: the CPU's lists.
    {"Dropout", AmpList::clear},
    {"SigmoidCrossEntropyWithLogits", AmpList::deny},
    {"SigmoidCrossEntropyWithLogitsGrad", AmpList::deny},
    {"MeanGrad", AmpList::infer},
    {"SoftmaxGrad", AmpList::infer},
    {"Gelu", AmpList::infer},
    {"GeluGrad", AmpList::infer},
    {"LayerNorm", AmpList::infer},
    {"LayerNormGrad", AmpList::infer},
};

std::vector<OpKind> all_ops() {
  std::vector<OpKind> ops;
  for (size_t k = 0; k < size_t(OpKind::kCount); ++k) ops.push_back(OpKind(k));
  return ops;
}

TEST(AmpDeviceListsTest, CpuListsAreTheSchemasListsForBothLowTypes) {
  for (Device device : {Device::cpu, Device::cpu_strict})
    for (DType low : {DType::bf16, DType::f16}) {
      const AmpLists lists = AmpLists::defaults(device, low);
      for (OpKind op : all_ops())
        EXPECT_EQ(lists.classify(op), op_schema(op).amp_list)
            << device_name(device) << " " << dtype_name(low) << " " << op_name(op);
    }
}

TEST(AmpDeviceListsTest, CudaListsAreTensorFlowsCudaListsForBothLowTypes) {
  for (DType low : {DType::f16, DType::bf16}) {
    const AmpLists lists = AmpLists::defaults(Device::cuda, low);
    for (OpKind op : all_ops()) {
      auto it = kTensorFlowCuda.find(op_name(op));
      const AmpList expected = it == kTensorFlowCuda.end() ? AmpList::fp32 : it->second;
      EXPECT_EQ(lists.classify(op), expected) << dtype_name(low) << " " << op_name(op);
    }
  }
}

// TensorFlow's own CUDA f16 and oneDNN bf16 lists differ, for campo's ops, at Mean and Sum
// alone (oneDNN: infer; CUDA: deny). CUDA takes TensorFlow's CUDA choice; the CPU keeps deny
// as it always had (TensorFlow's oneDNN lists had deny too until they moved them).
TEST(AmpDeviceListsTest, MeanAndSumAreDenyOnCudaAndStayDenyOnTheCpu) {
  const AmpLists cuda = AmpLists::defaults(Device::cuda, DType::f16);
  const AmpLists cpu = AmpLists::defaults(Device::cpu, DType::bf16);
  for (OpKind op : {OpKind::Mean, OpKind::Sum}) {
    EXPECT_EQ(cuda.classify(op), AmpList::deny) << op_name(op);
    EXPECT_EQ(cpu.classify(op), AmpList::deny) << op_name(op);
  }
}

// CUDA's lists are a table of their own, not the schemas': an op put on a CPU list needs a
// decision for CUDA (TensorFlow's CUDA list for it) in amp/lists.cc.
TEST(AmpDeviceListsTest, EveryOpOnACpuListIsOnACudaList) {
  const AmpLists cuda = AmpLists::defaults(Device::cuda, DType::f16);
  for (OpKind op : all_ops())
    if (op_schema(op).amp_list != AmpList::fp32)
      EXPECT_NE(cuda.classify(op), AmpList::fp32)
          << op_name(op) << " is on the CPU's " << amp_list_name(op_schema(op).amp_list)
          << " list but on no CUDA list: add TensorFlow's CUDA list for it to kCudaLists "
             "(amp/lists.cc)";
}

TEST(AmpDeviceListsTest, EditsApplyOnTopOfADevicesLists) {
  AmpLists lists = AmpLists::defaults(Device::cuda, DType::f16);
  lists.edit("deny-=Mean;allow+=Tanh");
  EXPECT_EQ(lists.classify(OpKind::Mean), AmpList::fp32);
  EXPECT_EQ(lists.classify(OpKind::Tanh), AmpList::allow);
  EXPECT_EQ(lists.classify(OpKind::Conv2D), AmpList::allow);
}

TEST(AmpDeviceListsTest, ListsAreForLowPrecisionTypesOnly) {
  try {
    (void)AmpLists::defaults(Device::cuda, DType::f32);
    ADD_FAILURE() << "f32 lists were made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 or f16, not f32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace campo
