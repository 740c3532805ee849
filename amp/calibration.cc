#include "amp/calibration.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <sstream>

#include "runtime/atomic_file.h"
#include "runtime/file_check.h"

namespace campo {

// ---- features ----

const char* feature_name(Feature f) {
  switch (f) {
    case Feature::flops:
      return "flops";
    case Feature::bytes:
      return "bytes";
    case Feature::intensity:
      return "intensity";
    case Feature::elements:
      return "elements";
    case Feature::aligned:
      return "aligned";
    case Feature::dram_bytes:
    case Feature::achieved_occupancy:
    case Feature::tensor_pipe:
    case Feature::l2_hit_rate:
    case Feature::instructions:
      return counter_name(Counter(int(f) - kFirstCounterFeature));
    case Feature::kCount:
      break;
  }
  return "?";
}

Feature parse_feature(const std::string& name) {
  for (int i = 0; i < kNumFeatures; ++i)
    if (name == feature_name(Feature(i))) return Feature(i);
  CAMPO_FAIL("unknown calibration feature '", name, "'");
}

namespace {

const Shape& shape_of(const Graph& g, ValueId v) { return g.value(v).shape; }

// The "y side" [N, K, Ho, Wo] and the filter [K, C/groups, R, S] of a conv-family node.
void conv_operands(const Graph& g, const Node& n, Shape& y_side, Shape& filter) {
  switch (n.kind) {
    case OpKind::Conv2D:  // {x, w} -> y
      y_side = shape_of(g, n.outputs[0]);
      filter = shape_of(g, n.inputs[1]);
      break;
    case OpKind::Conv2DBackpropInput:  // {dy, w} -> dx
      y_side = shape_of(g, n.inputs[0]);
      filter = shape_of(g, n.inputs[1]);
      break;
    default:  // Conv2DBackpropFilter {x, dy} -> dw
      y_side = shape_of(g, n.inputs[1]);
      filter = shape_of(g, n.outputs[0]);
      break;
  }
}

}  // namespace

NodeFeatures node_features(const Graph& g, NodeId id, int alignment,
                           const CounterValues& counters) {
  CAMPO_CHECK(alignment > 0, "node_features: alignment ", alignment, " is not positive");
  auto multiple_of_block = [alignment](int64_t v) { return v > 0 && v % alignment == 0; };
  const Node& n = g.node(id);
  NodeFeatures f{};
  for (int c = 0; c < kNumCounters; ++c) f[size_t(kFirstCounterFeature + c)] = counters[size_t(c)];
  int64_t in_elements = 0, out_elements = 0, bytes = 0;
  for (ValueId v : n.inputs) {
    in_elements = std::max(in_elements, shape_numel(shape_of(g, v)));
    bytes += 4 * shape_numel(shape_of(g, v));
  }
  for (ValueId v : n.outputs) {
    out_elements = std::max(out_elements, shape_numel(shape_of(g, v)));
    bytes += 4 * shape_numel(shape_of(g, v));
  }
  const Shape out0 = n.outputs.empty() ? Shape{} : shape_of(g, n.outputs[0]);
  double flops = double(std::max(in_elements, out_elements));
  bool aligned = false, is_gemm = false;
  switch (n.kind) {
    case OpKind::Conv2D:
    case OpKind::Conv2DBackpropInput:
    case OpKind::Conv2DBackpropFilter: {
      Shape y_side, filter;
      conv_operands(g, n, y_side, filter);
      const int groups = attrs_as<ConvAttrs>(n.attrs).groups;
      const int64_t k = filter[0], c_per_group = filter[1];
      flops = 2.0 * double(shape_numel(y_side)) * double(shape_numel(filter) / k);
      aligned = multiple_of_block(k) && multiple_of_block(c_per_group * groups);
      is_gemm = true;
      break;
    }
    case OpKind::MatMul: {
      const auto& t = attrs_as<MatMulAttrs>(n.attrs);
      const Shape& a = shape_of(g, n.inputs[0]);
      const int64_t m = t.transpose_a ? a[1] : a[0], k = t.transpose_a ? a[0] : a[1];
      const int64_t cols = out0[1];
      flops = 2.0 * double(m) * double(cols) * double(k);
      aligned = multiple_of_block(m) && multiple_of_block(cols) && multiple_of_block(k);
      is_gemm = true;
      break;
    }
    case OpKind::BatchMatMulV2: {  // x [..., M, K] (adj_x: [..., K, M]) -> z [..., M, N]
      const auto& t = attrs_as<BatchMatMulAttrs>(n.attrs);
      const Shape& x = shape_of(g, n.inputs[0]);
      const size_t r = out0.size();
      const int64_t m = out0[r - 2], cols = out0[r - 1], k = t.adj_x ? x[r - 2] : x[r - 1];
      const int64_t batch = shape_numel(out0) / std::max<int64_t>(1, m * cols);
      flops = 2.0 * double(batch) * double(m) * double(cols) * double(k);
      aligned = multiple_of_block(m) && multiple_of_block(cols) && multiple_of_block(k);
      is_gemm = true;
      break;
    }
    case OpKind::MaxPool:
    case OpKind::AvgPool:
    case OpKind::MaxPoolGrad:
    case OpKind::AvgPoolGrad: {
      const auto& p = attrs_as<PoolAttrs>(n.attrs);
      // Forward: one window per output; gradients: one window per dy element (input 0).
      const bool forward = n.kind == OpKind::MaxPool || n.kind == OpKind::AvgPool;
      const int64_t windows = forward ? shape_numel(out0) : shape_numel(shape_of(g, n.inputs[0]));
      flops = double(windows) * p.kernel_h * p.kernel_w;
      break;
    }
    case OpKind::GatherV2: {
      // Memory-bound row copies: it reads only the rows it gathers, not the whole table
      // (params, [V, D...]), so the table is left out: indices, then rows read and written.
      const int64_t copied = shape_numel(out0);
      bytes = 4 * (shape_numel(shape_of(g, n.inputs[1])) + 2 * copied);
      flops = double(copied);
      break;
    }
    case OpKind::UnsortedSegmentSum:
      // Memory-bound: every data element added once, every output element written once
      // (zeros included), all of them in `bytes` as for any op.
      flops = double(shape_numel(shape_of(g, n.inputs[0])) + shape_numel(out0));
      break;
    default:
      break;
  }
  if (!is_gemm) {
    // Channel dimension: dim 1 of NCHW data or of a [rows, features] matrix.
    const int64_t channels = out0.size() == 4 || out0.size() == 2 ? out0[1] : shape_numel(out0);
    aligned = multiple_of_block(channels);
  }
  f[size_t(Feature::flops)] = flops;
  f[size_t(Feature::bytes)] = double(bytes);
  f[size_t(Feature::intensity)] = bytes > 0 ? flops / double(bytes) : 0.0;
  f[size_t(Feature::elements)] = double(shape_numel(out0));
  f[size_t(Feature::aligned)] = aligned ? 1.0 : 0.0;
  return f;
}

// ---- statistics ----

namespace {

// Ranks 1..n, ties get the average of the ranks they span.
std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double r = 0.5 * double(i + j) + 1.0;  // average of ranks i+1 .. j+1
    for (size_t k = i; k <= j; ++k) rank[order[k]] = r;
    i = j + 1;
  }
  return rank;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
  CAMPO_CHECK(a.size() == b.size(), "spearman: ", a.size(), " values against ", b.size());
  if (a.size() < 2) return 0.0;
  // Pearson correlation of the ranks (exact with ties, unlike 1 - 6 sum d^2 / n(n^2-1)).
  const std::vector<double> ra = average_ranks(a), rb = average_ranks(b);
  const double n = double(a.size()), mean = (n + 1) / 2;  // mean rank, ties or not
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  if (saa <= 0 || sbb <= 0) return 0.0;
  return sab / std::sqrt(saa * sbb);
}

