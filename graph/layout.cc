#include "graph/layout.h"

#include <map>

#include "ops/kernel.h"

namespace campo {

const char* conv_layout_name(ConvLayout layout) {
  return layout == ConvLayout::blocked ? "blocked" : "plain";
}

ConvLayout parse_conv_layout(const std::string& name) {
  if (name == "blocked") return ConvLayout::blocked;
  if (name == "plain") return ConvLayout::plain;
  CAMPO_FAIL("--conv-layout must be blocked or plain, got '", name, "'");
}

Layout blocked_layout_for(ConvLayout mode, Device kernel_device) {
  if (mode == ConvLayout::plain || kernel_device != Device::cpu) return Layout::plain;
  return cpu_blocked_layout();
}

int LayoutAssignment::num_blocked_values() const {
  int n = 0;
  for (Layout l : value_layout) n += l != Layout::plain;
  return n;
}

namespace {

// How a node's kernel treats layouts (graph/layout.h): `data_inputs` / `data_outputs` are
// the operands that may be blocked. A producer reads its data inputs in whichever layout
// they have (BiasAddGrad too, which writes none).
enum class Role : uint8_t { plain, producer, follower };
struct NodeRole {
  Role role = Role::plain;
  std::vector<int> data_inputs, data_outputs;
};

bool is_flat_elementwise(OpKind kind) {
  switch (kind) {
    case OpKind::Relu:
    case OpKind::ReluGrad:
    case OpKind::LeakyRelu:
    case OpKind::LeakyReluGrad:
    case OpKind::Tanh:
    case OpKind::TanhGrad:
    case OpKind::Sigmoid:
    case OpKind::SigmoidGrad:
    case OpKind::Gelu:
    case OpKind::GeluGrad:
    case OpKind::Add:
    case OpKind::AddN:
    case OpKind::Mul:
    case OpKind::Cast:
      return true;
    default:
      return false;
  }
}

NodeRole layout_role(const Graph& g, const Node& n) {
  if (n.quant.enabled) return {};  // quantized GEMMs read and write plain data
  switch (n.kind) {
    case OpKind::Conv2D:
    case OpKind::Conv2DBackpropInput:
    case OpKind::Conv2DBackpropFilter: {
      const ValueId filter = n.kind == OpKind::Conv2DBackpropFilter ? n.outputs[0] : n.inputs[1];
      if (runs_per_group(attrs_as<ConvAttrs>(n.attrs), g.value(filter).shape)) return {};
      break;
    }
    default:
      break;
  }
  switch (n.kind) {
    case OpKind::Conv2D:               // {x, w} -> y
    case OpKind::Conv2DBackpropInput:  // {dy, w} -> dx
      return {Role::producer, {0}, {0}};
    case OpKind::Conv2DBackpropFilter:  // {x, dy} -> dw (a weight gradient: plain)
      return {Role::producer, {0, 1}, {}};
    case OpKind::BiasAddGrad:  // {dy} -> dbias
      return {Role::producer, {0}, {}};
    case OpKind::BiasAdd:  // {x, bias} -> y
      return {Role::follower, {0}, {0}};
    case OpKind::FusedBatchNorm:  // {x, scale, offset, mean, var} -> {y, mean, inv_std}
      return {Role::follower, {0}, {0}};
    case OpKind::FusedBatchNormGrad:  // {dy, x, scale, mean, inv_std} -> {dx, dscale, doffset}
      return {Role::follower, {0, 1}, {0}};
    default:
      break;
  }
  if (!is_flat_elementwise(n.kind) || n.outputs.size() != 1) return {};
  const Shape& shape = g.value(n.outputs[0]).shape;
  NodeRole r{Role::follower, {}, {0}};
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (g.value(n.inputs[i]).shape != shape) return {};
    r.data_inputs.push_back(int(i));
  }
  return r;
}

}  // namespace

