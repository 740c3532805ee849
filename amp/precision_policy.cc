#include "amp/precision_policy.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <nlohmann/json.hpp>
#include <optional>

#include "amp/json_input.h"
#include "amp/lists.h"
#include "graph/autodiff.h"
#include "graph/optimizer.h"
#include "runtime/check.h"
#include "runtime/minifloat.h"

namespace campo {

namespace {

using nlohmann::json;

constexpr const char* kFileKind = "precision policy file";
constexpr const char* kShape =
    " (expected {\"rules\": [{\"layers\": {\"first\": 1}, \"format\": \"f32\"}, ...]}; "
    "docs/mixed-precision.md)";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// What a format campo knows but has no kernels for is ("FP8 E4M3", "MXFP4 blocks of E2M1"), or
// "" when the name is none of them: the FP8/FP6/FP4 element formats (runtime/minifloat.h, with
// their aliases) and the MX block formats of them (runtime/mx.h).
std::string future_format(const std::string& name) {
  std::string s = lower(name);
  auto upper = [](std::string t) {
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::toupper(c); });
    return t;
  };
  std::string block;
  if (s.rfind("mx", 0) == 0) {
    s.erase(0, 2);
    block = "MX";
  }
  for (const char* family : {"fp8", "fp6", "fp4"})
    if (s == family) return block.empty() ? upper(s) : block + upper(s) + " blocks";
  try {
    const ElementFormatInfo& f = element_format_info(parse_element_format(s));
    const std::string family = "FP" + std::to_string(f.bits);
    return block.empty() ? family + " " + upper(f.name)
                         : block + family + " blocks of " + upper(f.name);
  } catch (const Error&) {
    return "";
  }
}

// The GEMM operand formats a rule may name: per-tensor FP8 (scaled by a delayed, current or
// no recipe) and MX blocks; `forward` / `gradient`: the element formats of operands that are
// activations or weights, and of those that are gradients.
struct GemmFormatName {
  const char* name;
  bool blocks;
  ElementFormat forward, gradient;
};
constexpr GemmFormatName kGemmFormats[] = {
    {"fp8", false, ElementFormat::e4m3, ElementFormat::e5m2},
    {"fp8_e4m3", false, ElementFormat::e4m3, ElementFormat::e4m3},
    {"fp8_e5m2", false, ElementFormat::e5m2, ElementFormat::e5m2},
    {"mxfp8", true, ElementFormat::e4m3, ElementFormat::e4m3},
    {"mxfp8_e4m3", true, ElementFormat::e4m3, ElementFormat::e4m3},
    {"mxfp8_e5m2", true, ElementFormat::e5m2, ElementFormat::e5m2},
    {"mxfp6_e2m3", true, ElementFormat::e2m3, ElementFormat::e2m3},
    {"mxfp6_e3m2", true, ElementFormat::e3m2, ElementFormat::e3m2},
    {"mxfp4", true, ElementFormat::e2m1, ElementFormat::e2m1},
    {"mxfp4_e2m1", true, ElementFormat::e2m1, ElementFormat::e2m1},
};
constexpr const char* kGemmFormatList =
    "fp8, fp8_e4m3, fp8_e5m2, mxfp8, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2 or mxfp4";

// Sets r.format (f32, bf16, f16) or r.gemm (a GEMM operand format) from the rule's "format".
void parse_format(const json& value, const std::string& where, PrecisionRule& r) {
  CAMPO_CHECK(value.is_string(), where, ": \"format\" must be a string (", policy_format_names(),
              "), got ", shown(value.dump()));
  const std::string name = value.get<std::string>();
  for (const GemmFormatName& f : kGemmFormats) {
    if (lower(name) != f.name) continue;
    r.format = DType::f32;
    r.gemm.enabled = true;
    r.gemm.blocks = f.blocks;
    r.gemm.format = f.name;
    r.gemm.recipe.scaling = f.blocks ? Scaling::mx : Scaling::delayed;
    r.forward_element = f.forward;
    r.gradient_element = f.gradient;
    return;
  }
  const std::string future = future_format(name);
  CAMPO_CHECK(future.empty(), where, ": format \"", shown(name), "\" (", future,
              ") is not a GEMM operand format campo computes in; a rule may set f32, bf16, f16 "
              "or ",
              kGemmFormatList, " (docs/formats.md)");
  DType t = DType::i32;
  try {
    t = parse_dtype(name);
  } catch (const Error&) {
  }
  CAMPO_CHECK(is_floating(t), where, ": unknown format \"", shown(name), "\" (expected ",
              policy_format_names(), ")");
  r.format = t;
}

