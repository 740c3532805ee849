#include "train/training_graph.h"

#include <algorithm>
#include <cmath>

#include "amp/cost_aware.h"
#include "amp/loss_scaler.h"
#include "amp/padding.h"
#include "amp/precision_policy.h"
#include "datasets/dataset.h"
#include "graph/autodiff.h"
#include "graph/builder.h"
#include "ops/kernel.h"
#include "ops/quantized_gemm_route.h"
#include "runtime/check.h"
#include "runtime/communicator.h"

namespace campo {

ThreeWayCostTable three_way_costs(const CostTable& bf16, const CostTable& f16) {
  ThreeWayCostTable t;
  t.nodes.resize(std::max(bf16.nodes.size(), f16.nodes.size()));
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const NodeCost b = i < bf16.nodes.size() ? bf16.nodes[i] : NodeCost{};
    const NodeCost h = i < f16.nodes.size() ? f16.nodes[i] : NodeCost{};
    // Both tables time the f32 step (interleaved with their own low one): each node's
    // fastest, as every profiling time is.
    const double f32 = b.fp32_ms > 0 && h.fp32_ms > 0 ? std::min(b.fp32_ms, h.fp32_ms)
                                                      : std::max(b.fp32_ms, h.fp32_ms);
    t.nodes[i] = {f32, h.low_ms, b.low_ms};
  }
  t.casts.f32_to_f16 = f16.cast;
  t.casts.f16_to_f32 = f16.cast_to_f32 ? *f16.cast_to_f32 : f16.cast;
  t.casts.f32_to_bf16 = bf16.cast;
  t.casts.bf16_to_f32 = bf16.cast_to_f32 ? *bf16.cast_to_f32 : bf16.cast;
  return t;
}

AutoPlan plan_automatic(const Graph& g, const PrecisionConfig& precision,
                        const CostTable& bf16_costs, const PolicyAssignment* rules) {
  CAMPO_CHECK(precision.search == CostAwareSearch::exact,
              "internal: --low-precision auto with the traversals (precision_config refuses it)");
  const ThreeWayCostTable costs = three_way_costs(bf16_costs, *precision.f16_costs);
  const bool fold = precision.fold_casts;
  std::vector<uint8_t> allowed =
      allowed_types(g, precision.f16_lists, precision.lists, LowPrecisionMode::automatic);
  auto is_set = [&](size_t i) { return rules && rules->is_set(NodeId(i)); };
  for (size_t i = 0; i < allowed.size(); ++i)
    if (is_set(i))
      allowed[i] = rules->dtype[i] == DType::f16    ? kAllowF16
                   : rules->dtype[i] == DType::bf16 ? kAllowBF16
                                                    : kAllowF32;
  const ThreeWayPlan mixed = minimize_three_way(g, costs, allowed, fold);
  // The plans of one low type within auto's choices (f16 kept off the ops that need range).
  // The search is exact for each; with folded casts the mixed search prices a fold only where
  // no reader may leave f32, so a one-type plan can predict faster: the fastest of the three.
  std::vector<uint8_t> only_bf16 = allowed, only_f16 = allowed;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (is_set(i)) continue;  // a rule's type stays in every plan
    only_bf16[i] &= uint8_t(~kAllowF16);
    only_f16[i] &= uint8_t(~kAllowBF16);
  }
  AutoPlan r;
  const ThreeWayPlan bf16 = minimize_three_way(g, costs, only_bf16, fold);
  const ThreeWayPlan f16 = minimize_three_way(g, costs, only_f16, fold);
  r.choice.bf16_only_ms = bf16.predicted_ms;
  r.choice.f16_only_ms = f16.predicted_ms;
  const ThreeWayPlan* best = &mixed;
  if (bf16.predicted_ms < best->predicted_ms) best = &bf16, r.choice.chosen = "bf16 only";
  if (f16.predicted_ms < best->predicted_ms) best = &f16, r.choice.chosen = "f16 only";
  CostAwarePlan& plan = r.plan;
  plan.dtype = best->dtype;
  plan.low.assign(plan.dtype.size(), 0);
  plan.decided_by.assign(plan.dtype.size(), Traversal::none);
  for (size_t i = 0; i < plan.dtype.size(); ++i) {
    if (plan.dtype[i] != DType::f32) {
      plan.low[i] = 1;
      plan.decided_by[i] = Traversal::exact;
    }
    if (is_set(i)) plan.decided_by[i] = Traversal::rule;
  }
  plan.predicted_ms = plan.traversals_ms = best->predicted_ms;
  return r;
}

