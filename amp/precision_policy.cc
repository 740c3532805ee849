#include "amp/precision_policy.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <nlohmann/json.hpp>

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

DType parse_format(const json& value, const std::string& where) {
  CAMPO_CHECK(value.is_string(), where, ": \"format\" must be a string (", policy_format_names(),
              "), got ", shown(value.dump()));
  const std::string name = value.get<std::string>();
  const std::string future = future_format(name);
  CAMPO_CHECK(future.empty(), where, ": format \"", name, "\" (", future,
              ") cannot run yet: campo converts it bit-exactly (docs/formats.md) but has no "
              "kernels that compute in it; a rule may set ",
              policy_format_names());
  DType t = DType::i32;
  try {
    t = parse_dtype(name);
  } catch (const Error&) {
  }
  CAMPO_CHECK(is_floating(t), where, ": unknown format \"", shown(name), "\" (expected ",
              policy_format_names(), ")");
  return t;
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

PrecisionRule parse_rule(const json& j, int index, const std::string& file) {
  PrecisionRule r;
  r.index = index;
  const std::string where = file + ", rule " + std::to_string(index);
  CAMPO_CHECK(j.is_object(), where, " must be an object, got ", shown(j.dump()), kShape);
  bool has_format = false;
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
      r.format = parse_format(value, where);
      has_format = true;
    } else if (key == "note") {
      CAMPO_CHECK(value.is_string(), where, ": \"note\" must be a string, got ",
                  shown(value.dump()));
      r.note = value.get<std::string>();
    } else {
      CAMPO_FAIL(where, ": unknown key \"", shown(key),
                 "\" (a rule has \"op\", \"name\", \"layers\", \"format\" and \"note\")");
    }
  }
  CAMPO_CHECK(!r.ops.empty() || !r.names.empty() || r.selects_layers(), where,
              " selects nothing: give \"op\", \"name\" and/or \"layers\" (\"name\": \"*\" "
              "selects every node)");
  CAMPO_CHECK(has_format, where, " sets no \"format\" (", policy_format_names(), ")");
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

const char* policy_format_names() { return "f32, bf16 or f16"; }

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
  return s + " -> " + dtype_name(format);
}

bool PrecisionPolicy::sets(DType t) const {
  return std::any_of(rules.begin(), rules.end(),
                     [&](const PrecisionRule& r) { return r.format == t; });
}

namespace {

PrecisionPolicy policy_from_json(const json& j, const std::string& path) {
  const std::string file = std::string(kFileKind) + " " + path;
  CAMPO_CHECK(j.is_object(), file, " must hold a JSON object", kShape);
  PrecisionPolicy p;
  p.path = path;
  bool has_rules = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "description") {
      CAMPO_CHECK(value.is_string(), file, ": \"description\" must be a string, got ",
                  shown(value.dump()));
      p.description = value.get<std::string>();
    } else if (key == "rules") {
      CAMPO_CHECK(value.is_array(), file, ": \"rules\" must be an array of rules", kShape);
      for (const json& rule : value)
        p.rules.push_back(parse_rule(rule, int(p.rules.size()) + 1, file));
      has_rules = true;
    } else {
      CAMPO_FAIL(file, ": unknown key \"", shown(key),
                 "\" (a policy file has \"rules\" and \"description\")");
    }
  }
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
      ++selected;
      a.rule[size_t(id)] = r.index;
      a.dtype[size_t(id)] = r.format;
    }
    CAMPO_CHECK(selected > 0, where, " selects no node of the model's training graph",
                r.names.empty() && !r.selects_layers() ? " (the model has none of these ops)"
                                                       : " (its selectors match no node together)");
  }
  for (int r : a.rule)
    if (r > 0) ++a.nodes_set[size_t(r - 1)];
  return a;
}

}  // namespace campo