LayoutAssignment assign_layouts(const Graph& graph, const std::vector<NodeId>& schedule,
                                const std::vector<ValueId>& fetches, Layout blocked_layout) {
  LayoutAssignment a;
  a.value_layout.assign(size_t(graph.num_values()), Layout::plain);
  a.input_layout.resize(schedule.size());
  a.input_conversion.resize(schedule.size());
  for (size_t pos = 0; pos < schedule.size(); ++pos) {
    const size_t n_in = graph.node(schedule[pos]).inputs.size();
    a.input_layout[pos].assign(n_in, Layout::plain);
    a.input_conversion[pos].assign(n_in, -1);
  }
  const int cblock = channel_block(blocked_layout);
  if (cblock == 0) return a;

  std::vector<char> fetched(size_t(graph.num_values()), 0);
  for (ValueId v : fetches) fetched[size_t(v)] = 1;
  auto may_block = [&](ValueId v) {
    const Value& val = graph.value(v);
    const Node& producer = graph.node(val.producer);
    return val.shape.size() == 4 && is_floating(val.dtype) && val.shape[1] % cblock == 0 &&
           shape_numel(val.shape) > 0 && !fetched[size_t(v)] && !producer.weight_copy &&
           producer.kind != OpKind::Variable && producer.kind != OpKind::Placeholder;
  };

  // 1. Each node's layout, in schedule order.
  std::vector<NodeRole> roles(schedule.size());
  for (size_t pos = 0; pos < schedule.size(); ++pos) {
    const Node& n = graph.node(schedule[pos]);
    const NodeRole& r = roles[pos] = layout_role(graph, n);
    std::vector<Layout>& reads = a.input_layout[pos];
    if (r.role == Role::producer) {
      for (int i : r.data_inputs) reads[size_t(i)] = a.value_layout[size_t(n.inputs[size_t(i)])];
      for (int o : r.data_outputs)
        if (may_block(n.outputs[size_t(o)]))
          a.value_layout[size_t(n.outputs[size_t(o)])] = blocked_layout;
    } else if (r.role == Role::follower) {
      int blocked = 0;
      for (int i : r.data_inputs)
        blocked += a.value_layout[size_t(n.inputs[size_t(i)])] == blocked_layout;
      bool block = blocked > 0 && 2 * blocked >= int(r.data_inputs.size());
      for (int o : r.data_outputs) block = block && may_block(n.outputs[size_t(o)]);
      const Layout l = block ? blocked_layout : Layout::plain;
      for (int i : r.data_inputs) reads[size_t(i)] = l;
      for (int o : r.data_outputs) a.value_layout[size_t(n.outputs[size_t(o)])] = l;
    }
  }

  // 2. A producer's blocked output read only as plain is written plain.
  std::vector<char> read_blocked(size_t(graph.num_values()), 0);
  for (size_t pos = 0; pos < schedule.size(); ++pos) {
    const Node& n = graph.node(schedule[pos]);
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (a.input_layout[pos][i] == blocked_layout) read_blocked[size_t(n.inputs[i])] = 1;
  }
  for (size_t pos = 0; pos < schedule.size(); ++pos) {
    if (roles[pos].role != Role::producer) continue;
    const Node& n = graph.node(schedule[pos]);
    for (int o : roles[pos].data_outputs) {
      const ValueId v = n.outputs[size_t(o)];
      if (!read_blocked[size_t(v)]) a.value_layout[size_t(v)] = Layout::plain;
    }
  }

  // 3. Conversions where a reader's layout differs from the value's.
  std::map<std::pair<ValueId, Layout>, int> index;
  for (size_t pos = 0; pos < schedule.size(); ++pos) {
    const Node& n = graph.node(schedule[pos]);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const ValueId v = n.inputs[i];
      const Layout want = a.input_layout[pos][i];
      if (want == a.value_layout[size_t(v)]) continue;
      auto [it, inserted] = index.insert({{v, want}, int(a.conversions.size())});
      if (inserted) a.conversions.push_back({v, want, {}});
      std::vector<int>& readers = a.conversions[size_t(it->second)].readers;
      if (readers.empty() || readers.back() != int(pos)) readers.push_back(int(pos));
      a.input_conversion[pos][i] = it->second;
    }
  }
  return a;
}

}  // namespace campo