std::vector<DType> amp_dtypes(const Graph& g, const PrecisionConfig& precision,
                              const PolicyAssignment* rules) {
  const std::vector<char> low = paint_amp(g, precision.lists);
  std::vector<DType> dtype(low.size(), DType::f32);
  for (size_t i = 0; i < low.size(); ++i) {
    if (low[i]) dtype[i] = precision.low;
    if (rules && rules->is_set(NodeId(i))) dtype[i] = rules->dtype[i];
  }
  return dtype;
}

namespace {

// --allow-fp8: the costs the search runs on, each unpinned node's f32 time the cheaper of its
// f32 and FP8 forms (an FP8 GEMM is an f32 node on quantized operands).
CostTable fp8_as_f32_form(const CostTable& costs, const std::vector<int8_t>& pins) {
  CostTable t = costs;
  for (size_t i = 0; i < t.nodes.size(); ++i)
    if (pins.empty() || pins[i] == kUnpinned)
      t.nodes[i].fp32_ms = std::min(t.nodes[i].fp32_ms, t.nodes[i].fp8_ms);
  return t;
}

// The plan's f32 nodes whose FP8 form was the cheaper run on FP8 operands: the "fp8" format
// (E4M3 forward, E5M2 gradients) with delayed scaling, as a policy file's rule would set it.
// Nodes a rule pinned keep the rule's format.
void set_fp8_gemms(Graph& g, const CostTable& costs, CostAwarePlan& plan) {
  plan.fp8.assign(size_t(g.num_nodes()), 0);
  GemmQuant fp8;
  fp8.enabled = true;
  fp8.format = "fp8";
  for (NodeId id = 0; id < g.num_nodes() && size_t(id) < costs.nodes.size(); ++id) {
    const NodeCost& c = costs.nodes[size_t(id)];
    if (plan.low[size_t(id)] || plan.decided_by[size_t(id)] == Traversal::rule ||
        !(c.fp8_ms < c.fp32_ms))
      continue;
    Node& n = g.node(id);
    n.quant = fp8;
    set_operand_elements(g, n, ElementFormat::e4m3, ElementFormat::e5m2, n.quant);
    plan.fp8[size_t(id)] = 1;
  }
}

}  // namespace

