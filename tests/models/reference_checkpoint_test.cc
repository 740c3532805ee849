// Checkpoints of the reference implementations load into campo's models, strictly: the
// names and shapes torchvision's state_dict and Hugging Face's save_pretrained write
// (tests/models/reference/*.json, made by scripts/reference-checkpoints.py) are exactly
// campo's variables; a file with those tensors loads with nothing missing or left over.
// And a real BertForMaskedLM file written by Hugging Face loads into campo's bert, which
// then computes the logits Hugging Face computed for the same tokens.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "graph/checkpoint.h"
#include "graph/executor.h"
#include "tests/models/model_test_util.h"

namespace campo {
namespace {

const std::string kReference = std::string(CAMPO_SOURCE_DIR) + "/tests/models/reference/";

std::vector<std::pair<std::string, Shape>> reference_tensors(const std::string& model) {
  std::ifstream f(kReference + model + ".json");
  EXPECT_TRUE(f.good()) << "missing " << kReference << model << ".json";
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& t : j.at("tensors"))
    out.push_back({t.at(0).get<std::string>(), t.at(1).get<std::vector<int64_t>>()});
  return out;
}

// Builds `model`, checks its variables against the reference's tensors one by one, then
// writes a file of exactly the reference's tensors (values i * 1e-6 in the first, so the
// load can be seen) and loads it strictly.
void expect_reference_loads(const std::string& model, const std::vector<int64_t>& input,
                            ModelOptions o) {
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  {
    Builder b(g, vars);
    const DType dtype = model_input(model) == ModelInput::tokens ? DType::i32 : DType::f32;
    if (dtype == DType::f32) {
      o.in_channels = int(input[1]);
      o.image_size = int(input[2]);
    }
    build_model(model, b, b.placeholder("input", input, dtype), o);
  }
  const auto reference = reference_tensors(model == "bert" ? "bert_base" : model);
  std::map<std::string, Shape> ours;
  for (const std::string& n : vars.names()) ours[n] = vars.at(n).shape();
  std::vector<std::pair<std::string, Tensor>> file;
  for (const auto& [name, shape] : reference) {
    if (name.size() > 20 && name.substr(name.size() - 20) == ".num_batches_tracked") {
      // torchvision's BN step counter: campo accepts it when loading.
      file.push_back({name, Tensor::zeros(shape, DType::i64)});
      continue;
    }
    auto it = ours.find(name);
    ASSERT_NE(it, ours.end()) << model << ": the reference has " << name << ", campo does not";
    EXPECT_EQ(it->second, shape) << model << ": " << name;
    ours.erase(it);
    file.push_back({name, Tensor::zeros(shape, DType::f32)});
  }
  for (const auto& [name, shape] : ours)
    ADD_FAILURE() << model << ": campo has " << name << ", the reference does not";
  float* first = file[0].second.data_as<float>();
  for (int64_t i = 0; i < file[0].second.numel(); ++i) first[i] = float(i % 1000) * 1e-6f;
  testing::TempDir dir;
  const std::string path = dir.str() + "/" + model + ".safetensors";
  write_safetensors(path, file, {{"format", "pt"}});
  load_checkpoint(path, vars,
                  LoadOptions{.allow_missing_optimizer_state = true, .strict_unexpected = true});
  const std::vector<float> loaded = vars.at(file[0].first).to_float_vector();
  for (size_t i = 0; i < loaded.size(); ++i)
    ASSERT_EQ(loaded[i], float(i % 1000) * 1e-6f)
        << model << ": " << file[0].first << "[" << i << "]";
}

ModelOptions classes(int n) {
  ModelOptions o;
  o.num_classes = n;
  return o;
}

TEST(ReferenceCheckpointTest, TorchvisionModelsLoad) {
  expect_reference_loads("alexnet", {1, 3, 224, 224}, classes(1000));
  expect_reference_loads("resnet18", {1, 3, 224, 224}, classes(1000));
  expect_reference_loads("resnet50", {1, 3, 224, 224}, classes(1000));
  expect_reference_loads("vgg16", {1, 3, 224, 224}, classes(1000));
  expect_reference_loads("vgg16_bn", {1, 3, 224, 224}, classes(1000));
  expect_reference_loads("inception_v3", {2, 3, 299, 299}, classes(1000));
}

TEST(ReferenceCheckpointTest, HuggingFaceBertBaseLoads) {
  ModelOptions o = classes(30522);
  o.bert_config = "base";
  expect_reference_loads("bert", {1, 8}, o);
}

// Hugging Face's own file of a BERT-tiny-sized model (vocabulary 64) and the logits it
// computed in eval mode: campo's bert, loaded from that file, agrees to float rounding.
TEST(ReferenceCheckpointTest, HuggingFaceBertComputesTheSameLogits) {
  const std::map<std::string, Tensor> io =
      read_safetensors(kReference + "bert_tiny_io.safetensors");
  const Tensor& ids = io.at("input_ids");
  const Tensor& expected = io.at("logits");
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  ValueId logits;
  {
    Builder b(g, vars);
    b.set_training(false);
    ModelOptions o = classes(64);
    o.bert_config = "tiny";
    logits = build_model("bert", b, b.placeholder("input_ids", ids.shape(), DType::i32), o);
  }
  load_checkpoint(kReference + "bert_tiny.safetensors", vars,
                  LoadOptions{.allow_missing_optimizer_state = true, .strict_unexpected = true});
  CompileOptions co;
  co.fetches = {logits};
  Executable exe(g, vars, co);
  exe.feed("input_ids", ids);
  exe.run();
  const std::vector<float> got = exe.fetch(logits).to_float_vector();
  const std::vector<float> want = expected.to_float_vector();
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, double(std::fabs(got[i] - want[i])));
  EXPECT_LT(worst, 1e-4) << "largest difference from Hugging Face's logits";
}

}  // namespace
}  // namespace campo