namespace {

// Solves min |A x - b| over the columns in `active` by Householder QR (A is n x k, row
// major, columns already scaled). Returns the index (into `active`) of the first column
// found linearly dependent on the earlier ones, or -1 when all are independent (x set).
int householder_solve(std::vector<std::vector<double>> a, std::vector<double> b,
                      const std::vector<int>& active, std::vector<double>& x) {
  const size_t n = a.size(), k = active.size();
  // Work on a copy restricted to the active columns.
  std::vector<std::vector<double>> r(n, std::vector<double>(k));
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < k; ++j) r[i][j] = a[i][size_t(active[j])];
  for (size_t j = 0; j < k; ++j) {
    double norm = 0, column_norm = 0;
    for (size_t i = j; i < n; ++i) norm += r[i][j] * r[i][j];
    for (size_t i = 0; i < n; ++i) column_norm += r[i][j] * r[i][j];
    norm = std::sqrt(norm);
    // What is left of the column after removing earlier directions is (relatively) noise.
    if (j >= n || norm <= 1e-9 * std::sqrt(column_norm) || norm == 0) return int(j);
    const double alpha = r[j][j] > 0 ? -norm : norm;
    std::vector<double> v(n, 0.0);
    for (size_t i = j; i < n; ++i) v[i] = r[i][j];
    v[j] -= alpha;
    double vv = 0;
    for (size_t i = j; i < n; ++i) vv += v[i] * v[i];
    if (vv == 0) continue;
    for (size_t c = j; c < k; ++c) {
      double s = 0;
      for (size_t i = j; i < n; ++i) s += v[i] * r[i][c];
      s = 2 * s / vv;
      for (size_t i = j; i < n; ++i) r[i][c] -= s * v[i];
    }
    double s = 0;
    for (size_t i = j; i < n; ++i) s += v[i] * b[i];
    s = 2 * s / vv;
    for (size_t i = j; i < n; ++i) b[i] -= s * v[i];
  }
  x.assign(k, 0.0);
  for (size_t j = k; j-- > 0;) {
    double s = b[j];
    for (size_t c = j + 1; c < k; ++c) s -= r[j][c] * x[c];
    x[j] = s / r[j][j];
  }
  return -1;
}

}  // namespace

std::vector<double> least_squares(const std::vector<std::vector<double>>& rows,
                                  const std::vector<double>& y,
                                  const std::vector<double>& weights) {
  CAMPO_CHECK(!rows.empty() && rows.size() == y.size(), "least squares: ", rows.size(),
              " rows against ", y.size(), " targets");
  CAMPO_CHECK(weights.empty() || weights.size() == y.size(), "least squares: ", weights.size(),
              " weights for ", y.size(), " rows");
  const size_t n = rows.size(), k = rows[0].size();
  for (const auto& r : rows) CAMPO_CHECK(r.size() == k, "least squares: rows of unequal length");
  // sqrt(w) * row, sqrt(w) * y; then each column scaled to unit RMS.
  std::vector<std::vector<double>> a(n, std::vector<double>(k));
  std::vector<double> b(n);
  for (size_t i = 0; i < n; ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    CAMPO_CHECK(w >= 0 && std::isfinite(w), "least squares: weight ", w, " of row ", i);
    const double sw = std::sqrt(w);
    for (size_t j = 0; j < k; ++j) a[i][j] = sw * rows[i][j];
    b[i] = sw * y[i];
  }
  std::vector<double> scale(k, 0.0);
  std::vector<int> active;
  for (size_t j = 0; j < k; ++j) {
    for (size_t i = 0; i < n; ++i) scale[j] += a[i][j] * a[i][j];
    scale[j] = std::sqrt(scale[j] / double(n));
    if (scale[j] > 0 && std::isfinite(scale[j])) {
      for (size_t i = 0; i < n; ++i) a[i][j] /= scale[j];
      active.push_back(int(j));
    }
  }
  std::vector<double> solution(k, 0.0), x;
  while (!active.empty()) {
    const int dependent = householder_solve(a, b, active, x);
    if (dependent < 0) {
      for (size_t j = 0; j < active.size(); ++j)
        solution[size_t(active[j])] = x[j] / scale[size_t(active[j])];
      break;
    }
    active.erase(active.begin() + dependent);
  }
  return solution;
}