// A "recipe" object: every key optional, each overriding what is below it (the format's
// defaults, then the file's recipe, then the rule's).
struct RecipeOverrides {
  std::optional<Scaling> scaling;
  std::optional<int> history, margin;
  std::optional<AmaxReduction> amax;
  std::optional<ElementFormat> forward, gradient;
  std::optional<bool> saturate;
  void apply(const RecipeOverrides& o) {
    auto over = [](auto& mine, const auto& theirs) {
      if (theirs) mine = theirs;
    };
    over(scaling, o.scaling);
    over(history, o.history);
    over(margin, o.margin);
    over(amax, o.amax);
    over(forward, o.forward);
    over(gradient, o.gradient);
    over(saturate, o.saturate);
  }
};

constexpr const char* kRecipeKeys =
    "\"scaling\", \"history\", \"amax\", \"margin\", \"forward\", \"gradient\" and "
    "\"saturate\"";

int parse_recipe_int(const json& value, const std::string& key, int min, int max,
                     const std::string& where) {
  CAMPO_CHECK(
      value.is_number_integer() && value.get<int64_t>() >= min && value.get<int64_t>() <= max,
      where, ": \"recipe\": \"", key, "\" must be a whole number in [", min, ", ", max, "], got ",
      shown(value.dump()));
  return int(value.get<int64_t>());
}

RecipeOverrides parse_recipe(const json& j, const std::string& where) {
  CAMPO_CHECK(j.is_object(), where,
              ": \"recipe\" must be an object like {\"scaling\": "
              "\"delayed\", \"history\": 1024, \"amax\": \"max\", \"margin\": 0}, got ",
              shown(j.dump()));
  RecipeOverrides o;
  auto string_of = [&](const json& value, const std::string& key, const char* expected) {
    CAMPO_CHECK(value.is_string(), where, ": \"recipe\": \"", key, "\" must be ", expected,
                ", got ", shown(value.dump()));
    return lower(value.get<std::string>());
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "scaling") {
      const char* expected = "\"delayed\", \"current\", \"mx\" or \"none\"";
      const std::string s = string_of(value, key, expected);
      if (s == "delayed")
        o.scaling = Scaling::delayed;
      else if (s == "current")
        o.scaling = Scaling::current;
      else if (s == "mx")
        o.scaling = Scaling::mx;
      else if (s == "none")
        o.scaling = Scaling::none;
      else
        CAMPO_FAIL(where, ": \"recipe\": unknown scaling \"", shown(s), "\" (", expected, ")");
    } else if (key == "history") {
      o.history = parse_recipe_int(value, key, 1, 1 << 20, where);
    } else if (key == "margin") {
      o.margin = parse_recipe_int(value, key, 0, 64, where);
    } else if (key == "amax") {
      const char* expected = "\"max\" or \"most_recent\"";
      const std::string s = string_of(value, key, expected);
      CAMPO_CHECK(s == "max" || s == "most_recent", where, ": \"recipe\": unknown amax \"",
                  shown(s), "\" (", expected, ")");
      o.amax = s == "max" ? AmaxReduction::max : AmaxReduction::most_recent;
    } else if (key == "forward" || key == "gradient") {
      const std::string s = string_of(value, key, "an element format (e4m3, e5m2, ...)");
      ElementFormat f;
      try {
        f = parse_element_format(s);
      } catch (const Error&) {
        CAMPO_FAIL(where, ": \"recipe\": \"", key, "\": unknown element format \"", shown(s),
                   "\" (e4m3, e5m2, e2m3, e3m2 or e2m1)");
      }
      (key == "forward" ? o.forward : o.gradient) = f;
    } else if (key == "saturate") {
      CAMPO_CHECK(value.is_boolean(), where,
                  ": \"recipe\": \"saturate\" must be true or "
                  "false, got ",
                  shown(value.dump()));
      o.saturate = value.get<bool>();
    } else {
      CAMPO_FAIL(where, ": \"recipe\": unknown key \"", shown(key), "\" (a recipe has ",
                 kRecipeKeys, ")");
    }
  }
  return o;
}

