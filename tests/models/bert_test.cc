// BERT: Hugging Face BertForMaskedLM's parameter count (bert-base-uncased: 109,514,298)
// and state_dict names, the sizes, the token input, the masked-LM training graph, and that
// a few Adam steps on one fixed batch lower its loss.
#include <gtest/gtest.h>

#include <set>

#include "datasets/dataset.h"
#include "graph/autodiff.h"
#include "tests/models/model_test_util.h"
#include "train/training_graph.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

struct BuiltBert {
  Graph graph;
  VariableStore vars{0, default_cpu_backend()};
  ValueId logits = kNoValue;
  BuiltBert(const std::string& config, int64_t vocab, int64_t batch, int64_t seq) {
    ModelOptions o;
    o.num_classes = int(vocab);
    o.bert_config = config;
    Builder b(graph, vars);
    logits = build_model("bert", b, b.placeholder("input_ids", {batch, seq}, DType::i32), o);
  }
};

TEST(BertTest, BaseHasHuggingFaceParameterCountAndNames) {
  BuiltBert m("base", 30522, 1, 8);
  // sum(p.numel()) of transformers.BertForMaskedLM(BertConfig()) (the decoder tied to the
  // word embeddings, as from_pretrained("bert-base-uncased") has it).
  EXPECT_EQ(m.vars.count_elements(VariableKind::parameter), 109514298);
  EXPECT_EQ(m.graph.value(m.logits).shape, Shape({8, 30522}));
  EXPECT_EQ(m.vars.at("bert.embeddings.word_embeddings.weight").shape(), Shape({30522, 768}));
  EXPECT_EQ(m.vars.at("bert.embeddings.position_embeddings.weight").shape(), Shape({512, 768}));
  EXPECT_EQ(m.vars.at("bert.embeddings.token_type_embeddings.weight").shape(), Shape({2, 768}));
  EXPECT_EQ(m.vars.at("bert.encoder.layer.11.attention.self.query.weight").shape(),
            Shape({768, 768}));
  EXPECT_EQ(m.vars.at("bert.encoder.layer.11.intermediate.dense.weight").shape(),
            Shape({3072, 768}));
  EXPECT_EQ(m.vars.at("bert.encoder.layer.11.output.dense.weight").shape(), Shape({768, 3072}));
  EXPECT_EQ(m.vars.at("cls.predictions.bias").shape(), Shape({30522}));
  EXPECT_FALSE(m.vars.contains("cls.predictions.decoder.weight"));  // tied: not a copy
  EXPECT_FALSE(m.vars.contains("bert.pooler.dense.weight"));        // BertForMaskedLM has none
}

TEST(BertTest, MiniHasEveryNameOfALayer) {
  BuiltBert m("mini", 1000, 2, 16);
  std::set<std::string> names;
  for (const std::string& n : m.vars.names_of_kind(VariableKind::parameter)) names.insert(n);
  const std::string layer = "bert.encoder.layer.3.";
  for (const char* suffix :
       {"attention.self.query.weight", "attention.self.query.bias", "attention.self.key.weight",
        "attention.self.key.bias", "attention.self.value.weight", "attention.self.value.bias",
        "attention.output.dense.weight", "attention.output.dense.bias",
        "attention.output.LayerNorm.weight", "attention.output.LayerNorm.bias",
        "intermediate.dense.weight", "intermediate.dense.bias", "output.dense.weight",
        "output.dense.bias", "output.LayerNorm.weight", "output.LayerNorm.bias"})
    EXPECT_TRUE(names.count(layer + suffix)) << layer + suffix;
  EXPECT_FALSE(names.count("bert.encoder.layer.4.output.dense.weight"));  // 4 layers: 0..3
  for (const char* n :
       {"cls.predictions.transform.dense.weight", "cls.predictions.transform.LayerNorm.bias",
        "bert.embeddings.LayerNorm.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  // 4 layers x 16 + 5 embedding + 5 head tensors.
  EXPECT_EQ(names.size(), 4u * 16 + 5 + 5);
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::BatchMatMulV2).size(), 2u * 4);
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::Softmax).size(), 4u);
  EXPECT_EQ(m.graph.nodes_of_kind(OpKind::LayerNorm).size(), 1u + 2 * 4 + 1);
  // Hugging Face's init: N(0, 0.02) weights, zero biases, LayerNorm ones.
  double sq = 0;
  const std::vector<float> w =
      m.vars.at("bert.encoder.layer.0.intermediate.dense.weight").to_float_vector();
  for (float v : w) sq += double(v) * v;
  EXPECT_NEAR(std::sqrt(sq / double(w.size())), 0.02, 0.001);
  for (float v : m.vars.at("bert.encoder.layer.0.intermediate.dense.bias").to_float_vector())
    EXPECT_EQ(v, 0.0f);
  for (float v : m.vars.at("bert.embeddings.LayerNorm.weight").to_float_vector())
    EXPECT_EQ(v, 1.0f);
}