PolicyResult apply_policy(Graph& g, const PrecisionConfig& precision, const CostTable* costs,
                          std::shared_ptr<Backend> backend, const PaddingDecision& pays,
                          Communicator* agree) {
  PolicyResult r;
  if (precision.rules) {
    r.rules =
        std::make_shared<const PolicyAssignment>(resolve_precision_policy(g, *precision.rules));
    // GEMM operand formats: the nodes compute in f32 (a pin like any rule's) on quantized
    // operands; their state variables are build_training_graph's.
    for (NodeId id = 0; id < g.num_nodes(); ++id) g.node(id).quant = r.rules->quant[size_t(id)];
  }
  switch (precision.policy) {
    case Precision::fp32:
      if (r.rules) apply_precision(g, r.rules->dtype);  // the rules' nodes, the rest f32
      return r;
    case Precision::amp:
      if (r.rules)
        apply_precision(g, amp_dtypes(g, precision, r.rules.get()));
      else
        apply_amp_policy(g, precision.lists, precision.low);
      return r;
    case Precision::cost_aware:
      break;
  }
  CAMPO_CHECK(costs != nullptr,
              "internal: cost-aware needs the graph's costs (train/profiling.h "
              "with_profiled_costs measures them)");
  std::shared_ptr<CostAwarePlan> plan;
  if (precision.automatic()) {
    CAMPO_CHECK(precision.f16_costs != nullptr,
                "internal: --low-precision auto needs the graph's f16 costs too");
    AutoPlan automatic = plan_automatic(g, precision, *costs, r.rules.get());
    r.auto_choice = automatic.choice;
    plan = std::make_shared<CostAwarePlan>(std::move(automatic.plan));
    if (agree && agree->size() > 1)
      agree->broadcast(reinterpret_cast<char*>(plan->dtype.data()), plan->dtype.size(), 0);
    for (size_t i = 0; i < plan->dtype.size(); ++i) plan->low[i] = plan->dtype[i] != DType::f32;
    apply_precision(g, plan->dtype, precision.fold_casts);
  } else {
    CostAwareOptions options{precision.search, precision.fold_casts};
    if (r.rules) {
      options.pins.assign(size_t(g.num_nodes()), kUnpinned);
      for (NodeId i = 0; i < g.num_nodes(); ++i) {
        if (!r.rules->is_set(i)) continue;
        const DType t = r.rules->dtype[size_t(i)];
        CAMPO_CHECK(t == DType::f32 || t == precision.low, "internal: a rule sets ", dtype_name(t),
                    " in a cost-aware plan over f32 and ", dtype_name(precision.low),
                    " (precision_config refuses it)");
        options.pins[size_t(i)] = t == DType::f32 ? kPinnedF32 : kPinnedLow;
      }
    }
    if (precision.allow_fp8) {
      const CostTable with_fp8 = fp8_as_f32_form(*costs, options.pins);
      plan =
          std::make_shared<CostAwarePlan>(plan_cost_aware(g, precision.lists, with_fp8, options));
      set_fp8_gemms(g, *costs, *plan);
    } else {
      plan = std::make_shared<CostAwarePlan>(plan_cost_aware(g, precision.lists, *costs, options));
    }
    if (agree && agree->size() > 1) agree->broadcast(plan->low.data(), plan->low.size(), 0);
    apply_precision(g, plan->low, precision.low, precision.fold_casts);
  }
  r.pad_to = backend ? backend->padding_alignment() : kPadTo;
  r.padding_candidates = int(padding_candidates(g, r.pad_to).size());
  if (precision.padding)
    r.padded = apply_padding(
        g,
        [&](NodeId id) {
          char yes =
              pays ? pays(g, id) : padding_pays(g, id, {.pad_to = r.pad_to, .backend = backend});
          if (agree && agree->size() > 1) agree->broadcast(&yes, 1, 0);
          return yes != 0;
        },
        r.pad_to);
  r.cost_plan = std::move(plan);
  return r;
}