// r.gemm's recipe from its format's defaults and the overrides, checked against the format.
void settle_recipe(PrecisionRule& r, const RecipeOverrides& o, const std::string& where) {
  ScalingRecipe& recipe = r.gemm.recipe;
  const std::string format = "format " + r.gemm.format;
  if (o.scaling) recipe.scaling = *o.scaling;
  CAMPO_CHECK(r.gemm.blocks == (recipe.scaling == Scaling::mx), where, ": ", format,
              r.gemm.blocks ? " scales by 32-element blocks: its \"recipe\" takes scaling "
                              "\"mx\", not \""
                            : " scales per tensor: its \"recipe\" takes scaling \"delayed\", "
                              "\"current\" or \"none\", not \"",
              scaling_name(recipe.scaling), "\" (an MX format is mxfp8, mxfp6_e2m3, ...)");
  const bool delayed = recipe.scaling == Scaling::delayed;
  CAMPO_CHECK(delayed || (!o.history && !o.amax), where, ": \"recipe\": \"",
              o.history ? "history" : "amax", "\" is a setting of delayed scaling, not of \"",
              scaling_name(recipe.scaling), "\"");
  CAMPO_CHECK(delayed || recipe.scaling == Scaling::current || !o.margin, where,
              ": \"recipe\": \"margin\" is a setting of delayed and current scaling, not of "
              "\"",
              scaling_name(recipe.scaling), "\"");
  CAMPO_CHECK(!r.gemm.blocks || !o.saturate || *o.saturate, where, ": \"recipe\": ", format,
              " always saturates (OCP MX v1.0 clamps its elements): \"saturate\": false does "
              "not apply");
  if (o.history) recipe.history = *o.history;
  if (o.amax) recipe.amax = *o.amax;
  if (o.margin) recipe.margin = *o.margin;
  if (o.saturate && !*o.saturate) recipe.saturation = Saturation::non_saturating;
  if (o.forward) r.forward_element = *o.forward;
  if (o.gradient) r.gradient_element = *o.gradient;
  for (const auto& [key, f] :
       {std::pair{"forward", r.forward_element}, {"gradient", r.gradient_element}})
    CAMPO_CHECK(r.gemm.blocks || element_format_info(f).bits == 8, where, ": \"recipe\": \"", key,
                "\": ", element_format_name(f), " is not an FP8 element format; per-tensor ",
                format, " takes e4m3 or e5m2 (FP6 and FP4 run as MX blocks: mxfp6_e2m3, ...)");
}

// A string or an array of strings, each given to `add`.
template <typename Add>
void each_string(const json& value, const std::string& key, const std::string& where, Add add) {
  const json items = value.is_array() ? value : json::array({value});
  CAMPO_CHECK(value.is_string() || (value.is_array() && !value.empty()), where, ": \"", key,
              "\" must be a string or a non-empty array of strings, got ", shown(value.dump()));
  for (const json& item : items) {
    CAMPO_CHECK(item.is_string(), where, ": \"", key, "\" holds ", shown(item.dump()),
                ", not a string");
    add(item.get<std::string>());
  }
}

int parse_layer_count(const json& value, const std::string& key, const std::string& where) {
  CAMPO_CHECK(
      value.is_number_integer() && value.get<int64_t>() > 0 && value.get<int64_t>() <= INT_MAX,
      where, ": \"layers\": \"", key, "\" must be a positive whole number of layers, got ",
      shown(value.dump()));
  return int(value.get<int64_t>());
}

