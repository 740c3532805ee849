#include "graph/graph.h"

#include <algorithm>
#include <array>
#include <queue>
#include <sstream>

namespace campo {

std::string Graph::unique_name(const std::string& base) {
  if (!names_.count(base)) return base;
  for (int i = 1;; ++i) {
    std::string candidate = base + "." + std::to_string(i);
    if (!names_.count(candidate)) return candidate;
  }
}

NodeId Graph::add_node(OpKind kind, std::vector<ValueId> inputs, Attrs attrs, std::string name,
                       DType dtype, Phase phase) {
  const OpSchema& schema = op_schema(kind);
  if (schema.num_inputs >= 0)
    CAMPO_CHECK(int(inputs.size()) == schema.num_inputs, op_name(kind), " '", name, "' takes ",
                schema.num_inputs, " inputs, got ", inputs.size());
  for (ValueId v : inputs)
    CAMPO_CHECK(v >= 0 && v < num_values(), op_name(kind), " '", name, "': input value ", v,
                " does not exist");
  NodeId id = NodeId(nodes_.size());
  Node n;
  n.kind = kind;
  n.name = unique_name(name.empty() ? std::string(op_name(kind)) : name);
  n.attrs = std::move(attrs);
  n.inputs = std::move(inputs);
  n.dtype = dtype;
  n.phase = phase;
  std::vector<TensorDesc> outs = schema.infer(*this, n);
  for (size_t i = 0; i < outs.size(); ++i) {
    values_.push_back(Value{outs[i].shape, outs[i].dtype, id, int(i)});
    n.outputs.push_back(ValueId(values_.size() - 1));
  }
  names_[n.name] = id;
  nodes_.push_back(std::move(n));
  return id;
}

void Graph::reinfer(NodeId id) {
  Node& n = nodes_.at(size_t(id));
  std::vector<TensorDesc> outs = op_schema(n.kind).infer(*this, n);
  CAMPO_CHECK(outs.size() == n.outputs.size(), "internal: reinfer changed output count");
  if (n.f32_output) {
    CAMPO_CHECK(op_schema(n.kind).can_write_f32_output, "internal: ", op_name(n.kind),
                " cannot write an f32 output from ", dtype_name(n.dtype));
    outs[0].dtype = DType::f32;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    values_[size_t(n.outputs[i])].shape = outs[i].shape;
    values_[size_t(n.outputs[i])].dtype = outs[i].dtype;
  }
}

void Graph::set_input(NodeId consumer, int slot, ValueId v) {
  nodes_.at(size_t(consumer)).inputs.at(size_t(slot)) = v;
}

std::vector<NodeId> Graph::consumers(ValueId v) const {
  std::vector<NodeId> out;
  for (const Node& n : nodes_) {
    NodeId id = NodeId(&n - nodes_.data());
    if (std::find(n.inputs.begin(), n.inputs.end(), v) != n.inputs.end()) out.push_back(id);
  }
  return out;
}

NodeId Graph::find_node(const std::string& name) const {
  auto it = names_.find(name);
  return it == names_.end() ? -1 : it->second;
}

std::vector<NodeId> Graph::nodes_of_kind(OpKind kind) const {
  std::vector<NodeId> out;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].kind == kind) out.push_back(NodeId(i));
  return out;
}