TEST(BertTest, SizesAndInputsAreChecked) {
  EXPECT_EQ(bert_config("tiny").layers, 2);
  EXPECT_EQ(bert_config("small").hidden, 512);
  EXPECT_EQ(bert_config("base").intermediate, 3072);
  EXPECT_TRUE(contains(error_message([] { bert_config("huge"); }), "unknown --bert-config 'huge'"));
  Graph g;
  VariableStore vars(0, default_cpu_backend());
  Builder b(g, vars);
  ModelOptions o;
  o.num_classes = 100;
  o.bert_config = "tiny";
  const std::string images = error_message([&] {
    build_model("bert", b, b.placeholder("x", {2, 1, 28, 28}), o);
  });
  EXPECT_TRUE(contains(images, "bert expects token ids [batch, sequence] (i32)")) << images;
  const std::string long_seq = error_message([&] {
    build_model("bert", b, b.placeholder("ids", {1, 513}, DType::i32), o);
  });
  EXPECT_TRUE(contains(long_seq, "sequence length 513 is outside 1..512")) << long_seq;
  EXPECT_EQ(model_input("bert"), ModelInput::tokens);
  EXPECT_EQ(model_input("resnet18"), ModelInput::images);
}

// The training graph of a token model: ids and per-token labels, the loss a sum over the
// predicted tokens times 1/their number (fed per batch), and the position table's unused
// rows given zero gradient.
TEST(BertTest, MaskedLanguageModelTrainingGraph) {
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  TrainingGraphSpec spec;
  spec.model = "bert";
  spec.model_options.num_classes = 50;
  spec.model_options.bert_config = "tiny";
  spec.image_shape = {12};
  spec.batch = 3;
  spec.optimizer.kind = OptimizerConfig::Kind::adam;
  TrainingGraphInfo info = build_training_graph(g, vars, spec);
  EXPECT_EQ(g.value(g.node(g.find_node("input_ids")).outputs[0]).shape, Shape({3, 12}));
  EXPECT_EQ(g.value(g.node(g.find_node("labels")).outputs[0]).shape, Shape({3, 12}));
  EXPECT_GE(g.find_node("inv_num_targets"), 0);
  for (NodeId id : g.nodes_of_kind(OpKind::SparseSoftmaxCrossEntropyWithLogits))
    EXPECT_EQ(attrs_as<SparseSoftmaxCrossEntropyAttrs>(g.node(id).attrs).ignore_label,
              kIgnoreLabel);
  EXPECT_FALSE(g.nodes_of_kind(OpKind::GatherV2).empty());
  EXPECT_FALSE(g.nodes_of_kind(OpKind::UnsortedSegmentSum).empty());  // the tables' gradient

  // One step runs: the loss of random logits is about log(50).
  CompileOptions co;
  co.fetches = info.fetches();
  Executable exe(g, vars, co);
  std::vector<int32_t> ids(36), labels(36, kIgnoreLabel);
  for (int i = 0; i < 36; ++i) ids[size_t(i)] = 5 + (i * 7) % 45;
  labels[3] = 9;
  labels[20] = 14;
  labels[33] = 40;
  exe.feed("input_ids", Tensor::from_vector(ids, {3, 12}));
  exe.feed("labels", Tensor::from_vector(labels, {3, 12}));
  exe.feed_scalar("inv_num_targets", 1.0f / 3);
  exe.feed_scalar("loss_scale", 1.0f);
  exe.feed_scalar("lr", 1e-3f);
  exe.feed_scalar("step", 1.0f);
  exe.run();
  const float first = exe.fetch_scalar(info.loss);
  EXPECT_NEAR(first, std::log(50.0), 0.5);
  // Adam on the one batch learns its three masked tokens (dropout 0 here).
  float last = first;
  for (int step = 2; step <= 30; ++step) {
    exe.feed_scalar("step", float(step));
    exe.run();
    last = exe.fetch_scalar(info.loss);
  }
  EXPECT_LT(last, 0.5f * first) << "first " << first << " last " << last;
}

