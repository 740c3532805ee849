// What plan and bench share about a model run (perf/model_run.h).
#include "perf/model_run.h"

#include <string>

#include "models/models.h"
#include "runtime/cpu_backend.h"
#include "train/model_array.h"
#include "train/options.h"

namespace campo {

PrecisionConfig model_run_precision(const ModelRunOptions& o, Precision policy) {
  PrecisionConfig c = precision_config(policy, o.mixed, o.device.type);
  c.costs = o.costs;
  if (policy == Precision::cost_aware && !o.costs) c.calibration = o.calibration;
  return c;
}

TrainingGraphSpec model_run_spec(const ModelRunOptions& o, Precision policy) {
  CAMPO_CHECK(is_known_model(o.model), "unknown model '", o.model, "'");
  CAMPO_CHECK(o.batch > 0, "--batch must be a positive number of samples, got ", o.batch);
  CAMPO_CHECK(o.image_size > 0 && o.channels > 0 && o.classes > 1,
              "--image-size, --channels and --classes must be positive (classes >= 2)");
  TrainingGraphSpec spec;
  spec.model = o.model;
  spec.model_options.in_channels = o.channels;
  spec.model_options.image_size = o.image_size;
  spec.model_options.num_classes = o.classes;
  spec.model_options.bert_config = o.bert_config;
  spec.image_shape = {o.channels, o.image_size, o.image_size};
  if (model_input(o.model) == ModelInput::tokens) {
    CAMPO_CHECK(o.seq_len >= 1, "--seq-len must be positive, got ", o.seq_len);
    spec.image_shape = {o.seq_len};
  }
  spec.batch = o.batch;
  spec.optimizer.kind = o.optimizer;
  spec.precision = model_run_precision(o, policy);
  // --array N: N copies as one fused step, "lr" [N] (one rate per model).
  spec.array = o.array;
  spec.optimizer.slices = o.array;
  return spec;
}

Device plan_for_device(const PlanForOptions& f) {
  check_plan_for_options(f);
  return find_device(device_table(f.devices_path), f.device).kind == "gpu" ? Device::cuda
                                                                           : Device::cpu;
}

void attach_predicted_costs(ModelRunOptions& o) {
  const PlanForOptions& f = o.plan_for;
  check_plan_for_options(f);
  if (!f.active()) return;
  CAMPO_CHECK(step_graph_count(o.model) == 1,
              "--for plans models of one step graph (classifiers and BERT), not ", o.model);
  const RecordedProfile profile = read_profile(f.profile_path);
  const std::string model = profile.said("model");
  CAMPO_CHECK(model == "?" || model == o.model, profile.where, " is a profile of ", model,
              ", not of ", o.model, ": record one with campo train --model ", o.model,
              " ... --profile-out FILE");
  const std::vector<DeviceModel> table = device_table(f.devices_path);
  const DeviceModel& to = find_device(table, f.device);
  const DeviceModel from = profile.origin(table, f.from);
  Graph g;
  VariableStore vars(o.seed, default_cpu_backend());  // the graph only: nothing runs
  const TrainingGraphInfo info = build_training_graph(g, vars, model_run_spec(o, Precision::fp32));
  const PrecisionConfig precision = precision_config(Precision::cost_aware, o.mixed, o.device.type);
  CAMPO_CHECK(!precision.automatic(),
              "--for predicts the costs of one low type: give --low-precision bf16 or fp16, "
              "not auto");
  const DType low = precision.low;
  o.costs = std::make_shared<const CostTable>(
      predict_cost_table(g, info.fetches(), profile, from, to, low, o.mixed.allow_fp8));
  o.costs_note = "cost-aware's costs predicted for " + to.name + " (" + to.full_name + ") from " +
                 profile.where + ", measured on " + from.name + " (" + from.full_name + ")";
}

constexpr int kMaxArraySize = 64;  // --array's bound, as campo train's (train/trainer.cc)

void check_model_run_numbers(const ModelRunOptions& o) {
  CAMPO_CHECK(is_known_model(o.model), "unknown model '", o.model, "'");
  CAMPO_CHECK(o.batch > 0, "--batch must be a positive number of samples, got ", o.batch);
  CAMPO_CHECK(o.image_size > 0, "--image-size must be positive, got ", o.image_size);
  CAMPO_CHECK(o.channels > 0, "--channels must be positive, got ", o.channels);
  CAMPO_CHECK(o.classes > 1, "--classes must be at least 2, got ", o.classes);
  CAMPO_CHECK(o.array >= 1 && o.array <= kMaxArraySize, "--array must be a number of models in 1..",
              kMaxArraySize, ", got ", o.array);
  if (o.array > 1) {
    std::string why;
    CAMPO_CHECK(supports_model_array(o.model, &why), why);
  }
}

}  // namespace campo