double median_of(std::vector<double> v) {
  CAMPO_CHECK(!v.empty(), "the median of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mape_percent(const std::vector<double>& predicted, const std::vector<double>& truth) {
  CAMPO_CHECK(predicted.size() == truth.size() && !truth.empty(), "MAPE of ", predicted.size(),
              " predictions against ", truth.size(), " truths");
  double s = 0;
  for (size_t i = 0; i < truth.size(); ++i) s += std::fabs(predicted[i] - truth[i]) / truth[i];
  return 100.0 * s / double(truth.size());
}

// ---- op models ----

bool OpModel::uses_counters() const {
  return std::any_of(features.begin(), features.end(), [](Feature x) { return is_counter(x); });
}

const OpModel& OpModel::for_features(const NodeFeatures& f) const {
  for (Feature x : features)
    if (!std::isfinite(f[size_t(x)])) {
      CAMPO_CHECK(analytic, "internal: the model of ", key, " uses ", feature_name(x),
                  ", unread for this node, and has no analytic model");
      return *analytic;
    }
  return *this;
}

double OpModel::predict_low_ms(const NodeFeatures& f, double fp32_ms, const NodeShape* node) const {
  if (shape) {
    CAMPO_CHECK(node && node->known(), "internal: the model of ", key,
                " is fitted by shape and was given no node shape");
    return fp32_ms > 0 ? shape->low_ms(*node, fp32_ms) : 0.0;
  }
  if (const OpModel& m = for_features(f); &m != this) return m.predict_low_ms(f, fp32_ms, node);
  double t = sigma * fp32_ms + bias;
  for (size_t i = 0; i < features.size(); ++i) t += weights[i] * f[size_t(features[i])];
  return std::max(0.0, t);
}

namespace {

double score(const OpModel& m, const std::vector<OpSample>& samples) {
  if (samples.empty()) return -1;
  std::vector<double> p, t;
  for (const OpSample& s : samples) {
    p.push_back(m.predict_low_ms(s.features, s.fp32_ms, &s.shape));
    t.push_back(s.low_ms);
  }
  return mape_percent(p, t);
}

}  // namespace

OpModel fit_op_model(const std::string& key, const std::vector<OpSample>& train,
                     const std::vector<OpSample>& heldout) {
  CAMPO_CHECK(!train.empty(), "no calibration samples for ", key);
  for (const OpSample& s : train)
    CAMPO_CHECK(s.low_ms > 0 && s.fp32_ms >= 0, "calibration sample of ", key,
                " with a non-positive time");
  OpModel m;
  m.key = key;
  m.train_samples = int(train.size());
  m.heldout_samples = int(heldout.size());
  std::vector<double> low, weights;
  for (const OpSample& s : train) {
    low.push_back(s.low_ms);
    weights.push_back(1.0 / (s.low_ms * s.low_ms));  // relative error
  }
  // A feature is a candidate where every sample has it (counters: read on every node).
  auto known_everywhere = [&](int f) {
    for (const std::vector<OpSample>* set : {&train, &heldout})
      for (const OpSample& s : *set)
        if (!std::isfinite(s.features[size_t(f)])) return false;
    return true;
  };
  std::vector<Feature> selected;
  std::vector<double> selected_rho;
  for (int f = 0; f < kNumFeatures; ++f) {
    if (!known_everywhere(f)) continue;
    std::vector<double> column;
    for (const OpSample& s : train) column.push_back(s.features[size_t(f)]);
    const double rho = spearman(column, low);
    if (std::fabs(rho) > kFeatureRhoThreshold) {
      selected.push_back(Feature(f));
      selected_rho.push_back(rho);
    }
  }
  const size_t n = train.size();
  const size_t unknowns = selected.size() + 2;
  // A fit whose sigma is not positive (the low time falling as the f32 time grows), or
  // whose intercept is far below zero, is fitting noise: the next simpler form is used.
  auto plausible = [](const OpModel& fit) {
    return fit.sigma > 0 && fit.bias >= kMinOpModelBiasMs;
  };
  bool fitted = false;
  if (!selected.empty() && n >= std::max<size_t>(8, 3 * unknowns)) {
    // Columns T_fp32, 1, features: a feature that is a combination of T_fp32 and the
    // constant (or of earlier features) is the one dropped, never sigma.
    std::vector<std::vector<double>> rows;
    for (const OpSample& s : train) {
      std::vector<double> r = {s.fp32_ms, 1.0};
      for (Feature f : selected) r.push_back(s.features[size_t(f)]);
      rows.push_back(r);
    }
    std::vector<double> x = least_squares(rows, low, weights);
    m.fit = "features";
    m.sigma = x[0];
    m.bias = x[1];
    for (size_t i = 0; i < selected.size(); ++i) {
      if (x[i + 2] == 0) continue;  // dropped as a combination of the others
      m.features.push_back(selected[i]);
      m.rho.push_back(selected_rho[i]);
      m.weights.push_back(x[i + 2]);
    }
    if (m.features.empty()) m.fit = "sigma+bias";
    fitted = plausible(m);
  }
  if (!fitted && n >= 4) {
    std::vector<std::vector<double>> rows;
    for (const OpSample& s : train) rows.push_back({s.fp32_ms, 1.0});
    std::vector<double> x = least_squares(rows, low, weights);
    m = OpModel{.key = key, .train_samples = m.train_samples, .heldout_samples = m.heldout_samples};
    m.fit = "sigma+bias";
    m.sigma = x[0];
    m.bias = x[1];
    fitted = plausible(m);
  }
  if (!fitted) {
    // min sum ((sigma x - y) / y)^2  =>  sigma = sum(x/y) / sum((x/y)^2)
    double sxy = 0, sxx = 0;
    for (const OpSample& s : train) {
      const double r = s.fp32_ms / s.low_ms;
      sxy += r;
      sxx += r * r;
    }
    m = OpModel{.key = key, .train_samples = m.train_samples, .heldout_samples = m.heldout_samples};
    m.fit = "ratio";
    m.sigma = sxx > 0 ? sxy / sxx : 1.0;
  }
  m.train_mape = score(m, train);
  m.heldout_mape = score(m, heldout);
  if (m.uses_counters()) {
    // The same samples without their counters: the model of nodes whose counters are unread.
    auto analytic_only = [](std::vector<OpSample> v) {
      for (OpSample& s : v)
        for (int c = kFirstCounterFeature; c < kNumFeatures; ++c)
          s.features[size_t(c)] = std::numeric_limits<double>::quiet_NaN();
      return v;
    };
    m.analytic = std::make_shared<const OpModel>(
        fit_op_model(key, analytic_only(train), analytic_only(heldout)));
  }
  return m;
}

int min_shape_feature_samples(ShapeFamily f) {
  return std::max(24, 4 * int(shape_term_names(f).size()));
}

namespace {

ShapeFamily family_of(const std::vector<ShapeSample>& train) {
  CAMPO_CHECK(!train.empty(), "internal: a shape fit of no samples");
  for (const ShapeSample& s : train) {
    CAMPO_CHECK(s.shape.known() && s.shape.family == train[0].shape.family,
                "internal: shape samples of mixed or unknown families");
    CAMPO_CHECK(s.fp32_ms > 0 && s.low_ms > 0, "internal: a shape sample with a time <= 0");
  }
  return train[0].shape.family;
}

}  // namespace

ShapeModel fit_shape_features(const std::vector<ShapeSample>& train) {
  ShapeModel m;
  m.form = "features";
  m.family = family_of(train);
  if (int(train.size()) < min_shape_feature_samples(m.family)) return {};
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  for (const ShapeSample& s : train) {
    rows.push_back(shape_terms(s.shape, s.fp32_ms));
    y.push_back(std::log(s.low_ms / s.fp32_ms));
  }
  m.weights = least_squares(rows, y);
  return m;
}

ShapeModel fit_shape_table(const std::vector<ShapeSample>& train) {
  ShapeModel m;
  m.form = "table";
  m.family = family_of(train);
  // Samples of one shape (the same layer at several places, or in several graphs) become one
  // point: the mean of their log efficiencies.
  std::map<std::vector<double>, std::pair<double, int>> by_point;
  for (const ShapeSample& s : train) {
    auto& [sum, count] = by_point[shape_coordinates(s.shape)];
    sum += std::log(shape_work(s.shape) / s.low_ms);
    ++count;
  }
  for (const auto& [point, sum_count] : by_point) {
    m.points.push_back(point);
    m.log_efficiencies.push_back(sum_count.first / sum_count.second);
  }
  return m;
}

const char* fit_form_name(FitForm f) {
  switch (f) {
    case FitForm::linear:
      return "linear";
    case FitForm::shape_features:
      return "shape-features";
    case FitForm::shape_table:
      return "shape-table";
  }
  return "?";
}

namespace {

// The op model of form `form` fitted on `train` (the linear one: fit_op_model's), or nothing
// where that form cannot be fitted on these samples.
std::optional<OpModel> fit_form(FitForm form, const std::string& key,
                                const std::vector<OpSample>& train,
                                const std::vector<OpSample>& heldout) {
  if (form == FitForm::linear) return fit_op_model(key, train, heldout);
  std::vector<ShapeSample> shapes;
  for (const OpSample& s : train) {
    if (!s.shape.known() || !(s.fp32_ms > 0) || s.shape.family != train[0].shape.family)
      return std::nullopt;
    shapes.push_back({s.shape, s.fp32_ms, s.low_ms});
  }
  for (const OpSample& s : heldout)
    if (!s.shape.known() || !(s.fp32_ms > 0) || s.shape.family != train[0].shape.family)
      return std::nullopt;
  ShapeModel sm =
      form == FitForm::shape_features ? fit_shape_features(shapes) : fit_shape_table(shapes);
  if (sm.form.empty()) return std::nullopt;  // too few samples for its terms
  OpModel m;
  m.key = key;
  m.fit = fit_form_name(form);
  m.shape = std::make_shared<const ShapeModel>(std::move(sm));
  m.train_samples = int(train.size());
  m.heldout_samples = int(heldout.size());
  m.train_mape = score(m, train);
  m.heldout_mape = score(m, heldout);
  return m;
}

// MAPE of `form` over kShapeFolds folds of whole groups of `train`; -1 with fewer than two
// groups or where a fold cannot be fitted.
double cross_validated_mape(FitForm form, const std::string& key,
                            const std::vector<OpSample>& train) {
  std::vector<int64_t> groups;
  for (const OpSample& s : train) groups.push_back(s.group);
  std::sort(groups.begin(), groups.end());
  groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
  if (groups.size() < 2) return -1;
  const int folds = std::min<int>(kShapeFolds, int(groups.size()));
  std::vector<double> predicted, truth;
  for (int fold = 0; fold < folds; ++fold) {
    std::vector<OpSample> in, out;
    for (const OpSample& s : train) {
      const auto rank = std::lower_bound(groups.begin(), groups.end(), s.group) - groups.begin();
      (rank % folds == fold ? out : in).push_back(s);
    }
    if (in.empty() || out.empty()) continue;
    const std::optional<OpModel> m = fit_form(form, key, in, {});
    if (!m) return -1;
    for (const OpSample& s : out) {
      predicted.push_back(m->predict_low_ms(s.features, s.fp32_ms, &s.shape));
      truth.push_back(s.low_ms);
    }
  }
  return truth.empty() ? -1 : mape_percent(predicted, truth);
}

}  // namespace

OpModel fit_op_model_by_shape(const std::string& key, const std::vector<OpSample>& train,
                              const std::vector<OpSample>& heldout, FitComparison* comparison) {
  FitComparison c;
  c.key = key;
  c.train_samples = int(train.size());
  c.heldout_samples = int(heldout.size());
  OpModel best = fit_op_model(key, train, heldout);
  c.heldout_mape[0] = best.heldout_mape;
  if (!best.uses_counters()) {
    c.cv_mape[0] = cross_validated_mape(FitForm::linear, key, train);
    double best_cv = c.cv_mape[0];
    for (FitForm form : {FitForm::shape_features, FitForm::shape_table}) {
      const std::optional<OpModel> m = fit_form(form, key, train, heldout);
      if (!m) continue;
      c.heldout_mape[size_t(form)] = m->heldout_mape;
      const double cv = cross_validated_mape(form, key, train);
      c.cv_mape[size_t(form)] = cv;
      // A shape fit replaces the linear model only on clear evidence (its cross-validated
      // MAPE below kShapeFitMargin of the linear one's): on a noisy calibration the folds'
      // scores move by more than the forms differ (docs/mixed-precision.md).
      constexpr double kShapeFitMargin = 0.8;
      const double bar = c.chosen == FitForm::linear ? kShapeFitMargin * best_cv : best_cv;
      if (cv >= 0 && best_cv >= 0 && cv < bar) {
        best_cv = cv;
        best = *m;
        c.chosen = form;
      }
    }
  }
  if (comparison) *comparison = c;
  return best;
}

CastFit fit_cast_relative(const std::vector<std::pair<int64_t, double>>& samples) {
  CastFit f;
  std::vector<std::vector<double>> rows;
  std::vector<double> y, w;
  std::vector<int64_t> sizes;
  for (auto [n, ms] : samples) {
    if (!(ms > 0)) continue;
    rows.push_back({1.0, double(n)});
    y.push_back(ms);
    w.push_back(1.0 / (ms * ms));
    sizes.push_back(n);
  }
  std::sort(sizes.begin(), sizes.end());
  if (std::unique(sizes.begin(), sizes.end()) - sizes.begin() < 2) return f;
  const std::vector<double> x = least_squares(rows, y, w);
  f.model.fixed_ms = x[0];
  f.model.per_element_ms = x[1];
  if (!(x[1] >= 0 && x[0] >= kMinOpModelBiasMs)) {
    // Noise (a larger cast timed faster, or an intercept far below zero): a cast's time in
    // proportion to its size instead, min sum ((r n - t) / t)^2 => r = sum(n/t) / sum((n/t)^2).
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      const double q = rows[i][1] / y[i];
      s1 += q;
      s2 += q * q;
    }
    f.model.fixed_ms = 0;
    f.model.per_element_ms = s2 > 0 ? s1 / s2 : 0;
  }
  f.samples = int(y.size());
  std::vector<double> p;
  for (const auto& r : rows) p.push_back(std::max(0.0, f.model.cost_ms(int64_t(r[1]))));
  f.mape = mape_percent(p, y);
  return f;
}