std::vector<NodeId> Graph::topological_order() const {
  // Kahn's algorithm with a min-heap on a priority key: a node's key is its own id,
  // except for nodes whose id is larger than a consumer's (inserted later), which take
  // the smallest consumer id so they run right before it.
  const int n = num_nodes();
  std::vector<int> indegree(size_t(n), 0);
  std::vector<std::vector<NodeId>> users(static_cast<size_t>(n));
  std::vector<double> key(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) key[size_t(i)] = i;
  for (int i = 0; i < n; ++i) {
    for (ValueId v : nodes_[size_t(i)].inputs) {
      NodeId p = values_[size_t(v)].producer;
      users[size_t(p)].push_back(i);
      ++indegree[size_t(i)];
    }
  }
  // Late nodes: key just below their first consumer (propagated to chains of late nodes).
  for (int i = n - 1; i >= 0; --i) {
    for (NodeId u : users[size_t(i)])
      if (key[size_t(u)] < key[size_t(i)]) key[size_t(i)] = key[size_t(u)] - 1e-3;
  }
  // Eager nodes run as soon as their inputs exist: AllReduceStart (a gradient bucket's
  // reduction then overlaps the rest of the backward pass) and the nodes (casts) that only
  // they read.
  std::vector<char> eager(size_t(n), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = n - 1; i >= 0; --i) {
      if (eager[size_t(i)]) continue;
      bool e = nodes_[size_t(i)].kind == OpKind::AllReduceStart;
      if (!e && nodes_[size_t(i)].kind == OpKind::Cast && !users[size_t(i)].empty()) {
        e = true;
        for (NodeId u : users[size_t(i)]) e = e && eager[size_t(u)];
      }
      if (e) eager[size_t(i)] = 1, changed = true;
    }
  }
  for (int i = 0; i < n; ++i)
    if (eager[size_t(i)]) key[size_t(i)] = -double(n) + i;
  using Item = std::pair<double, NodeId>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (int i = 0; i < n; ++i)
    if (indegree[size_t(i)] == 0) ready.push({key[size_t(i)], i});
  std::vector<NodeId> order;
  order.reserve(size_t(n));
  while (!ready.empty()) {
    NodeId id = ready.top().second;
    ready.pop();
    order.push_back(id);
    for (NodeId u : users[size_t(id)])
      if (--indegree[size_t(u)] == 0) ready.push({key[size_t(u)], u});
  }
  CAMPO_CHECK(int(order.size()) == n, "internal: the graph has a cycle");
  return order;
}

static std::string attrs_summary(const Node& n) {
  std::ostringstream os;
  std::visit(
      [&](const auto& a) {
        using T = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<T, ConvAttrs>) {
          os << " stride=" << a.stride_h << "x" << a.stride_w << " pad=" << a.pad_h << "x"
             << a.pad_w;
          if (a.dilation_h != 1 || a.dilation_w != 1)
            os << " dilation=" << a.dilation_h << "x" << a.dilation_w;
          if (a.groups != 1) os << " groups=" << a.groups;
        } else if constexpr (std::is_same_v<T, MatMulAttrs>) {
          if (a.transpose_a) os << " transpose_a";
          if (a.transpose_b) os << " transpose_b";
        } else if constexpr (std::is_same_v<T, PoolAttrs>) {
          os << " kernel=" << a.kernel_h << "x" << a.kernel_w << " stride=" << a.stride_h << "x"
             << a.stride_w << " pad=" << a.pad_h << "x" << a.pad_w;
          if (a.count_include_pad) os << " count_include_pad";
        } else if constexpr (std::is_same_v<T, BatchMatMulAttrs>) {
          if (a.adj_x) os << " adj_x";
          if (a.adj_y) os << " adj_y";
        } else if constexpr (std::is_same_v<T, TransposeAttrs>) {
          os << " perm=" << shape_str(Shape(a.perm.begin(), a.perm.end()));
        } else if constexpr (std::is_same_v<T, ConcatAttrs>) {
          os << " axis=" << a.axis;
        } else if constexpr (std::is_same_v<T, SplitAttrs>) {
          os << " axis=" << a.axis << " sizes=" << shape_str(a.size_splits);
        } else if constexpr (std::is_same_v<T, CastAttrs>) {
          os << " to=" << dtype_name(a.to);
        } else if constexpr (std::is_same_v<T, DropoutAttrs>) {
          if (a.slice_rates.empty()) {
            os << " rate=" << a.rate;
          } else {
            os << " slice_rates=[";
            for (size_t i = 0; i < a.slice_rates.size(); ++i)
              os << (i ? ", " : "") << a.slice_rates[i];
            os << "]";
          }
        } else if constexpr (std::is_same_v<T, BatchNormAttrs>) {
          os << (a.is_training ? " training" : " inference");
        } else if constexpr (std::is_same_v<T, ConstAttrs>) {
          os << " value=" << a.value;
        } else if constexpr (std::is_same_v<T, GeluAttrs>) {
          if (a.approximate) os << " approximate=tanh";
        } else if constexpr (std::is_same_v<T, LayerNormAttrs>) {
          os << " epsilon=" << a.epsilon;
        } else if constexpr (std::is_same_v<T, GatherAttrs>) {
          os << " axis=" << a.axis;
        } else if constexpr (std::is_same_v<T, UnsortedSegmentSumAttrs>) {
          os << " num_segments=" << a.num_segments;
        } else if constexpr (std::is_same_v<T, SparseSoftmaxCrossEntropyAttrs>) {
          if (a.ignore_label) os << " ignore_label=" << *a.ignore_label;
        } else if constexpr (std::is_same_v<T, AllReduceAttrs>) {
          if (a.scale != 1.0f) os << " scale=" << a.scale;
        }
      },
      n.attrs);
  return os.str();
}