namespace {

// Replaces each gradient by its mean over the ranks (TrainingGraphSpec::data_parallel):
// buckets of about d.bucket_bytes in the order the schedule computes the gradients, each an
// AllReduceStart / AllReduceWait pair. Returns the buckets' bytes, in the order they start.
std::vector<int64_t> append_gradient_reduction(Builder& b, std::vector<ValueId>& grads,
                                               const TrainingGraphSpec::DataParallel& d) {
  CAMPO_CHECK(d.bucket_bytes > 0, "--bucket-mb must be positive");
  const Graph& g = b.graph();
  std::vector<int> position(size_t(g.num_nodes()), 0);
  const std::vector<NodeId> order = g.topological_order();
  for (size_t i = 0; i < order.size(); ++i) position[size_t(order[i])] = int(i);
  std::vector<size_t> ready;  // indices of grads, earliest computed first
  for (size_t i = 0; i < grads.size(); ++i)
    if (grads[i] != kNoValue) ready.push_back(i);
  std::stable_sort(ready.begin(), ready.end(), [&](size_t x, size_t y) {
    return position[size_t(g.value(grads[x]).producer)] <
           position[size_t(g.value(grads[y]).producer)];
  });
  b.set_phase(Phase::backward);
  std::vector<int64_t> buckets;
  for (size_t first = 0; first < ready.size();) {
    size_t last = first;
    int64_t bytes = 0;
    AllReduceAttrs attrs{.scale = 1.0f / float(d.ranks)};
    std::vector<ValueId> inputs;
    while (last < ready.size() && (inputs.empty() || bytes < d.bucket_bytes)) {
      const ValueId v = grads[ready[last++]];
      inputs.push_back(v);
      attrs.shapes.push_back(b.shape(v));
      bytes += shape_numel(b.shape(v)) * int64_t(sizeof(float));
    }
    const std::string name = "AllReduce/bucket" + std::to_string(buckets.size());
    buckets.push_back(bytes);
    const ValueId bucket = b.op(OpKind::AllReduceStart, inputs, attrs, name + "/start");
    const std::vector<ValueId> reduced =
        b.op_multi(OpKind::AllReduceWait, {bucket}, attrs, name + "/wait");
    for (size_t k = first; k < last; ++k) grads[ready[k]] = reduced[k - first];
    first = last;
  }
  return buckets;
}

}  // namespace

const char* input_placeholder(const std::string& model) {
  return model_input(model) == ModelInput::tokens ? "input_ids" : "images";
}