// ---- f32 models ----

double F32Model::predict_ms(const NodeFeatures& f) const {
  const double t =
      per_flop_ms * f[size_t(Feature::flops)] + per_byte_ms * f[size_t(Feature::bytes)] + fixed_ms;
  return std::max(t, 1e-6);  // a negative intercept must not make a node free
}

F32Model fit_f32_model(const std::string& key, const std::vector<OpSample>& train,
                       const std::vector<OpSample>& heldout) {
  CAMPO_CHECK(!train.empty(), "no calibration samples for ", key);
  for (const OpSample& s : train)
    CAMPO_CHECK(s.fp32_ms > 0, "calibration sample of ", key, " with a non-positive f32 time");
  std::vector<double> y, w;
  for (const OpSample& s : train) {
    y.push_back(s.fp32_ms);
    w.push_back(1.0 / (s.fp32_ms * s.fp32_ms));  // relative error
  }
  auto score = [](const F32Model& m, const std::vector<OpSample>& samples) {
    if (samples.empty()) return -1.0;
    std::vector<double> p, t;
    for (const OpSample& s : samples) {
      p.push_back(m.predict_ms(s.features));
      t.push_back(s.fp32_ms);
    }
    return mape_percent(p, t);
  };
  // Every non-empty subset of {constant, flops, bytes}; kept where no coefficient is negative
  // (a larger op is not faster, and a negative intercept would predict nothing, or 0 ms, for
  // small nodes); the best on the training samples wins. The constant alone, the median
  // time, is the fallback.
  F32Model best{.key = key};
  best.fixed_ms = median_of(y);
  double best_mape = std::numeric_limits<double>::infinity();
  for (int form = 1; form < 8; ++form) {
    const bool use_constant = form & 1, use_flops = form & 2, use_bytes = form & 4;
    const size_t unknowns = size_t(use_constant) + size_t(use_flops) + size_t(use_bytes);
    if (train.size() < unknowns) continue;
    std::vector<std::vector<double>> rows;
    for (const OpSample& s : train) {
      std::vector<double> r;
      if (use_constant) r.push_back(1.0);
      if (use_flops) r.push_back(s.features[size_t(Feature::flops)]);
      if (use_bytes) r.push_back(s.features[size_t(Feature::bytes)]);
      rows.push_back(r);
    }
    const std::vector<double> x = least_squares(rows, y, w);
    F32Model m{.key = key};
    size_t i = 0;
    if (use_constant) m.fixed_ms = x[i++];
    if (use_flops) m.per_flop_ms = x[i++];
    if (use_bytes) m.per_byte_ms = x[i++];
    if (!(m.per_flop_ms >= 0 && m.per_byte_ms >= 0 && m.fixed_ms >= 0)) continue;
    if (!(m.per_flop_ms > 0 || m.per_byte_ms > 0 || m.fixed_ms > 0)) continue;
    const double mape = score(m, train);
    if (mape < best_mape) {
      best_mape = mape;
      best = m;
    }
  }
  best.train_samples = int(train.size());
  best.heldout_samples = int(heldout.size());
  best.heldout_mape = score(best, heldout);
  return best;
}

bool Agreement::fits() const {
  auto within = [](double r) { return r >= kMinFitRatio && r <= kMaxFitRatio; };
  return checked() && within(median_ratio) && within(total_ratio);
}

std::string Agreement::describe() const {
  char line[128];
  std::snprintf(line, sizeof line, "median %.2fx, total %.2fx over %d nodes", median_ratio,
                total_ratio, nodes);
  return line;
}

Agreement agreement_of(const std::vector<double>& measured, const std::vector<double>& predicted) {
  CAMPO_CHECK(measured.size() == predicted.size(), "internal: ", measured.size(),
              " measured times against ", predicted.size(), " predicted");
  Agreement a;
  std::vector<double> ratios;
  double sum_measured = 0, sum_predicted = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    if (!(measured[i] >= kMinAgreementMs) || !(predicted[i] > 0)) continue;
    ratios.push_back(measured[i] / predicted[i]);
    sum_measured += measured[i];
    sum_predicted += predicted[i];
  }
  a.nodes = int(ratios.size());
  if (ratios.empty()) return a;
  a.median_ratio = median_of(ratios);
  a.total_ratio = sum_measured / sum_predicted;
  return a;
}

std::string describe_record(const CalibrationRecord& r) {
  if (!r.recorded) return "no noise record (made before campo recorded load and spread)";
  char load[96] = "load unknown";
  if (r.load >= 0)
    std::snprintf(load, sizeof load, "load %.2f of %d cores (max %.2f)", r.load, r.cores,
                  r.max_load);
  char shapes[32] = "-";
  if (r.shape_spread >= 0) std::snprintf(shapes, sizeof shapes, "%.1f%%", 100 * r.shape_spread);
  char line[320];
  std::snprintf(line, sizeof line,
                "%d repeats, %s, spread %.1f%% (max %.1f%%), identical shapes %s, %d of %d "
                "measurements redone",
                r.repeats, load, 100 * r.repeat_spread, 100 * r.max_repeat_spread, shapes, r.redone,
                r.measurements);
  return line;
}

// ---- the calibration file ----

const OpModel* Calibration::model_for(OpKind kind, const NodeFeatures& f) const {
  const std::string name = op_name(kind);
  if (f[size_t(Feature::aligned)] == 0) {
    auto it = ops.find(name + ":unaligned");
    if (it != ops.end()) return &it->second;
  }
  auto it = ops.find(name);
  return it == ops.end() ? nullptr : &it->second;
}

const F32Model* Calibration::f32_model_for(OpKind kind) const {
  auto it = f32_ops.find(op_name(kind));
  return it == f32_ops.end() ? nullptr : &it->second;
}

namespace {

using nlohmann::json;

json cast_json(const CastFit& c) {
  return {{"fixed_ms", c.model.fixed_ms},
          {"per_element_ms", c.model.per_element_ms},
          {"samples", c.samples},
          {"mape", c.mape}};
}

// Every number in the tree is finite (JSON cannot say otherwise, nlohmann would write null).
bool all_finite(const json& j) {
  if (j.is_number_float()) return std::isfinite(j.get<double>());
  if (j.is_structured())
    for (const auto& e : j)
      if (!all_finite(e)) return false;
  return true;
}

// A problem with the file's contents (caught in read_calibration).
struct Corrupt {
  std::string what;
};

const json& field(const json& j, const std::string& name, const std::string& where) {
  if (!j.is_object()) throw Corrupt{where + " is not an object"};
  auto it = j.find(name);
  if (it == j.end()) throw Corrupt{"missing field '" + where + "." + name + "'"};
  return *it;
}
double number(const json& j, const std::string& name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_number()) throw Corrupt{"'" + where + "." + name + "' is not a number"};
  const double d = v.get<double>();
  if (!std::isfinite(d)) throw Corrupt{"'" + where + "." + name + "' is not finite"};
  return d;
}
int integer(const json& j, const std::string& name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_number_integer()) throw Corrupt{"'" + where + "." + name + "' is not an integer"};
  // get<int>() would wrap a larger value silently.
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max())
                        : v.get<int64_t>() >= std::numeric_limits<int>::min() &&
                              v.get<int64_t>() <= std::numeric_limits<int>::max();
  if (!fits) throw Corrupt{"'" + where + "." + name + "' is out of range"};
  return v.get<int>();
}
std::string text(const json& j, const std::string& name, const std::string& where) {
  const json& v = field(j, name, where);
  if (!v.is_string()) throw Corrupt{"'" + where + "." + name + "' is not a string"};
  return v.get<std::string>();
}
// An identity field's value: a string, or (files written before BackendIdentity: the CPU's
// logical_cores and native_bf16) an integer or a boolean, read as its decimal or
// "true" / "false" text, which is how the CPU backend states them now.
std::string identity_value(const json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return v.dump();
  throw Corrupt{"'" + where + "' is not a string, an integer or true / false"};
}