PrecisionRule parse_rule(const json& j, int index, const std::string& file,
                         const RecipeOverrides& file_recipe) {
  PrecisionRule r;
  r.index = index;
  const std::string where = file + ", rule " + std::to_string(index);
  CAMPO_CHECK(j.is_object(), where, " must be an object, got ", shown(j.dump()), kShape);
  bool has_format = false;
  std::optional<RecipeOverrides> recipe;
  std::optional<Rounding> rounding;
  for (const auto& [key, value] : j.items()) {
    if (key == "op") {
      each_string(value, key, where, [&](const std::string& name) {
        const OpKind op = parse_op_in(name, where);
        CAMPO_CHECK(AmpLists::may_be_listed(op), where, ": ", op_name(op),
                    " always runs in f32; a rule cannot set its format");
        r.ops.push_back(op);
      });
    } else if (key == "name") {
      each_string(value, key, where, [&](const std::string& glob) {
        CAMPO_CHECK(!glob.empty(), where, ": an empty \"name\" glob (\"*\" selects every node)");
        r.names.push_back(glob);
      });
    } else if (key == "layers") {
      CAMPO_CHECK(value.is_object() && !value.empty(), where,
                  ": \"layers\" must be an object like {\"first\": 1} or {\"first\": 1, "
                  "\"last\": 1}, got ",
                  shown(value.dump()));
      for (const auto& [end, count] : value.items()) {
        CAMPO_CHECK(end == "first" || end == "last", where,
                    ": \"layers\" takes \"first\" and "
                    "\"last\", not \"",
                    shown(end), "\"");
        (end == "first" ? r.first_layers : r.last_layers) = parse_layer_count(count, end, where);
      }
    } else if (key == "format") {
      parse_format(value, where, r);
      has_format = true;
    } else if (key == "recipe") {
      recipe = parse_recipe(value, where);
    } else if (key == "rounding") {
      CAMPO_CHECK(
          value.is_string() &&
              (value.get<std::string>() == "nearest" || value.get<std::string>() == "stochastic"),
          where, ": \"rounding\" must be \"nearest\" or \"stochastic\", got ", shown(value.dump()));
      rounding =
          value.get<std::string>() == "nearest" ? Rounding::nearest_even : Rounding::stochastic;
    } else if (key == "note") {
      CAMPO_CHECK(value.is_string(), where, ": \"note\" must be a string, got ",
                  shown(value.dump()));
      r.note = value.get<std::string>();
    } else {
      CAMPO_FAIL(where, ": unknown key \"", shown(key),
                 "\" (a rule has \"op\", \"name\", \"layers\", \"format\", \"recipe\", "
                 "\"rounding\" and \"note\")");
    }
  }
  CAMPO_CHECK(!r.ops.empty() || !r.names.empty() || r.selects_layers(), where,
              " selects nothing: give \"op\", \"name\" and/or \"layers\" (\"name\": \"*\" "
              "selects every node)");
  CAMPO_CHECK(has_format, where, " sets no \"format\" (", policy_format_names(), ")");
  CAMPO_CHECK(r.gemm.enabled || (!recipe && !rounding), where, ": \"",
              recipe ? "recipe" : "rounding", "\" applies to GEMM operand formats (",
              kGemmFormatList, "), not to ", dtype_name(r.format));
  if (r.gemm.enabled) {
    for (OpKind op : r.ops)
      CAMPO_CHECK(is_quantizable_gemm(op), where, ": format ", r.gemm.format,
                  " is a format of GEMM operands (MatMul, BatchMatMulV2, Conv2D, "
                  "Conv2DBackpropInput, Conv2DBackpropFilter); ",
                  op_name(op), " is not one");
    // The file's recipe is the default of the per-tensor formats; MX formats scale by blocks
    // whatever it says, and take their own recipe only.
    RecipeOverrides merged = r.gemm.blocks ? RecipeOverrides{} : file_recipe;
    if (recipe) merged.apply(*recipe);
    settle_recipe(r, merged, where);
    if (rounding) r.gemm.rounding = *rounding;
  }
  return r;
}

bool is_gemm_layer_op(OpKind k) {
  return k == OpKind::Conv2D || k == OpKind::Conv2DBackpropInput || k == OpKind::MatMul ||
         k == OpKind::BatchMatMulV2;
}

bool selects(const PrecisionRule& r, const Node& n, int layer, int layers) {
  if (!r.ops.empty() && std::find(r.ops.begin(), r.ops.end(), n.kind) == r.ops.end()) return false;
  if (!r.names.empty() &&
      std::none_of(r.names.begin(), r.names.end(), [&](const std::string& glob) {
        return fnmatch(glob.c_str(), n.name.c_str(), 0) == 0;
      }))
    return false;
  if (r.selects_layers())
    return layer > 0 && (layer <= r.first_layers || layer > layers - r.last_layers);
  return true;
}

std::string layers_text(int n) { return std::to_string(n) + (n == 1 ? " layer" : " layers"); }

}  // namespace

const char* policy_format_names() {
  return "f32, bf16, f16, or a GEMM operand format: fp8, fp8_e4m3, fp8_e5m2, mxfp8, mxfp8_e5m2, "
         "mxfp6_e2m3, mxfp6_e3m2 or mxfp4";
}

