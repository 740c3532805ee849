#include "models/models.h"

#include <algorithm>

namespace campo {

namespace {
struct Entry {
  const char* name;
  ValueId (*build)(Builder&, ValueId, const ModelOptions&);
  ModelOutputs (*build_outputs)(Builder&, ValueId, const ModelOptions&) = nullptr;  // or this
  ModelInput input = ModelInput::images;
  TrainingDefaults defaults = {};
  bool convolutions = true;  // whether --conv-layout means anything for it
  bool dropout = false;      // whether it takes a dropout rate (--dropout)
  // Why it cannot be built as a model array (train/model_array.h); null: it can.
  const char* no_array = nullptr;
  ModelFamily family = ModelFamily::classifier;
};
const TrainingDefaults kLr001 = {.lr = 0.01f};
const Entry kModels[] = {
    {"mlp", build_mlp, nullptr, ModelInput::images, {}, false, true},
    {"lenet", build_lenet},
    {"resnet18", build_resnet18},
    {"resnet50", build_resnet50},
    {"vgg16", build_vgg16, nullptr, ModelInput::images, kLr001},
    {"vgg16_bn", build_vgg16_bn, nullptr, ModelInput::images, kLr001},
    {"alexnet", build_alexnet, nullptr, ModelInput::images, kLr001},
    {"inception_v3", nullptr, build_inception_v3, ModelInput::images, kLr001, true, false,
     "its branches concatenate channels, which would interleave the stacked models"},
    {"bert",
     build_bert,
     nullptr,
     ModelInput::tokens,
     {.lr = 5e-4f, .optimizer = OptimizerConfig::Kind::adam, .warmup_steps = 100, .dropout = 0.1f},
     false,
     true,
     "layer normalisation and attention act across the stacked models",
     ModelFamily::masked_lm},
    // PyTorch's examples/dcgan recipe: Adam at 2e-4, a constant rate; bf16, since its
    // session has no dynamic loss scaling for fp16.
    {"dcgan",
     nullptr,
     nullptr,
     ModelInput::images,
     {.lr = 2e-4f,
      .optimizer = OptimizerConfig::Kind::adam,
      .lr_schedule = "constant",
      .low_precision = "bf16"},
     true,
     false,
     nullptr,
     ModelFamily::gan},
};

const Entry& entry(const std::string& name) {
  for (const Entry& e : kModels)
    if (name == e.name) return e;
  std::string known;
  for (const Entry& e : kModels) known += std::string(known.empty() ? "" : ", ") + e.name;
  CAMPO_FAIL("unknown model '", name, "' (known models: ", known, ")");
}
}  // namespace

ModelInput model_input(const std::string& name) { return entry(name).input; }
TrainingDefaults training_defaults(const std::string& name) { return entry(name).defaults; }
bool has_convolutions(const std::string& name) { return entry(name).convolutions; }
bool has_dropout(const std::string& name) { return entry(name).dropout; }
ModelFamily model_family(const std::string& name) { return entry(name).family; }
int step_graph_count(const std::string& name) {
  return is_known_model(name) && entry(name).family == ModelFamily::gan ? 2 : 1;
}
bool has_accuracy(const std::string& name) {
  return is_known_model(name) && entry(name).family != ModelFamily::gan;
}
float bench_lr(const std::string& name, float fallback) {
  const Entry& e = entry(name);
  return e.family == ModelFamily::gan && e.defaults.lr ? *e.defaults.lr : fallback;
}
std::string why_no_model_array(const std::string& name) {
  const char* why = entry(name).no_array;
  return why ? why : "";
}
std::vector<std::string> model_array_names() {
  std::vector<std::string> out;
  for (const Entry& e : kModels)
    if (!e.no_array) out.push_back(e.name);
  return out;
}

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const Entry& e : kModels) out.push_back(e.name);
  return out;
}

bool is_known_model(const std::string& name) {
  for (const Entry& e : kModels)
    if (name == e.name) return true;
  return false;
}

bool uses_small_variant(const ModelOptions& o, const Shape& image_shape) {
  CAMPO_CHECK(o.stem == "auto" || o.stem == "imagenet" || o.stem == "small",
              "model stem must be auto, imagenet or small, got '", o.stem, "'");
  CAMPO_CHECK(image_shape.size() >= 2, "image shape ", shape_str(image_shape),
              " has no spatial dimensions");
  if (o.stem != "auto") return o.stem == "small";
  const int64_t h = image_shape[image_shape.size() - 2], w = image_shape.back();
  return std::min(h, w) < 64;
}

ModelOutputs build_model_outputs(const std::string& name, Builder& b, ValueId images,
                                 const ModelOptions& o) {
  const Entry& e = entry(name);
  CAMPO_CHECK(e.family != ModelFamily::gan, name,
              " is a GAN: its generator and discriminator are built by its "
              "training session (train/gan_trainer.h), not as one classifier");
  if (e.build_outputs) return e.build_outputs(b, images, o);
  ModelOutputs out;
  out.logits = e.build(b, images, o);
  return out;
}

ValueId build_model(const std::string& name, Builder& b, ValueId images, const ModelOptions& o) {
  return build_model_outputs(name, b, images, o).logits;
}

}  // namespace campo