std::string Graph::to_text() const {
  std::ostringstream os;
  for (NodeId id : topological_order()) {
    const Node& n = nodes_[size_t(id)];
    os << "%" << id << " " << n.name << " = " << op_name(n.kind) << "<" << dtype_name(n.dtype)
       << ">(";
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << "v" << n.inputs[i];
    os << ")" << attrs_summary(n);
    if (n.pad_to > 0) os << " pad" << n.pad_to;
    os << " ->";
    for (ValueId v : n.outputs)
      os << " v" << v << ":" << dtype_name(values_[size_t(v)].dtype)
         << shape_str(values_[size_t(v)].shape);
    os << "\n";
  }
  return os.str();
}

std::string Graph::to_dot() const {
  std::ostringstream os;
  os << "digraph campo {\n  rankdir=TB;\n  node [shape=box, style=filled, fontname=Helvetica];\n";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const char* color = n.dtype == DType::f16    ? "#f4a261"
                        : n.dtype == DType::bf16 ? "#e9c46a"
                        : n.kind == OpKind::Cast ? "#e76f51"
                                                 : "#a8dadc";
    if (n.kind == OpKind::Cast) color = "#e76f51";
    os << "  n" << i << " [label=\"" << n.name << "\\n"
       << op_name(n.kind) << " " << dtype_name(n.dtype) << "\", fillcolor=\"" << color << "\"];\n";
  }
  for (size_t i = 0; i < nodes_.size(); ++i)
    for (ValueId v : nodes_[i].inputs)
      os << "  n" << values_[size_t(v)].producer << " -> n" << i << " [label=\""
         << shape_str(values_[size_t(v)].shape) << "\"];\n";
  os << "}\n";
  return os.str();
}

std::vector<char> live_nodes(const Graph& g, const std::vector<ValueId>& fetches) {
  std::vector<char> live(size_t(g.num_nodes()), 0);
  std::vector<NodeId> stack;
  for (ValueId v : fetches) {
    CAMPO_CHECK(v >= 0 && v < g.num_values(), "fetch of unknown value ", v);
    stack.push_back(g.value(v).producer);
  }
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    if (op_schema(g.node(id).kind).has_side_effects) stack.push_back(id);
  while (!stack.empty()) {
    const NodeId id = stack.back();
    stack.pop_back();
    if (live[size_t(id)]) continue;
    live[size_t(id)] = 1;
    for (ValueId v : g.node(id).inputs) stack.push_back(g.value(v).producer);
  }
  return live;
}

}  // namespace campo