CastFit read_cast(const json& j, const std::string& where) {
  CastFit c;
  c.model.fixed_ms = number(j, "fixed_ms", where);
  c.model.per_element_ms = number(j, "per_element_ms", where);
  c.samples = integer(j, "samples", where);
  c.mape = number(j, "mape", where);
  return c;
}

// ---- plausibility: what a fit on real timings can produce ----
//
// A file that parses can still hold a model no machine could have produced; used, it
// would make every prediction 0 ms (or infinite) and the policy's choices meaningless.
// Rules, each a physical fact or a bound no honest fit comes near:
//   sigma        in (0, kMaxSigma]: the low time grows with the f32 time (fit_op_model
//                falls back to a simpler form rather than write sigma <= 0)
//   bias_ms      in [kMinBiasMs, kMaxMs]: a fitted intercept a little below zero is usual
//                (the repository's files hold -0.003 ms), one below -1 ms would predict
//                0 for every op under a millisecond
//   weights      finite, |w| <= kMaxMagnitude; a weight may be negative (features are
//                correlated, so a partial effect can be)
//   rho          in [-1, 1]; features named once; "ratio" fits have no bias and no
//                features, "sigma+bias" fits no features
//   samples      counts >= 0; MAPEs -1 (not scored) or in [0, kMaxMs]
//   casts        per_element_ms in [0, 1] (a larger cast is not cheaper); the policy's
//                cast model has fixed_ms in [0, kMaxMs] (calibrate clamps it), a per-
//                direction fit fixed_ms in [kMinBiasMs, kMaxMs]
constexpr double kMaxSigma = 1e3;
constexpr double kMinBiasMs = kMinOpModelBiasMs;
constexpr double kMaxMs = 1e6;
constexpr double kMaxMagnitude = 1e6;