// The whole model's gradients (attention, embeddings with the tied decoder, the position
// table's unused rows) against central finite differences, a few entries per tensor.
TEST(BertTest, GradientsMatchFiniteDifferences) {
  Graph g;
  VariableStore vars(7, default_cpu_backend());
  ValueId loss;
  std::vector<std::string> names;
  std::vector<ValueId> grads;
  {
    Builder b(g, vars);
    ModelOptions o;
    o.num_classes = 23;
    o.bert_config = "tiny";
    ValueId ids = b.placeholder("input_ids", {2, 6}, DType::i32);
    ValueId labels = b.placeholder("labels", {12}, DType::i32);
    ValueId logits = build_model("bert", b, ids, o);
    loss = b.mean(b.sparse_softmax_cross_entropy(logits, labels, kIgnoreLabel));
    names = vars.names_of_kind(VariableKind::parameter);
    std::vector<ValueId> params;
    for (const std::string& n : names) params.push_back(g.node(g.find_node(n)).outputs[0]);
    grads = append_gradients(b, loss, b.placeholder("loss_scale", {}), params);
  }
  CompileOptions co;
  co.fetches = grads;
  co.fetches.push_back(loss);
  Executable exe(g, vars, co);
  std::vector<int32_t> ids = {5, 9, 4, 12, 7, 7, 22, 3, 11, 5, 6, 18};
  std::vector<int32_t> labels = {kIgnoreLabel, 3, 8, kIgnoreLabel, 21, 0, 9,
                                 kIgnoreLabel, 2, 2, 14,           5};
  exe.feed("input_ids", Tensor::from_vector(ids, {2, 6}));
  exe.feed("labels", Tensor::from_vector(labels, {12}));
  exe.feed_scalar("loss_scale", 1.0f);
  auto loss_now = [&] {
    exe.run();
    return double(exe.fetch_scalar(loss));
  };
  loss_now();
  Rng rng(3);
  int checked = 0, nonzero = 0;
  for (size_t p = 0; p < names.size(); ++p) {
    const std::vector<float> analytic = exe.fetch(grads[p]).to_float_vector();
    Tensor& w = vars.at(names[p]);
    float* data = w.data_as<float>();
    for (int k = 0; k < 2; ++k) {
      const int64_t i = int64_t(rng.below(uint64_t(w.numel())));
      const float saved = data[i];
      const float eps = 1e-2f;
      data[i] = saved + eps;
      const double up = loss_now();
      data[i] = saved - eps;
      const double down = loss_now();
      data[i] = saved;
      const double numeric = (up - down) / (2.0 * eps);
      EXPECT_NEAR(analytic[size_t(i)], numeric, 2e-3 + 0.05 * std::fabs(numeric))
          << names[p] << "[" << i << "]";
      ++checked;
      nonzero += std::fabs(numeric) > 1e-4;
    }
  }
  EXPECT_EQ(checked, int(names.size()) * 2);
  EXPECT_GT(nonzero, checked / 2);  // the entries checked do move the loss
}

}  // namespace
}  // namespace campo
