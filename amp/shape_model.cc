#include "amp/shape_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/check.h"

namespace campo {

const char* shape_family_name(ShapeFamily f) {
  switch (f) {
    case ShapeFamily::gemm:
      return "gemm";
    case ShapeFamily::conv:
      return "conv";
    case ShapeFamily::other:
      break;
  }
  return "other";
}

ShapeFamily shape_family_of(OpKind kind) {
  switch (kind) {
    case OpKind::MatMul:
    case OpKind::BatchMatMulV2:
      return ShapeFamily::gemm;
    case OpKind::Conv2D:
    case OpKind::Conv2DBackpropInput:
    case OpKind::Conv2DBackpropFilter:
      return ShapeFamily::conv;
    default:
      return ShapeFamily::other;
  }
}

namespace {

double numel(const Shape& s) {
  double n = 1;  // in double: a recorded profile's dimensions may overflow int64's product
  for (int64_t d : s) n *= double(d);
  return n;
}

// x and w and y of a conv-family node: {x, w} -> y, {dy, w} -> dx, {x, dy} -> dw.
bool conv_operands(OpKind kind, const std::vector<Shape>& in, const std::vector<Shape>& out,
                   Shape& x, Shape& w, Shape& y) {
  if (in.size() < 2 || out.empty()) return false;
  if (kind == OpKind::Conv2D) {
    x = in[0], w = in[1], y = out[0];
  } else if (kind == OpKind::Conv2DBackpropInput) {
    y = in[0], w = in[1], x = out[0];
  } else {
    x = in[0], y = in[1], w = out[0];
  }
  return x.size() == 4 && w.size() == 4 && y.size() == 4;
}

}  // namespace

NodeShape node_shape(OpKind kind, const std::vector<Shape>& inputs,
                     const std::vector<Shape>& outputs) {
  NodeShape s;
  s.family = shape_family_of(kind);
  if (s.family == ShapeFamily::conv) {
    Shape x, w, y;
    if (!conv_operands(kind, inputs, outputs, x, w, y) || w[1] <= 0 || y[2] <= 0) {
      s.family = ShapeFamily::other;  // not a 2-D convolution's operands: described as data
    } else {
      s.dims = {double(x[0]),
                double(x[1]),
                double(w[0]),
                double(y[2] * y[3]),
                double(w[2] * w[3]),
                std::max(1.0, std::round(double(x[2]) / double(y[2]))),
                std::max(1.0, std::round(double(x[1]) / double(w[1])))};
      return s;
    }
  }
  if (s.family == ShapeFamily::gemm) {
    // z [..., M, N] from x [..., M, K] (or its transpose): K is the dim of x that is not M.
    if (inputs.size() >= 2 && !outputs.empty() && outputs[0].size() >= 2 &&
        inputs[0].size() == outputs[0].size()) {
      const Shape& x = inputs[0];
      const Shape& z = outputs[0];
      const size_t r = z.size();
      const double m = double(z[r - 2]), n = double(z[r - 1]);
      const double k = double(x[r - 2]) == m ? double(x[r - 1]) : double(x[r - 2]);
      s.dims = {std::max(1.0, numel(z) / std::max(1.0, m * n)), m, n, k};
      return s;
    }
    s.family = ShapeFamily::other;
  }
  const Shape* largest = nullptr;
  for (const std::vector<Shape>* set : {&inputs, &outputs})
    for (const Shape& v : *set)
      if (!largest || numel(v) > numel(*largest)) largest = &v;
  if (!largest) return s;
  const double elements = std::max(1.0, numel(*largest));
  const double channels =
      largest->size() == 4 || largest->size() == 2 ? double((*largest)[1]) : elements;
  double window = 1;
  const bool pool = kind == OpKind::MaxPool || kind == OpKind::AvgPool ||
                    kind == OpKind::MaxPoolGrad || kind == OpKind::AvgPoolGrad;
  if (pool && !inputs.empty() && !outputs.empty() && inputs[0].size() == 4 &&
      outputs[0].size() == 4) {
    // Forward: x -> y; gradients read the forward's input as well: the larger map over the
    // smaller one, its area. (Overlapping windows read as their stride's area.)
    const double a = numel(inputs[0]), b = numel(outputs[0]);
    window = std::max(1.0, std::round(std::max(a, b) / std::max(1.0, std::min(a, b))));
  }
  s.dims = {elements, std::max(1.0, channels), window};
  return s;
}

NodeShape node_shape(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::vector<Shape> in, out;
  for (ValueId v : n.inputs) in.push_back(g.value(v).shape);
  for (ValueId v : n.outputs) out.push_back(g.value(v).shape);
  return node_shape(n.kind, in, out);
}

namespace {

const std::vector<std::string>& dim_names(ShapeFamily f) {
  static const std::vector<std::string> gemm = {"batch", "M", "N", "K"};
  static const std::vector<std::string> conv = {"N", "C", "K", "map", "window", "stride", "groups"};
  static const std::vector<std::string> other = {"elements", "channels", "window"};
  return f == ShapeFamily::gemm ? gemm : f == ShapeFamily::conv ? conv : other;
}

// Useful over padded work of a dimension x in blocks of b: x / (b * ceil(x / b)).
double utilisation(double x, double b) { return x / (b * std::ceil(x / b)); }

}  // namespace

std::string describe_shape(const NodeShape& s) {
  std::string text = shape_family_name(s.family);
  const std::vector<std::string>& names = dim_names(s.family);
  for (size_t i = 0; i < names.size(); ++i) {
    char d[48];
    std::snprintf(d, sizeof d, " %s=%g", names[i].c_str(), s.dims[i]);
    text += d;
  }
  return text;
}

const std::vector<std::string>& shape_term_names(ShapeFamily f) {
  static const std::vector<std::string> gemm = {
      "1",         "ln fp32_ms", "ln batch",  "ln M",      "ln N",      "ln K",
      "ln u16(M)", "ln u16(N)",  "ln u16(K)", "ln u64(M)", "ln u64(N)", "ln u64(K)"};
  static const std::vector<std::string> conv = {
      "1",         "ln fp32_ms", "ln N",      "ln C",      "ln K",      "ln map",   "ln window",
      "ln stride", "ln groups",  "ln u16(C)", "ln u16(K)", "ln u64(C)", "ln u64(K)"};
  static const std::vector<std::string> other = {
      "1",         "ln fp32_ms",       "ln elements",     "ln channels",
      "ln window", "ln u16(channels)", "ln u64(channels)"};
  return f == ShapeFamily::gemm ? gemm : f == ShapeFamily::conv ? conv : other;
}

std::vector<double> shape_terms(const NodeShape& s, double fp32_ms) {
  CAMPO_CHECK(s.known() && fp32_ms > 0, "internal: shape terms of an unknown shape or time");
  auto ln = [](double v) { return std::log(std::max(v, 1e-300)); };
  // The dimensions whose block utilisation is a term: a GEMM's M, N and K; a convolution's
  // channels in and out; another op's channels.
  static const std::vector<size_t> gemm = {1, 2, 3}, conv = {1, 2}, other = {1};
  const std::vector<size_t>& blocked = s.family == ShapeFamily::gemm   ? gemm
                                       : s.family == ShapeFamily::conv ? conv
                                                                       : other;
  std::vector<double> t = {1.0, ln(fp32_ms)};
  for (size_t i = 0; i < dim_names(s.family).size(); ++i) t.push_back(ln(s.dims[i]));
  for (double block : {16.0, 64.0})
    for (size_t i : blocked) t.push_back(ln(utilisation(s.dims[i], block)));
  return t;
}

std::vector<double> shape_coordinates(const NodeShape& s) {
  std::vector<double> c;
  for (size_t i = 0; i < dim_names(s.family).size(); ++i)
    c.push_back(std::log2(std::max(s.dims[i], 1.0)));
  // The batch of a convolution or a batched GEMM counts a quarter: the same layer at another
  // batch size is nearer than another layer at this one (efficiency changes slowly with the
  // batch, fast with channels and map).
  constexpr double kBatchScale = 0.25;
  if (s.family != ShapeFamily::other) c[0] *= kBatchScale;
  return c;
}

double shape_work(const NodeShape& s) {
  const auto& d = s.dims;
  switch (s.family) {
    case ShapeFamily::gemm:
      return 2 * d[0] * d[1] * d[2] * d[3];
    case ShapeFamily::conv:
      return 2 * d[0] * d[2] * d[3] * (d[1] / std::max(1.0, d[6])) * d[4];
    case ShapeFamily::other:
      break;
  }
  return d[0];
}

double ShapeModel::low_ms(const NodeShape& s, double fp32_ms) const {
  CAMPO_CHECK(s.family == family, "internal: a ", shape_family_name(family),
              " shape model asked for a ", shape_family_name(s.family), " shape");
  double r = 0;
  if (form == "features") {
    const std::vector<double> t = shape_terms(s, fp32_ms);
    CAMPO_CHECK(t.size() == weights.size(), "internal: shape model with ", weights.size(),
                " weights for ", t.size(), " terms");
    for (size_t j = 0; j < t.size(); ++j) r += weights[j] * t[j];
    // A node is not predicted more than e^6 (~400x) faster or slower than in f32.
    return fp32_ms * std::exp(std::clamp(r, -6.0, 6.0));
  } else {
    CAMPO_CHECK(form == "table" && !points.empty() && points.size() == log_efficiencies.size(),
                "internal: an empty or unknown shape model '", form, "'");
    const std::vector<double> c = shape_coordinates(s);
    std::vector<std::pair<double, size_t>> near;
    for (size_t i = 0; i < points.size(); ++i) {
      CAMPO_CHECK(points[i].size() == c.size(), "internal: shape table point of ", points[i].size(),
                  " coordinates, not ", c.size());
      double d2 = 0;
      for (size_t j = 0; j < c.size(); ++j) d2 += (points[i][j] - c[j]) * (points[i][j] - c[j]);
      near.push_back({std::sqrt(d2), i});
    }
    const size_t k = std::min(near.size(), size_t(kShapeTableNeighbours));
    std::partial_sort(near.begin(), near.begin() + long(k), near.end());
    double sum = 0, weight = 0;
    for (size_t i = 0; i < k; ++i) {
      const double w = 1.0 / (near[i].first + kShapeTableSoftening);
      sum += w * log_efficiencies[near[i].second];
      weight += w;
    }
    r = sum / weight;
  }
  return shape_work(s) / std::exp(r);
}

}  // namespace campo