TrainingGraphInfo build_training_graph(Graph& g, VariableStore& vars,
                                       const TrainingGraphSpec& spec) {
  TrainingGraphInfo info;
  CAMPO_CHECK(
      spec.precision.policy != Precision::cost_aware ||
          (spec.precision.costs && (!spec.precision.automatic() || spec.precision.f16_costs)),
      "internal: build_training_graph: cost-aware without costs (fill them with "
      "with_profiled_costs, train/profiling.h)");
  Builder b(g, vars);
  b.set_training(true);
  Shape input_shape = {spec.batch};
  input_shape.insert(input_shape.end(), spec.image_shape.begin(), spec.image_shape.end());
  if (spec.array > 1) {
    CAMPO_CHECK(model_input(spec.model) == ModelInput::images && input_shape.size() == 4,
                "internal: model arrays take image models");
    CAMPO_CHECK(spec.optimizer.slices == spec.array, "internal: an array of ", spec.array,
                " models with an optimizer over ", spec.optimizer.slices, " slices");
    const int64_t n = spec.array;
    b.set_array_size(spec.array);
    input_shape[1] *= n;
    ValueId images = b.placeholder(input_placeholder(spec.model), input_shape);
    ValueId labels = b.placeholder("labels", {spec.batch * n}, DType::i32);
    const ModelOutputs model = build_model_outputs(spec.model, b, images, spec.model_options);
    CAMPO_CHECK(model.auxiliary.empty(), "internal: a model array with auxiliary heads");
    const Shape& logits = b.shape(model.logits);  // [batch, n * classes]
    ValueId per_example = b.sparse_softmax_cross_entropy(
        b.reshape(model.logits, {spec.batch * n, logits[1] / n}), labels);
    info.model_losses = b.mean(b.reshape(per_example, {spec.batch, n}), {0});
    info.loss = b.sum(info.model_losses);
  } else if (model_input(spec.model) == ModelInput::tokens) {
    // A prediction per token: logits [batch * T, V] against the labels flattened, the
    // unmasked ones (kIgnoreLabel) left out of the sum and of the count.
    ValueId ids = b.placeholder(input_placeholder(spec.model), input_shape, DType::i32);
    ValueId labels = b.placeholder("labels", input_shape, DType::i32);
    const ModelOutputs model = build_model_outputs(spec.model, b, ids, spec.model_options);
    ValueId per_token = b.sparse_softmax_cross_entropy(
        model.logits, b.reshape(labels, {shape_numel(input_shape)}), kIgnoreLabel);
    info.loss = b.mul(b.sum(per_token), b.placeholder("inv_num_targets", {}));
  } else {
    ValueId images = b.placeholder(input_placeholder(spec.model), input_shape);
    ValueId labels = b.placeholder("labels", {spec.batch}, DType::i32);
    const ModelOutputs model = build_model_outputs(spec.model, b, images, spec.model_options);
    info.loss = b.mean(b.sparse_softmax_cross_entropy(model.logits, labels));
    for (const ModelOutputs::Auxiliary& aux : model.auxiliary)  // e.g. loss + 0.4 aux loss
      info.loss = b.add(info.loss, b.mul(b.mean(b.sparse_softmax_cross_entropy(aux.logits, labels)),
                                         b.constant(aux.loss_weight)));
  }
  ValueId seed_grad = b.placeholder("loss_scale", {});
  std::vector<std::string> params = vars.names_of_kind(VariableKind::parameter);
  std::vector<ValueId> param_values;
  for (const auto& name : params) param_values.push_back(g.node(g.find_node(name)).outputs[0]);
  std::vector<ValueId> grads = append_gradients(b, info.loss, seed_grad, param_values);
  if (spec.data_parallel.ranks > 0)
    info.gradient_bucket_bytes = append_gradient_reduction(b, grads, spec.data_parallel);
  if (spec.precision.scaler.enabled) {
    // Unscale in f32 and check every gradient for inf/NaN in one pass.
    b.set_phase(Phase::backward);
    ValueId inv_scale = b.placeholder("inv_loss_scale", {});
    for (size_t i = 0; i < grads.size(); ++i)
      if (grads[i] != kNoValue)
        grads[i] = b.op(OpKind::Mul, {grads[i], inv_scale}, NoAttrs{}, params[i] + "/unscale");
    std::vector<ValueId> present;
    for (ValueId v : grads)
      if (v != kNoValue) present.push_back(v);
    info.all_finite = b.op(OpKind::AllFinite, present, NoAttrs{}, "AllFinite");
  }
  append_optimizer(b, params, grads, spec.optimizer, info.all_finite);
  // Pure low-precision training: the weights (and state) in their stored types before the
  // policy, so that its cast insertion gives only their f32 readers a Cast (fp32 inserts
  // none itself: insert_casts after it).
  const bool low_storage = use_storage_types(g, vars, params, spec.optimizer);
  const PolicyResult policy = apply_policy(g, spec.precision, spec.precision.costs.get(),
                                           vars.backend_ptr(), nullptr, spec.data_parallel.agree);
  if (low_storage) insert_casts(g);
  if (spec.precision.policy == Precision::cost_aware) {
    info.costs = spec.precision.costs;
    if (spec.precision.automatic()) info.f16_costs = spec.precision.f16_costs;
  }
  // Each quantized GEMM operand's state (scale, step count, amax history), saved in
  // checkpoints and continued by --resume. A GEMM the step never runs (the data gradient of a
  // first layer, dead code) is not quantized and has none.
  const std::vector<char> live = live_nodes(g, info.fetches());
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    Node& n = g.node(id);
    if (n.quant.enabled && !live[size_t(id)]) n.quant = {};
    if (n.quant.enabled)
      for (int i = 0; i < 2; ++i)
        vars.get_or_create(gemm_quant_state_name(n.name, i),
                           {gemm_quant_state_size(n.quant.recipe)}, Init::zeros(),
                           VariableKind::quantization_state);
  }
  info.cost_plan = policy.cost_plan;
  info.padding_candidates = policy.padding_candidates;
  info.padded = policy.padded;
  info.auto_choice = policy.auto_choice;
  info.rules = policy.rules;
  info.pad_to = policy.pad_to;
  info.summary = summarize_precision(g, info.fetches());
  if (info.costs) info.summary.calibration = info.costs->calibration;
  return info;
}