std::string PrecisionRule::format_text() const {
  if (!gemm.enabled) return dtype_name(format);
  std::string s = gemm.format + " (" + element_format_name(forward_element);
  if (gradient_element != forward_element)
    s += std::string("/") + element_format_name(gradient_element);
  s += ", " + gemm.recipe.describe();
  if (gemm.rounding == Rounding::stochastic) s += ", stochastic";
  return s + ")";
}

std::string PrecisionRule::describe() const {
  std::string s;
  auto part = [&](const std::string& p) { s += (s.empty() ? "" : ", ") + p; };
  if (!ops.empty()) {
    std::string names;
    for (OpKind op : ops) names += (names.empty() ? "" : ",") + std::string(op_name(op));
    part("op " + names);
  }
  if (!this->names.empty()) {
    std::string globs;
    for (const std::string& g : this->names) globs += (globs.empty() ? "" : ",") + g;
    part("name " + globs);
  }
  if (first_layers > 0 && last_layers > 0)
    part("first " + std::to_string(first_layers) + " and last " + std::to_string(last_layers) +
         " layers");
  else if (first_layers > 0)
    part("first " + layers_text(first_layers));
  else if (last_layers > 0)
    part("last " + layers_text(last_layers));
  return s + " -> " + format_text();
}

bool PrecisionPolicy::sets(DType t) const {
  return std::any_of(rules.begin(), rules.end(),
                     [&](const PrecisionRule& r) { return !r.gemm.enabled && r.format == t; });
}

bool PrecisionPolicy::sets_gemm_format() const {
  return std::any_of(rules.begin(), rules.end(),
                     [&](const PrecisionRule& r) { return r.gemm.enabled; });
}

namespace {

PrecisionPolicy policy_from_json(const json& j, const std::string& path) {
  const std::string file = std::string(kFileKind) + " " + path;
  CAMPO_CHECK(j.is_object(), file, " must hold a JSON object", kShape);
  PrecisionPolicy p;
  p.path = path;
  bool has_rules = false;
  // The file's recipe first: it is under every rule's.
  RecipeOverrides file_recipe;
  if (j.contains("recipe")) {
    file_recipe = parse_recipe(j["recipe"], file);
    CAMPO_CHECK(file_recipe.scaling != Scaling::mx, file,
                ": the file's \"recipe\" is the default of the per-tensor FP8 formats; scaling "
                "\"mx\" is the MX formats' own (give it, if at all, in an MX rule's \"recipe\")");
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "description") {
      CAMPO_CHECK(value.is_string(), file, ": \"description\" must be a string, got ",
                  shown(value.dump()));
      p.description = value.get<std::string>();
    } else if (key == "rules") {
      CAMPO_CHECK(value.is_array(), file, ": \"rules\" must be an array of rules", kShape);
      for (const json& rule : value)
        p.rules.push_back(parse_rule(rule, int(p.rules.size()) + 1, file, file_recipe));
      has_rules = true;
    } else if (key != "recipe") {
      CAMPO_FAIL(file, ": unknown key \"", shown(key),
                 "\" (a policy file has \"rules\", \"recipe\" and \"description\")");
    }
  }
  CAMPO_CHECK(!j.contains("recipe") || std::any_of(p.rules.begin(), p.rules.end(),
                                                   [](const PrecisionRule& r) {
                                                     return r.gemm.enabled && !r.gemm.blocks;
                                                   }),
              file,
              ": the file's \"recipe\" is the default of the per-tensor FP8 formats (fp8, "
              "fp8_e4m3, fp8_e5m2), and no rule sets one (an MX rule takes its own \"recipe\")");
  CAMPO_CHECK(has_rules && !p.rules.empty(), file, " holds no rule", kShape);
  return p;
}

}  // namespace

PrecisionPolicy read_precision_policy(const std::string& path) {
  return policy_from_json(read_json_file(path, kFileKind), path);
}

PrecisionPolicy parse_precision_policy(const std::string& text, const std::string& path) {
  return policy_from_json(parse_json_text(text, std::string(kFileKind) + " " + path), path);
}

