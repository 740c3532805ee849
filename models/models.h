// The model zoo: each model is a function that emits its forward graph through the
// Builder and returns the logits. Parameter names follow PyTorch's state_dict
// (torchvision's for ResNet and VGG).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "graph/optimizer.h"

namespace campo {

struct ModelOptions {
  int in_channels = 1;
  int image_size = 28;
  int num_classes = 10;
  float dropout = 0.0f;  // where the model has a configurable dropout (mlp)
  // A model array's per-model dropout rates (mlp; train/model_array.h), replacing `dropout`
  // when given: one per model.
  std::vector<float> array_dropout;
  // The input-size variant of the ImageNet models: "imagenet" is torchvision's model as
  // is; "small" suits 28-32 px images (ResNet: a 3x3/1 stem conv and no max-pool; VGG:
  // no final max-pool, global average pooling and a 512-512-classes classifier); "auto"
  // picks "imagenet" for images of at least 64 px and "small" below.
  std::string stem = "auto";
  // inception_v3: build the auxiliary classifier (torchvision's aux_logits) where the input
  // allows it (299 px or more).
  bool aux_logits = true;
  // bert: the size (bert_config's names); num_classes is the vocabulary size and `dropout`
  // the hidden and attention dropout.
  std::string bert_config = "mini";
};

// BERT's sizes: tiny (2 layers, hidden 128, 2 heads), mini (4, 256, 4), small (4, 512, 8),
// medium (8, 512, 8), base (12, 768, 12); intermediate 4 x hidden, 512 positions, 2 token
// types, LayerNorm eps 1e-12 (Hugging Face's BertConfig defaults).
struct BertConfig {
  int layers = 4, hidden = 256, heads = 4, intermediate = 1024;
  int max_positions = 512, type_vocab = 2;
  float layer_norm_eps = 1e-12f;
};
BertConfig bert_config(const std::string& name);

// What a model reads and predicts: images [N, C, H, W] f32 with one class per image, or
// token ids [N, T] i32 with a prediction per token (bert: logits [N * T, vocabulary]).
enum class ModelInput { images, tokens };
ModelInput model_input(const std::string& name);

// The training recipe a model gets for what the command line leaves out (the reference
// recipes: torchvision's lr 0.01 for VGG and AlexNet; BERT's Adam with warm-up and dropout
// 0.1; DCGAN's Adam at 2e-4, constant). Unset fields keep the trainer's defaults.
struct TrainingDefaults {
  std::optional<float> lr;
  std::optional<OptimizerConfig::Kind> optimizer;
  std::optional<int64_t> warmup_steps;
  std::optional<float> dropout;
  std::optional<std::string> lr_schedule;    // --lr-schedule's names
  std::optional<std::string> low_precision;  // on every device (else the device's)
};
TrainingDefaults training_defaults(const std::string& name);
// Whether the model has convolutions (mlp and bert have none: --conv-layout means nothing
// for them).
bool has_convolutions(const std::string& name);
// Whether the model takes a dropout rate (--dropout): mlp and bert.
bool has_dropout(const std::string& name);
// What kind of session trains the model (train/make_session.h, the one place that reads it
// to choose one): a classifier (TrainingSession), BERT's masked language model (the same
// session over token ids) or a GAN (dcgan: a generator and a discriminator trained against
// each other by GanSession, train/gan_trainer.h, with no evaluation; the build functions
// below refuse it). Unknown names throw.
enum class ModelFamily { classifier, masked_lm, gan };
ModelFamily model_family(const std::string& name);
// What the rest of the program asks of a model instead of its family (false or 1 for
// unknown names, which the commands refuse with their own line):
// the graphs of one training step: 1, or 2 for a GAN (its discriminator's and generator's
// steps); campo graph, plan --for, --alloc-trace and --data-parallel take models of one.
int step_graph_count(const std::string& name);
// Whether the model predicts classes (or tokens) with an accuracy to evaluate, and so takes
// --classes, --eval-batch and a test split; not a GAN.
bool has_accuracy(const std::string& name);
// The learning rate campo bench steps at: `fallback` (small, so that weights stay sane over
// the benchmark), or a GAN's own recipe rate (dcgan's 2e-4: the pair is stepped as it
// trains).
float bench_lr(const std::string& name, float fallback);
// Why the model cannot be built as a model array (train/model_array.h: every layer must act
// per channel or through the layer helpers), or "" when it can; and the models that can.
std::string why_no_model_array(const std::string& name);
std::vector<std::string> model_array_names();

// What a model emits: its logits, and auxiliary classifier heads (Inception-v3's AuxLogits)
// whose losses a training graph adds to the main loss with their weights. Inference uses
// only `logits` (dead-code elimination drops the heads).
struct ModelOutputs {
  struct Auxiliary {
    ValueId logits = kNoValue;
    float loss_weight = 0.0f;
  };
  ValueId logits = kNoValue;
  std::vector<Auxiliary> auxiliary;
};

// images: [N, C, H, W] f32. Returns logits [N, num_classes].
ValueId build_model(const std::string& name, Builder& b, ValueId images, const ModelOptions& o);
// The same with the auxiliary heads, for training graphs.
ModelOutputs build_model_outputs(const std::string& name, Builder& b, ValueId images,
                                 const ModelOptions& o);
// Every model's name (the GAN's too).
std::vector<std::string> model_names();
bool is_known_model(const std::string& name);

// Whether the "small" variant applies to images of the given shape under o.stem (checks
// o.stem; throws on an unknown value).
bool uses_small_variant(const ModelOptions& o, const Shape& image_shape);

// Individual models.
ValueId build_mlp(Builder& b, ValueId images, const ModelOptions& o);
ValueId build_lenet(Builder& b, ValueId images, const ModelOptions& o);
// torchvision resnet18 / resnet50 (v1.5: the bottleneck strides on its 3x3 conv).
ValueId build_resnet18(Builder& b, ValueId images, const ModelOptions& o);
ValueId build_resnet50(Builder& b, ValueId images, const ModelOptions& o);
// torchvision alexnet.
ValueId build_alexnet(Builder& b, ValueId images, const ModelOptions& o);
// torchvision inception_v3 (with AuxLogits as ModelOptions::aux_logits says).
ModelOutputs build_inception_v3(Builder& b, ValueId images, const ModelOptions& o);
// Hugging Face BertForMaskedLM (o.bert_config; o.num_classes the vocabulary); input ids
// [N, T] i32 -> logits [N * T, vocabulary].
ValueId build_bert(Builder& b, ValueId input_ids, const ModelOptions& o);
// torchvision vgg16 / vgg16_bn (configuration "D").
ValueId build_vgg16(Builder& b, ValueId images, const ModelOptions& o);
ValueId build_vgg16_bn(Builder& b, ValueId images, const ModelOptions& o);

}  // namespace campo