PrecisionConfig precision_config(Precision policy, const PrecisionOptions& o, Device device) {
  PrecisionConfig p;
  p.policy = policy;
  p.low_mode = parse_low_precision_mode(o.low_precision);
  // auto: cost-aware's choice per node; amp paints one type, bf16 (it has f32's range).
  p.low = low_type_of(p.low_mode);
  p.search = parse_search(o.search);
  CAMPO_CHECK(!(p.automatic() && p.policy == Precision::cost_aware &&
                p.search == CostAwareSearch::traversals),
              "--low-precision auto chooses among f32, f16 and bf16 by the exact search only "
              "(--search traversals decides between f32 and one low type)");
  p.fold_casts = o.fold_casts;
  p.allow_fp8 = o.allow_fp8 && policy == Precision::cost_aware;
  CAMPO_CHECK(!p.allow_fp8 || !p.automatic(),
              "--allow-fp8 searches f32, FP8 GEMMs and one low type: give --low-precision bf16 "
              "or fp16, not auto");
  p.lists = AmpLists::defaults(device, p.low);
  p.f16_lists = AmpLists::defaults(device, DType::f16);
  CAMPO_CHECK(o.loss_scale == "auto" || o.loss_scale == "dynamic" || o.loss_scale == "none",
              "--loss-scale must be auto, dynamic or none, got '", o.loss_scale, "'");
  const bool mixed = p.policy != Precision::fp32;
  if (mixed && !o.precision_policy_file.empty()) {
    auto rules =
        std::make_shared<const PrecisionPolicy>(read_precision_policy(o.precision_policy_file));
    if (p.policy == Precision::cost_aware && !p.automatic())
      for (const PrecisionRule& r : rules->rules)
        CAMPO_CHECK(r.format == DType::f32 || r.format == p.low, "precision policy file ",
                    rules->path, ", rule ", r.index, " (", r.describe(), "): cost-aware with ",
                    "--low-precision ", low_precision_mode_name(p.low_mode),
                    " chooses between f32 and ", dtype_name(p.low), " only; set ",
                    dtype_name(p.low), " or f32, or give --low-precision auto (f32, f16 or bf16 "
                    "per node)");
    p.rules = std::move(rules);
  }
  // auto with cost-aware may run nodes in f16, which needs the scaling; the plan is made on
  // the graph the scaling is part of, so it is on whatever the plan chooses. So may a rule.
  const bool may_run_f16 = p.low == DType::f16 ||
                           (p.automatic() && p.policy == Precision::cost_aware) ||
                           (p.rules && p.rules->sets(DType::f16));
  p.scaler.enabled =
      mixed && (o.loss_scale == "dynamic" || (o.loss_scale == "auto" && may_run_f16));
  // --loss-scale-init in [2^-14, 2^64] (docs/mixed-precision.md), a start the scaler can
  // recover from. 2^-14, fp16's smallest normal number: a smaller scale puts a loss of 1 among
  // fp16's subnormals, the underflow loss scaling is there to avoid, and growing back to the
  // default 2^16 would take 30 growth intervals (60000 steps by default). 2^64: a scale that
  // overflows every step is halved into fp16's range (2^16) in 48 skipped steps, well within
  // the 100 skipped steps in a row that end a run (train/loop.cc); its reciprocal is a normal
  // f32 number.
  CAMPO_CHECK(std::isfinite(o.loss_scale_init) && o.loss_scale_init > 0,
              "--loss-scale-init must be positive, got ", o.loss_scale_init);
  CAMPO_CHECK(o.loss_scale_init >= 0x1p-14f && o.loss_scale_init <= 0x1p64f,
              "--loss-scale-init must be in [2^-14, 2^64] (6.1e-05 to 1.8e+19), a scale the "
              "dynamic scaling can grow or back off from, got ",
              o.loss_scale_init);
  CAMPO_CHECK(o.loss_scale_growth_interval > 0,
              "--loss-scale-growth-interval must be positive, got ", o.loss_scale_growth_interval);
  p.scaler.init_scale = o.loss_scale_init;
  p.scaler.growth_interval = o.loss_scale_growth_interval;
  // The edits apply to both types' lists (auto plans with both).
  if (!o.amp_lists_file.empty())
    AmpLists::edit_from_file(o.amp_lists_file, {&p.lists, &p.f16_lists});
  if (!o.amp_lists_edit.empty())
    for (AmpLists* lists : {&p.lists, &p.f16_lists}) lists->edit(o.amp_lists_edit);
  LossScaler check(p.scaler);  // validates the scaler options
  (void)check;
  return p;
}