ModelLayers model_layers(const Graph& g) {
  ModelLayers l;
  l.layer_of.assign(size_t(g.num_nodes()), 0);
  auto reads_trained_weight = [&](const Node& n) {
    return std::any_of(n.inputs.begin(), n.inputs.end(), [&](ValueId v) {
      return g.node(g.value(v).producer).kind == OpKind::Variable && optimizer_update_of(g, v) >= 0;
    });
  };
  // Forward nodes in id order, the order the model builds them (each after its inputs).
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (n.phase != Phase::forward) continue;
    int layer = 0;
    for (ValueId v : n.inputs) layer = std::max(layer, l.layer_of[size_t(g.value(v).producer)]);
    if (is_gemm_layer_op(n.kind) && reads_trained_weight(n)) {
      l.gemms.push_back(id);
      layer = l.count();
    }
    l.layer_of[size_t(id)] = layer;
  }
  const std::vector<NodeId> source = gradient_sources(g);
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (source[size_t(id)] >= 0) l.layer_of[size_t(id)] = l.layer_of[size_t(source[size_t(id)])];
  // Leaves, casts and updates belong to no layer.
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (!rule_may_set(g.node(id))) l.layer_of[size_t(id)] = 0;
  return l;
}

bool rule_may_set(const Node& n) {
  return n.kind != OpKind::Variable && n.kind != OpKind::Placeholder &&
         AmpLists::may_be_listed(n.kind);
}

bool PolicyAssignment::any() const {
  return std::any_of(rule.begin(), rule.end(), [](int r) { return r > 0; });
}

PolicyAssignment resolve_precision_policy(const Graph& g, const PrecisionPolicy& policy) {
  const ModelLayers layers = model_layers(g);
  const int n = g.num_nodes();
  PolicyAssignment a;
  a.rule.assign(size_t(n), 0);
  a.dtype.assign(size_t(n), DType::f32);
  a.quant.assign(size_t(n), GemmQuant{});
  a.nodes_set.assign(policy.rules.size(), 0);
  a.layers = layers.count();
  const std::string file = std::string(kFileKind) + " " + policy.path;
  for (const PrecisionRule& r : policy.rules) {
    const std::string where =
        file + ", rule " + std::to_string(r.index) + " (" + r.describe() + ")";
    for (const auto& [end, count] : {std::pair{"first", r.first_layers}, {"last", r.last_layers}})
      CAMPO_CHECK(count <= layers.count(), where, ": \"layers\": {\"", end, "\": ", count,
                  "} goes beyond the model's ", layers_text(layers.count()),
                  " (its convolutions and MatMuls with trained weights)");
    for (const std::string& glob : r.names) {
      bool matched = false;
      for (NodeId id = 0; id < n && !matched; ++id)
        matched =
            rule_may_set(g.node(id)) && fnmatch(glob.c_str(), g.node(id).name.c_str(), 0) == 0;
      CAMPO_CHECK(matched, where, ": the glob \"", shown(glob),
                  "\" matches no node of the model's training graph (campo plan --precision fp32 "
                  "lists their names)");
    }
    int selected = 0;
    for (NodeId id = 0; id < n; ++id) {
      const Node& node = g.node(id);
      if (!rule_may_set(node) || !selects(r, node, layers.layer_of[size_t(id)], layers.count()))
        continue;
      // A GEMM operand format sets the GEMMs among the nodes it selects; the others keep theirs.
      if (r.gemm.enabled && !is_quantizable_gemm(node.kind)) continue;
      ++selected;
      a.rule[size_t(id)] = r.index;
      a.dtype[size_t(id)] = r.format;
      a.quant[size_t(id)] = {};
      if (!r.gemm.enabled) continue;
      set_operand_elements(g, node, r.forward_element, r.gradient_element,
                           a.quant[size_t(id)] = r.gemm);
    }
    CAMPO_CHECK(selected > 0, where, " selects no ",
                r.gemm.enabled ? "GEMM (MatMul, BatchMatMulV2, Conv2D or its backprops)" : "node",
                " of the model's training graph",
                r.names.empty() && !r.selects_layers() ? " (the model has none of these ops)"
                                                       : " (its selectors match no node together)");
  }
  for (int r : a.rule)
    if (r > 0) ++a.nodes_set[size_t(r - 1)];
  return a;
}

void set_operand_elements(const Graph& g, const Node& node, ElementFormat forward,
                          ElementFormat gradient, GemmQuant& q) {
  // An operand made by the backward pass is a gradient (dY of the data and weight gradients);
  // activations and weights are forward values.
  for (size_t i = 0; i < 2; ++i)
    q.element[i] =
        g.node(g.value(node.inputs[i]).producer).phase == Phase::backward ? gradient : forward;
}

}  // namespace campo