std::string show(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void require_in(double v, double lo, double hi, const std::string& field, const std::string& why) {
  if (!(v >= lo && v <= hi))
    throw Corrupt{"implausible " + field + " = " + show(v) + ": " + why + " (expected " + show(lo) +
                  " .. " + show(hi) + ")"};
}

void require_mape(double v, const std::string& field) {
  if (v != -1) require_in(v, 0, kMaxMs, field, "a percentage error is not negative");
}

void check_cast_fit(const CastFit& c, const std::string& where) {
  require_in(c.model.fixed_ms, kMinBiasMs, kMaxMs, where + ".fixed_ms",
             "a cast's fixed cost cannot be that");
  require_in(c.model.per_element_ms, 0, 1, where + ".per_element_ms",
             "a larger cast is not cheaper than a smaller one");
  if (c.samples < 0)
    throw Corrupt{"implausible " + where + ".samples = " + std::to_string(c.samples)};
  require_mape(c.mape, where + ".mape");
}

// A shape model's parameters: its form the op model's fit's, as many weights as its family has
// terms, table points of its family's coordinates, everything finite and bounded.
void check_shape_model(const ShapeModel& s, const std::string& fit, const std::string& where) {
  if ("shape-" + s.form != fit)
    throw Corrupt{where + ".shape is a '" + s.form + "' model in a '" + fit + "' fit"};
  if (s.form == "features") {
    if (s.weights.size() != shape_term_names(s.family).size())
      throw Corrupt{where + ".shape has " + std::to_string(s.weights.size()) + " weights for " +
                    std::to_string(shape_term_names(s.family).size()) + " terms"};
    for (double w : s.weights)
      require_in(w, -kMaxMagnitude, kMaxMagnitude, where + ".shape.weight",
                 "no shape term is worth that much");
    return;
  }
  if (s.points.empty() || s.points.size() != s.log_efficiencies.size())
    throw Corrupt{where + ".shape is a table without points"};
  const size_t dims = shape_coordinates(NodeShape{.family = s.family}).size();
  for (size_t i = 0; i < s.points.size(); ++i) {
    if (s.points[i].size() != dims)
      throw Corrupt{where + ".shape.points[" + std::to_string(i) + "] has " +
                    std::to_string(s.points[i].size()) + " coordinates, not " +
                    std::to_string(dims)};
    for (double x : s.points[i])
      require_in(x, 0, 64, where + ".shape.points[" + std::to_string(i) + "]",
                 "a coordinate is the log2 of a dimension >= 1");
    require_in(s.log_efficiencies[i], -100, 100, where + ".shape.log_efficiencies",
               "no kernel does e^100 of work per ms, or e^-100");
  }
}

void check_op_model(const OpModel& m) {
  const std::string where = "ops[" + m.key + "]";
  const size_t colon = m.key.find(':');
  if (colon != std::string::npos && m.key.substr(colon) != ":unaligned")
    throw Corrupt{"unknown model key '" + m.key + "' (expected <op> or <op>:unaligned)"};
  if (m.fit != "features" && m.fit != "sigma+bias" && m.fit != "ratio" &&
      m.fit != "shape-features" && m.fit != "shape-table")
    throw Corrupt{"unknown fit '" + m.fit + "' in " + where +
                  " (expected features, sigma+bias, ratio, shape-features or shape-table)"};
  if (m.is_shape_fit() != (m.fit.rfind("shape-", 0) == 0))
    throw Corrupt{where + " is a '" + m.fit + "' fit " +
                  (m.is_shape_fit() ? "but has a shape model" : "without its shape model")};
  if (m.is_shape_fit()) {
    check_shape_model(*m.shape, m.fit, where);
    const std::optional<OpKind> kind = parse_op_kind(m.key.substr(0, colon));
    if (kind && shape_family_of(*kind) != m.shape->family)
      throw Corrupt{where + ".shape is of the " + shape_family_name(m.shape->family) +
                    " family, not " + shape_family_name(shape_family_of(*kind)) + "'s"};
  }
  if (!(m.sigma > 0 && m.sigma <= kMaxSigma))
    throw Corrupt{"implausible " + where + ".sigma = " + show(m.sigma) +
                  ": the low-precision time must grow with the f32 time (expected > 0 .. " +
                  show(kMaxSigma) + ")"};
  require_in(m.bias, kMinBiasMs, kMaxMs, where + ".bias_ms",
             "it would predict 0 ms for every op under " + show(-m.bias) + " ms");
  if (m.fit != "features" && !m.features.empty())
    throw Corrupt{where + " is a '" + m.fit + "' fit but lists features"};
  if ((m.fit == "ratio" || m.is_shape_fit()) && m.bias != 0)
    throw Corrupt{where + " is a '" + m.fit + "' fit but has a bias"};
  if (m.is_shape_fit() && (m.sigma != 1 || m.analytic))
    throw Corrupt{where + " is a '" + m.fit + "' fit but has a sigma or an analytic model"};
  for (size_t i = 0; i < m.features.size(); ++i) {
    const std::string f = where + ".features[" + feature_name(m.features[i]) + "]";
    for (size_t k = 0; k < i; ++k)
      if (m.features[k] == m.features[i]) throw Corrupt{f + " is listed twice"};
    require_in(m.rho[i], -1, 1, f + ".rho", "a correlation lies in [-1, 1]");
    require_in(m.weights[i], -kMaxMagnitude, kMaxMagnitude, f + ".weight",
               "no feature is worth that many ms");
  }
  if (m.train_samples < 0 || m.heldout_samples < 0)
    throw Corrupt{"implausible sample counts in " + where + " (train " +
                  std::to_string(m.train_samples) + ", held out " +
                  std::to_string(m.heldout_samples) + ")"};
  require_mape(m.train_mape, where + ".train_mape");
  require_mape(m.heldout_mape, where + ".heldout_mape");
  if (m.uses_counters() && !m.analytic)
    throw Corrupt{where +
                  " uses hardware counters but has no analytic model for nodes "
                  "whose counters are not read"};
  if (m.analytic) {
    if (!m.uses_counters()) throw Corrupt{where + " has an analytic model but uses no counters"};
    if (m.analytic->uses_counters()) throw Corrupt{where + ".analytic uses hardware counters"};
    check_op_model(*m.analytic);
  }
}

// Throws Corrupt naming the first implausible field.
void check_plausible(const Calibration& cal) {
  require_in(cal.cast.fixed_ms, 0, kMaxMs, "cast.fixed_ms", "a cast takes time");
  require_in(cal.cast.per_element_ms, 0, 1, "cast.per_element_ms",
             "a larger cast is not cheaper than a smaller one");
  check_cast_fit(cal.cast_all, "cast_fits.both");
  check_cast_fit(cal.cast_to_low, "cast_fits.to_low");
  check_cast_fit(cal.cast_to_f32, "cast_fits.to_f32");
  for (const auto& [key, m] : cal.ops) check_op_model(m);
  if (cal.machine.kind.empty()) throw Corrupt{"empty 'device'"};
  if (cal.alignment < 1 || cal.alignment > 1024)
    throw Corrupt{"implausible alignment = " + std::to_string(cal.alignment) +
                  " (expected 1 to 1024 elements)"};
  for (const BackendIdentity::Field& f : cal.machine.fields)
    if (f.name.empty() || f.name == "hash" || f.name == "campo_version")
      throw Corrupt{"machine field name '" + f.name + "' is reserved"};
  if (cal.configurations < 0 || cal.heldout_configurations < 0)
    throw Corrupt{"implausible configuration counts (negative)"};
  require_in(cal.seconds, 0, 1e9, "seconds", "a calibration takes a non-negative time");
  for (const auto& [key, m] : cal.f32_ops) {
    const std::string where = "f32_ops[" + key + "]";
    if (!parse_op_kind(key)) throw Corrupt{"unknown op '" + key + "' in f32_ops"};
    require_in(m.per_flop_ms, 0, 1, where + ".per_flop_ms", "a larger op is not faster");
    require_in(m.per_byte_ms, 0, 1, where + ".per_byte_ms", "a larger op is not faster");
    require_in(m.fixed_ms, 0, kMaxMs, where + ".fixed_ms", "an op takes time");
    if (m.train_samples < 0 || m.heldout_samples < 0)
      throw Corrupt{"implausible sample counts in " + where};
    require_mape(m.heldout_mape, where + ".heldout_mape");
  }
  const CalibrationRecord& r = cal.record;
  if (r.recorded) {
    require_in(r.repeats, 1, 1e6, "made.repeats", "a measurement is timed at least once");
    require_in(r.cores, 1, 1e6, "made.cores", "a calibration ran on at least one core");
    require_in(r.measurements, 0, 1e9, "made.measurements", "a count is not negative");
    require_in(r.redone, 0, 1e9, "made.redone", "a count is not negative");
    if (r.load != -1) require_in(r.load, 0, 1e6, "made.load", "a load is not negative");
    if (r.max_load != -1) require_in(r.max_load, 0, 1e6, "made.max_load", "a load is not negative");
    require_in(r.repeat_spread, 0, 1e6, "made.repeat_spread", "a spread is not negative");
    require_in(r.max_repeat_spread, 0, 1e6, "made.max_repeat_spread", "a spread is not negative");
    if (r.shape_spread != -1)
      require_in(r.shape_spread, 0, 1e6, "made.shape_spread", "a spread is not negative");
    for (const auto& [v, name] :
         {std::pair{r.max_load_fraction, "max_load_fraction"},
          std::pair{r.max_spread, "max_spread"}, std::pair{r.max_shape_spread, "max_shape_spread"}})
      require_in(v, 0, 1e6, std::string("made.limits.") + name, "a limit is not negative");
  }
}

// nlohmann's message without its "[json.exception.type_error.302] " prefix.
std::string json_reason(const json::exception& e) {
  std::string what = e.what();
  const size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

std::string with_advice(const std::string& path, const std::string& problem,
                        const std::string& device) {
  return "calibration file " + path + " " + problem + "; run `campo calibrate --device " + device +
         "` to recalibrate";
}

ShapeFamily parse_shape_family(const std::string& name, const std::string& where) {
  for (ShapeFamily f : {ShapeFamily::gemm, ShapeFamily::conv, ShapeFamily::other})
    if (name == shape_family_name(f)) return f;
  throw Corrupt{"unknown shape family '" + name + "' in " + where};
}

// An op model's "shape": {"family", "form": "features", "terms": [{"name", "weight"}]} (the
// terms in shape_term_names' order, named so that a file of another term set is refused) or
// {"family", "form": "table", "points": [[coordinates..., log ratio], ...]}.
ShapeModel read_shape_model(const json& o, const std::string& where) {
  ShapeModel s;
  s.family = parse_shape_family(text(o, "family", where), where);
  s.form = text(o, "form", where);
  if (s.form == "features") {
    const json& terms = field(o, "terms", where);
    const std::vector<std::string>& names = shape_term_names(s.family);
    if (!terms.is_array() || terms.size() != names.size())
      throw Corrupt{"'" + where + ".terms' is not a list of the " + std::to_string(names.size()) +
                    " terms of a " + shape_family_name(s.family) + " shape"};
    for (size_t i = 0; i < names.size(); ++i) {
      if (text(terms[i], "name", where + ".terms[]") != names[i])
        throw Corrupt{"'" + where + ".terms[" + std::to_string(i) + "]' is not '" + names[i] + "'"};
      s.weights.push_back(number(terms[i], "weight", where + ".terms[]"));
    }
  } else if (s.form == "table") {
    const json& points = field(o, "points", where);
    if (!points.is_array()) throw Corrupt{"'" + where + ".points' is not a list"};
    for (const json& p : points) {
      if (!p.is_array() || p.size() < 2)
        throw Corrupt{"'" + where + ".points[]' is not a list of numbers"};
      std::vector<double> v;
      for (const json& x : p) {
        if (!x.is_number() || !std::isfinite(x.get<double>()))
          throw Corrupt{"'" + where + ".points[]' holds a value that is not a finite number"};
        v.push_back(x.get<double>());
      }
      s.log_efficiencies.push_back(v.back());
      v.pop_back();
      s.points.push_back(std::move(v));
    }
  } else {
    throw Corrupt{"unknown shape model form '" + s.form + "' in " + where +
                  " (expected features or table)"};
  }
  return s;
}

// One model of 'ops' (`where`: its place, for errors), and its analytic model, if any.
OpModel read_op_model(const json& o, const std::string& at) {
  OpModel model;
  model.key = text(o, "key", at);
  const std::string where = "ops[" + model.key + "]";
  const std::string op = model.key.substr(0, model.key.find(':'));
  if (!parse_op_kind(op)) throw Corrupt{"unknown op '" + op + "' in " + where};
  model.fit = text(o, "fit", where);
  const json& features = field(o, "features", where);
  if (!features.is_array()) throw Corrupt{"'" + where + ".features' is not a list"};
  for (const json& f : features) {
    const std::string name = text(f, "name", where + ".features[]");
    bool known = false;
    for (int i = 0; i < kNumFeatures; ++i) known |= name == feature_name(Feature(i));
    if (!known) throw Corrupt{"unknown feature '" + name + "' in " + where};
    model.features.push_back(parse_feature(name));
    model.rho.push_back(number(f, "rho", where + ".features[]"));
    model.weights.push_back(number(f, "weight", where + ".features[]"));
  }
  model.sigma = number(o, "sigma", where);
  model.bias = number(o, "bias_ms", where);
  if (o.contains("shape"))
    model.shape =
        std::make_shared<const ShapeModel>(read_shape_model(o["shape"], where + ".shape"));
  model.train_samples = integer(o, "train_samples", where);
  model.heldout_samples = integer(o, "heldout_samples", where);
  model.train_mape = number(o, "train_mape", where);
  model.heldout_mape = number(o, "heldout_mape", where);
  if (o.contains("analytic")) {
    if (o["analytic"].is_object() && o["analytic"].contains("analytic"))
      throw Corrupt{where + ".analytic has an analytic model of its own"};
    OpModel analytic = read_op_model(o["analytic"], where + ".analytic");
    if (analytic.key != model.key)
      throw Corrupt{where + ".analytic is the model of '" + analytic.key + "'"};
    model.analytic = std::make_shared<const OpModel>(std::move(analytic));
  }
  return model;
}

std::string quoted(const BackendIdentity::Field* f) { return f ? "'" + f->value + "'" : "none"; }

}  // namespace

namespace {

json op_model_json(const OpModel& m) {
  json features = json::array();
  for (size_t i = 0; i < m.features.size(); ++i)
    features.push_back(
        {{"name", feature_name(m.features[i])}, {"rho", m.rho[i]}, {"weight", m.weights[i]}});
  json o = {{"key", m.key},
            {"fit", m.fit},
            {"features", features},
            {"sigma", m.sigma},
            {"bias_ms", m.bias},
            {"train_samples", m.train_samples},
            {"heldout_samples", m.heldout_samples},
            {"train_mape", m.train_mape},
            {"heldout_mape", m.heldout_mape}};
  if (m.analytic) o["analytic"] = op_model_json(*m.analytic);
  if (m.shape) {
    const ShapeModel& s = *m.shape;
    json shape = {{"family", shape_family_name(s.family)}, {"form", s.form}};
    if (s.form == "features") {
      json terms = json::array();
      for (size_t i = 0; i < s.weights.size(); ++i)
        terms.push_back({{"name", shape_term_names(s.family)[i]}, {"weight", s.weights[i]}});
      shape["terms"] = terms;
    } else {
      json points = json::array();
      for (size_t i = 0; i < s.points.size(); ++i) {
        json p = s.points[i];
        p.push_back(s.log_efficiencies[i]);
        points.push_back(p);
      }
      shape["points"] = points;
    }
    o["shape"] = shape;
  }
  return o;
}

}  // namespace

void save_calibration(const Calibration& cal, const std::string& path) {
  json ops = json::array();
  for (const auto& [key, m] : cal.ops) ops.push_back(op_model_json(m));
  json f32_ops = json::array();
  for (const auto& [key, m] : cal.f32_ops)
    f32_ops.push_back({{"key", key},
                       {"per_flop_ms", m.per_flop_ms},
                       {"per_byte_ms", m.per_byte_ms},
                       {"fixed_ms", m.fixed_ms},
                       {"train_samples", m.train_samples},
                       {"heldout_samples", m.heldout_samples},
                       {"heldout_mape", m.heldout_mape}});
  // The identity's fields, and the hash that names the default file (not read back).
  json machine = json::object();
  for (const BackendIdentity::Field& f : cal.machine.fields) machine[f.name] = f.value;
  machine["hash"] = cal.machine.hardware_hash();
  json j = {
      {"format", "campo-calibration"},
      {"version", cal.version},
      {"campo_version", cal.campo_version},
      {"machine", machine},
      {"device", cal.machine.kind},
      {"low_precision", dtype_name(cal.low)},
      {"created", cal.created},
      {"hardware_counters", cal.hardware_counters},
      {"alignment", cal.alignment},
      {"cast", {{"fixed_ms", cal.cast.fixed_ms}, {"per_element_ms", cal.cast.per_element_ms}}},
      {"cast_fits",
       {{"both", cast_json(cal.cast_all)},
        {"to_low", cast_json(cal.cast_to_low)},
        {"to_f32", cast_json(cal.cast_to_f32)}}},
      {"ops", ops},
      {"f32_ops", f32_ops},
      {"configurations", cal.configurations},
      {"heldout_configurations", cal.heldout_configurations},
      {"seconds", cal.seconds}};
  if (const CalibrationRecord& r = cal.record; r.recorded)  // how it was made
    j["made"] = {{"repeats", r.repeats},
                 {"cores", r.cores},
                 {"measurements", r.measurements},
                 {"redone", r.redone},
                 {"load", r.load},
                 {"max_load", r.max_load},
                 {"repeat_spread", r.repeat_spread},
                 {"max_repeat_spread", r.max_repeat_spread},
                 {"shape_spread", r.shape_spread},
                 {"limits",
                  {{"max_load_fraction", r.max_load_fraction},
                   {"max_spread", r.max_spread},
                   {"max_shape_spread", r.max_shape_spread}}},
                 {"cpu", cal.machine.find("cpu_model") ? cal.machine.find("cpu_model")->value
                                                       : cal.machine.kind},
                 {"date", cal.created},
                 {"seconds", cal.seconds}};
  CAMPO_CHECK(all_finite(j), "internal: calibration for ", path, " holds a non-finite number");
  try {
    check_plausible(cal);  // what is written must load
  } catch (const Corrupt& c) {
    CAMPO_FAIL("calibration for ", path, " not written: ", c.what,
               "; the timings were too noisy to fit, run `campo calibrate` again on an idle "
               "machine");
  }
  write_file_atomically(path, j.dump(1) + "\n", "calibration file");
}

CalibrationCheck read_calibration_file(const std::string& path, const std::string& device,
                                       Calibration& out) {
  auto problem = [&](CalibrationProblem p, const std::string& what) {
    return CalibrationCheck{p, with_advice(path, what, device), what};
  };
  try {
    require_input_file(path, "calibration file");  // a FIFO would hang the read below
  } catch (const Error& e) {
    return CalibrationCheck{
        CalibrationProblem::missing,
        std::string(e.what()) + "; run `campo calibrate --device " + device + "` to recalibrate",
        e.what()};
  }
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return problem(CalibrationProblem::missing,
                   std::string("cannot be read (") + std::strerror(errno) + ")");
  std::stringstream buffer;
  buffer << in.rdbuf();
  json j;
  try {
    j = json::parse(buffer.str());
  } catch (const json::exception& e) {
    return problem(CalibrationProblem::corrupt, "is corrupt (not JSON: " + json_reason(e) + ")");
  }
  Calibration cal;
  try {
    if (!j.is_object() || !j.contains("format") || j["format"] != "campo-calibration")
      throw Corrupt{"not a campo calibration file"};
    cal.version = integer(j, "version", "file");
    if (cal.version < kOldestCalibrationVersion)
      return problem(CalibrationProblem::stale,
                     "is stale (format version " + std::to_string(cal.version) +
                         ", this campo reads versions " +
                         std::to_string(kOldestCalibrationVersion) + " to " +
                         std::to_string(kCalibrationVersion) + ")");
    if (cal.version > kCalibrationVersion)
      return problem(CalibrationProblem::stale,
                     "is from a newer campo (format version " + std::to_string(cal.version) +
                         ", this campo reads versions " +
                         std::to_string(kOldestCalibrationVersion) + " to " +
                         std::to_string(kCalibrationVersion) + ")");
    const json& m = field(j, "machine", "file");
    if (!m.is_object()) throw Corrupt{"machine is not an object"};
    // Files written before BackendIdentity hold the campo version in `machine`.
    cal.campo_version = j.contains("campo_version") ? text(j, "campo_version", "file")
                                                    : text(m, "campo_version", "machine");
    for (const auto& [name, value] : m.items()) {
      if (name == "hash" || name == "campo_version") continue;
      cal.machine.fields.push_back({name, identity_value(value, "machine." + name)});
    }
    cal.machine.kind = text(j, "device", "file");
    const std::string low = text(j, "low_precision", "file");
    if (low != "bf16" && low != "f16")
      throw Corrupt{"low_precision '" + low + "' is not bf16 or f16"};
    cal.low = parse_dtype(low);
    cal.created = text(j, "created", "file");
    cal.hardware_counters = text(j, "hardware_counters", "file");
    // Files written before the field: the CPU's 16, the only device calibrated then.
    cal.alignment = j.contains("alignment") ? integer(j, "alignment", "file") : 16;
    const json& cast = field(j, "cast", "file");
    cal.cast.fixed_ms = number(cast, "fixed_ms", "cast");
    cal.cast.per_element_ms = number(cast, "per_element_ms", "cast");
    const json& fits = field(j, "cast_fits", "file");
    cal.cast_all = read_cast(field(fits, "both", "cast_fits"), "cast_fits.both");
    cal.cast_to_low = read_cast(field(fits, "to_low", "cast_fits"), "cast_fits.to_low");
    cal.cast_to_f32 = read_cast(field(fits, "to_f32", "cast_fits"), "cast_fits.to_f32");
    const json& ops = field(j, "ops", "file");
    if (!ops.is_array()) throw Corrupt{"'ops' is not a list"};
    for (const json& o : ops) {
      const OpModel model = read_op_model(o, "ops[]");
      if (!cal.ops.emplace(model.key, model).second)
        throw Corrupt{"two models for '" + model.key + "' in 'ops'"};
    }
    cal.configurations = integer(j, "configurations", "file");
    cal.heldout_configurations = integer(j, "heldout_configurations", "file");
    cal.seconds = number(j, "seconds", "file");
    // Files made before f32 models and noise records have neither: they load, unchecked.
    if (j.contains("f32_ops")) {
      const json& f32 = j["f32_ops"];
      if (!f32.is_array()) throw Corrupt{"'f32_ops' is not a list"};
      for (const json& o : f32) {
        F32Model m;
        m.key = text(o, "key", "f32_ops[]");
        const std::string where = "f32_ops[" + m.key + "]";
        m.per_flop_ms = number(o, "per_flop_ms", where);
        m.per_byte_ms = number(o, "per_byte_ms", where);
        m.fixed_ms = number(o, "fixed_ms", where);
        m.train_samples = integer(o, "train_samples", where);
        m.heldout_samples = integer(o, "heldout_samples", where);
        m.heldout_mape = number(o, "heldout_mape", where);
        if (!cal.f32_ops.emplace(m.key, m).second)
          throw Corrupt{"two models for '" + m.key + "' in 'f32_ops'"};
      }
    }
    if (j.contains("made")) {
      const json& made = j["made"];
      CalibrationRecord& r = cal.record;
      r.recorded = true;
      r.repeats = integer(made, "repeats", "made");
      r.cores = integer(made, "cores", "made");
      r.measurements = integer(made, "measurements", "made");
      r.redone = integer(made, "redone", "made");
      r.load = number(made, "load", "made");
      r.max_load = number(made, "max_load", "made");
      r.repeat_spread = number(made, "repeat_spread", "made");
      r.max_repeat_spread = number(made, "max_repeat_spread", "made");
      r.shape_spread = number(made, "shape_spread", "made");
      const json& limits = field(made, "limits", "made");
      r.max_load_fraction = number(limits, "max_load_fraction", "made.limits");
      r.max_spread = number(limits, "max_spread", "made.limits");
      r.max_shape_spread = number(limits, "max_shape_spread", "made.limits");
    }
    check_plausible(cal);
  } catch (const Corrupt& c) {
    return problem(CalibrationProblem::corrupt, "is corrupt (" + c.what + ")");
  } catch (const json::exception& e) {
    return problem(CalibrationProblem::corrupt, "is corrupt (" + json_reason(e) + ")");
  }
  out = std::move(cal);
  return {};
}

CalibrationCheck read_calibration(const std::string& path, const BackendIdentity& machine,
                                  Calibration& out, const std::string& campo_version) {
  Calibration cal;
  if (CalibrationCheck check = read_calibration_file(path, machine.kind, cal);
      check.problem != CalibrationProblem::none)
    return check;
  auto problem = [&](CalibrationProblem p, const std::string& what) {
    return CalibrationCheck{p, with_advice(path, what, machine.kind), what};
  };
  // Another machine's file: timings do not transfer. The kind first, then the fields that
  // are not versions, this machine's and then any only the file has.
  const BackendIdentity& file = cal.machine;
  if (file.kind != machine.kind)
    return problem(CalibrationProblem::foreign,
                   "was made for device " + file.kind + ", not " + machine.kind);
  auto differs = [](const BackendIdentity::Field* there, const BackendIdentity::Field& here) {
    return !there || there->value != here.value;
  };
  for (const BackendIdentity::Field& here : machine.fields) {
    const BackendIdentity::Field* there = file.find(here.name);
    if (here.is_version || !differs(there, here)) continue;
    if (!there && !here.absent_means.empty() && here.value == here.absent_means) continue;
    return problem(CalibrationProblem::foreign,
                   "was made on another machine (" + here.name + " " + quoted(there) +
                       " in the file, '" + here.value + "' here" +
                       (here.set_by.empty() ? "" : ", set by " + here.set_by) + ")");
  }
  for (const BackendIdentity::Field& there : file.fields)
    if (!machine.find(there.name))
      return problem(CalibrationProblem::foreign, "was made on another machine (" + there.name +
                                                      " '" + there.value +
                                                      "' in the file, none here)");
  // Same machine, other software: kernels (and so timings) may have changed.
  if (cal.campo_version != campo_version)
    return problem(CalibrationProblem::stale, "is stale (made by campo " + cal.campo_version +
                                                  ", this is campo " + campo_version + ")");
  for (const BackendIdentity::Field& here : machine.fields) {
    const BackendIdentity::Field* there = file.find(here.name);
    if (here.is_version && differs(there, here))
      return problem(CalibrationProblem::stale, "is stale (made with " + here.name + " " +
                                                    quoted(there) + ", this run has '" +
                                                    here.value + "')");
  }
  cal.machine = machine;  // the same values, with what the backend says of each
  out = std::move(cal);
  return {};
}

Calibration load_calibration(const std::string& path, const Backend& backend) {
  Calibration cal;
  const CalibrationCheck check = read_calibration(path, backend.identity(), cal);
  CAMPO_CHECK(check.problem == CalibrationProblem::none, check.message);
  return cal;
}

bool may_run_low(const Node& n, const AmpLists& lists) {
  const AmpList l = lists.classify(n.kind);
  return (l == AmpList::allow || l == AmpList::infer || l == AmpList::clear) &&
         n.kind != OpKind::Variable && n.kind != OpKind::Placeholder;
}

namespace {

NodeFeatures features_with_counters(const Graph& g, NodeId id, const Calibration& cal,
                                    const std::vector<CounterValues>& counters) {
  return node_features(g, id, cal.alignment,
                       size_t(id) < counters.size() ? counters[size_t(id)] : unread_counters());
}

}  // namespace

Agreement f32_agreement(const Graph& g, const std::vector<double>& fp32_ms,
                        const Calibration& cal) {
  std::vector<double> measured, predicted;
  for (NodeId id = 0; id < g.num_nodes() && size_t(id) < fp32_ms.size(); ++id) {
    const F32Model* m = cal.f32_model_for(g.node(id).kind);
    if (!m || fp32_ms[size_t(id)] <= 0) continue;
    measured.push_back(fp32_ms[size_t(id)]);
    predicted.push_back(m->predict_ms(node_features(g, id, cal.alignment)));
  }
  return agreement_of(measured, predicted);
}

CalibrationFit calibration_fit(const Agreement& a, const Calibration& cal) {
  CalibrationFit fit;
  fit.nodes = a.nodes;
  fit.median_ratio = a.median_ratio;
  fit.total_ratio = a.total_ratio;
  char rule[64];
  std::snprintf(rule, sizeof rule, "within %gx..%gx", kMinFitRatio, kMaxFitRatio);
  if (cal.f32_ops.empty()) {
    fit.verdict = CalibrationFit::Verdict::unchecked;
    fit.line = "cost-aware: the calibration (made " + cal.created +
               ") has no f32 models, so this run cannot check it against its measured times; "
               "`campo calibrate` makes one that can be checked";
  } else if (!a.checked()) {
    fit.verdict = CalibrationFit::Verdict::unchecked;
    char line[200];
    std::snprintf(line, sizeof line,
                  "cost-aware: calibration not checked: %d nodes of this graph have an f32 model "
                  "and take %g ms or more (the check needs %d)",
                  a.nodes, kMinAgreementMs, kMinAgreementNodes);
    fit.line = line;
  } else if (a.fits()) {
    fit.verdict = CalibrationFit::Verdict::fits;
    fit.line = "cost-aware: calibration fits this run: measured f32 node times / predicted " +
               a.describe() + " (" + rule + ")";
  } else {
    fit.verdict = CalibrationFit::Verdict::misfit;
    fit.line =
        "cost-aware: calibration not trusted for this run: measured f32 node times / "
        "predicted " +
        a.describe() + ", not " + rule +
        "; the profiling step times both precisions instead (`campo calibrate --check` "
        "says whether to recalibrate)";
  }
  return fit;
}

bool uses_counters(const Calibration& cal) {
  return std::any_of(cal.ops.begin(), cal.ops.end(),
                     [](const auto& op) { return op.second.uses_counters(); });
}

std::vector<char> untrusted_nodes(const Graph& g, const Calibration& cal, const AmpLists& lists,
                                  const std::vector<CounterValues>& counters) {
  std::vector<char> out(size_t(g.num_nodes()), 0);
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    if (!may_run_low(g.node(id), lists)) continue;
    const NodeFeatures f = features_with_counters(g, id, cal, counters);
    const OpModel* m = cal.model_for(g.node(id).kind, f);
    const double mape = m ? m->for_features(f).heldout_mape : -1;
    out[size_t(id)] = mape < 0 || mape > kUntrustedMapePercent;
  }
  return out;
}

CostTable predict_costs(const Graph& g, const std::vector<double>& fp32_ms, const Calibration& cal,
                        const AmpLists& lists, const std::vector<CounterValues>& counters) {
  CostTable costs;
  costs.nodes.resize(size_t(g.num_nodes()));
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    const double t32 = size_t(id) < fp32_ms.size() ? fp32_ms[size_t(id)] : 0.0;
    NodeCost& c = costs.nodes[size_t(id)];
    c.fp32_ms = c.low_ms = t32;
    if (!may_run_low(n, lists) || t32 <= 0) continue;  // not in the lists, or not run at all
    const NodeFeatures f = features_with_counters(g, id, cal, counters);
    if (const OpModel* m = cal.model_for(n.kind, f)) {
      const NodeShape shape = node_shape(g, id);
      c.low_ms = m->predict_low_ms(f, t32, &shape);
    }
  }
  costs.cast = cal.cast;
  if (cal.cast_to_low.samples > 0 && cal.cast_to_f32.samples > 0) {  // per direction
    costs.cast = cal.cast_to_low.model;
    costs.cast_to_f32 = cal.cast_to_f32.model;
  }
  return costs;
}

}  // namespace campo