std::string check_precision_policy(const TrainingGraphSpec& spec, Device device) {
  if (!spec.precision.rules) return {};
  TrainingGraphSpec fp32 = spec;
  fp32.precision.policy = Precision::fp32;
  fp32.precision.rules = nullptr;
  fp32.precision.costs = nullptr;
  fp32.precision.f16_costs = nullptr;
  fp32.data_parallel.agree = nullptr;
  fp32.optimizer.slices = fp32.array;  // a model array's update, as its session makes it
  Graph g;
  VariableStore vars(1, default_cpu_backend());  // the graph only: nothing runs
  const TrainingGraphInfo info = build_training_graph(g, vars, fp32);
  // The GEMMs a step runs: a dead one (the data gradient of a first layer) is never quantized.
  const std::vector<char> live = live_nodes(g, info.fetches());
  const PolicyAssignment a = resolve_precision_policy(g, *spec.precision.rules);
  // A device's kernels exist in this build where its f32 ones do (a build without CUDA plans
  // for a GPU from the graph alone).
  const Device kernels = device == Device::cuda ? Device::cuda : Device::cpu;
  const bool emulates = kernels == Device::cpu;
  int quantized = 0, fp8_gemms = 0;  // on cuda
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (a.quant[size_t(id)].enabled) {
      const PrecisionRule& r = spec.precision.rules->rules[size_t(a.rule[size_t(id)] - 1)];
      CAMPO_CHECK(has_quantized_gemm_kernel(kernels), "precision policy file ",
                  spec.precision.rules->path, ", rule ", r.index, " (", r.describe(),
                  "): this build has no quantized GEMM kernel for ", device_name(device),
                  " (FP8 and MX emulation runs on the CPU only in a build without CUDA; node ",
                  n.name, ")");
      if (kernels == Device::cuda) {
        const CudaGemmPlan plan = plan_quantized_gemm_on_cuda(
            n.kind, n.attrs, {g.value(n.inputs[0]).shape, g.value(n.inputs[1]).shape},
            a.quant[size_t(id)]);
        CAMPO_CHECK(plan.route != CudaGemmRoute::refused, "precision policy file ",
                    spec.precision.rules->path, ", rule ", r.index, " (", r.describe(),
                    "): ", plan.reason, ", not on ", device_name(device), " (node ", n.name, ")");
        quantized += live[size_t(id)];
        fp8_gemms += live[size_t(id)] && plan.route == CudaGemmRoute::fp8;
      }
      continue;
    }
    if (!a.is_set(id) || a.dtype[size_t(id)] == DType::f32) continue;
    if (!has_kernel(n.kind, kernels, DType::f32, emulates)) continue;
    const PrecisionRule& r = spec.precision.rules->rules[size_t(a.rule[size_t(id)] - 1)];
    CAMPO_CHECK(has_kernel(n.kind, kernels, a.dtype[size_t(id)], emulates),
                "precision policy file ", spec.precision.rules->path, ", rule ", r.index, " (",
                r.describe(), "): ", device_name(device), " has no ", dtype_name(r.format),
                " kernel for ", op_name(n.kind), " (node ", n.name, ")");
  }
  if (quantized == 0) return {};
  return "quantized GEMMs on " + std::string(device_name(device)) + ": " +
         std::to_string(fp8_gemms) + " as cuBLASLt FP8 GEMMs, " +
         std::to_string(quantized - fp8_gemms) +
         " emulated (f32 kernels on the decoded codes; campo plan --device cuda says which and "
         "why)";
}

}  // namespace campo
