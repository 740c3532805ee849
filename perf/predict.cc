#include "perf/predict.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <ostream>

#include "amp/calibration.h"
#include "datasets/text_file.h"
#include "graph/flops.h"
#include "ops/kernel.h"
#include "ops/op.h"
#include "perf/roofline.h"
#include "runtime/atomic_file.h"
#include "runtime/check.h"
#include "runtime/cpu_backend.h"
#include "runtime/file_check.h"

namespace campo {

namespace {

using json = nlohmann::json;

// perf/devices.json, as CMake wrote it into a raw string literal.
const char kBuiltinDevices[] =
#include "devices_json.inc"
    ;

json parse_json(const std::string& text, const std::string& origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    std::string why = e.what();
    if (size_t p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
    CAMPO_FAIL(origin, ": not JSON (", why, ")");
  }
}

// The number at `key` of object `j`, positive unless `zero_ok`; one error line otherwise.
double number(const json& j, const char* key, const std::string& where, bool zero_ok = false) {
  CAMPO_CHECK(j.is_object() && j.contains(key) && j[key].is_number(), where, ": '", key,
              "' is missing or not a number");
  const double v = j[key].get<double>();
  CAMPO_CHECK(std::isfinite(v) && (zero_ok ? v >= 0 : v > 0), where, ": '", key, "' is ", v,
              zero_ok ? ", not zero or more" : ", not positive");
  return v;
}

// The most a device table may say, far above any device of 2026 (H200: 4.8 TB/s, about 4
// PFLOP/s dense FP8), so that a typo or a hostile file (1e300) is refused rather than
// scaled into every prediction: 100 PFLOP/s, 1 PB/s, 100 GHz.
constexpr double kMostGflops = 1e8, kMostGbs = 1e6, kMostMhz = 1e5;

// number() of a rate that must also be at most `most`.
double rate(const json& j, const char* key, const std::string& where, double most,
            bool zero_ok = false) {
  const double v = number(j, key, where, zero_ok);
  CAMPO_CHECK(v <= most, where, ": '", key, "' is ", v, ", more than any device (at most ", most,
              ")");
  return v;
}

std::string text(const json& j, const char* key, const std::string& where) {
  CAMPO_CHECK(
      j.is_object() && j.contains(key) && j[key].is_string() && !j[key].get<std::string>().empty(),
      where, ": '", key, "' is missing or not a string");
  return j[key].get<std::string>();
}

bool low_precision(DType d) { return d == DType::f16 || d == DType::bf16; }

// f32, f16 or bf16 by the names parse_dtype takes; nothing for another name or dtype.
std::optional<DType> precision_named(const std::string& name) {
  try {
    const DType d = parse_dtype(name);
    if (d == DType::f32 || low_precision(d)) return d;
  } catch (const Error&) {
  }
  return std::nullopt;
}

}  // namespace

double DeviceModel::peak_for(DType dtype, bool gemm) const {
  const DType key = gemm && low_precision(dtype) ? dtype : DType::f32;
  auto it = peak_gflops.find(key);
  CAMPO_CHECK(it != peak_gflops.end(), "device ", name, " has no ", dtype_name(key),
              " peak in its table entry (it does not compute in ", dtype_name(key),
              "): predict a profile measured in fp32 or in a precision it has");
  return it->second;
}

double DeviceModel::stream_for(DType dtype) const {
  auto it = stream_gbs.find(dtype);
  return it != stream_gbs.end() ? it->second : memory_gbs;
}

json DeviceModel::to_json() const {
  json peaks = json::object(), streams = json::object();
  for (const auto& [d, g] : peak_gflops) peaks[dtype_name(d)] = g;
  if (fp8_gflops > 0) peaks["fp8"] = fp8_gflops;
  for (const auto& [d, g] : stream_gbs) streams[dtype_name(d)] = g;
  json j = {{"name", name},
            {"kind", kind},
            {"full_name", full_name},
            {"units", units},
            {"clock_mhz", clock_mhz},
            {"peak_gflops", peaks},
            {"memory_gbs", memory_gbs},
            {"source", source}};
  if (!stream_gbs.empty()) j["stream_gbs"] = streams;
  return j;
}

DeviceModel parse_device(const json& j, const std::string& origin) {
  DeviceModel d;
  d.name = text(j, "name", origin + ": a device");
  const std::string where = origin + ": device " + d.name;
  d.kind = text(j, "kind", where);
  CAMPO_CHECK(d.kind == "gpu" || d.kind == "cpu", where, ": kind must be gpu or cpu, got '", d.kind,
              "'");
  d.full_name = j.contains("full_name") && j["full_name"].is_string()
                    ? j["full_name"].get<std::string>()
                    : d.name;
  d.source = text(j, "source", where);
  const double units = number(j, "units", where);
  CAMPO_CHECK(units <= 1e6, where, ": 'units' is ", units, ", more SMs or cores than any device");
  d.units = int(units);
  d.clock_mhz = rate(j, "clock_mhz", where, kMostMhz, true);
  d.memory_gbs = rate(j, "memory_gbs", where, kMostGbs);
  CAMPO_CHECK(j.contains("peak_gflops") && j["peak_gflops"].is_object(), where,
              ": 'peak_gflops' is missing or not an object");
  for (const auto& [key, value] : j["peak_gflops"].items()) {
    if (key == "fp8") {  // a GEMM operand format, not a dtype (runtime/gemm_quant.h)
      d.fp8_gflops = rate(j["peak_gflops"], "fp8", where + ": peak_gflops", kMostGflops);
      continue;
    }
    const std::optional<DType> dt = precision_named(key);
    CAMPO_CHECK(dt.has_value(), where, ": peak_gflops has an unknown precision '", key, "'");
    d.peak_gflops[*dt] = rate(j["peak_gflops"], key.c_str(), where + ": peak_gflops", kMostGflops);
  }
  CAMPO_CHECK(d.peak_gflops.count(DType::f32), where, ": peak_gflops has no f32");
  if (j.contains("stream_gbs")) {
    CAMPO_CHECK(j["stream_gbs"].is_object(), where, ": 'stream_gbs' is not an object");
    for (const auto& [key, value] : j["stream_gbs"].items()) {
      const std::optional<DType> dt = precision_named(key);
      CAMPO_CHECK(dt.has_value(), where, ": stream_gbs has an unknown precision '", key, "'");
      d.stream_gbs[*dt] = rate(j["stream_gbs"], key.c_str(), where + ": stream_gbs", kMostGbs);
    }
  }
  return d;
}

std::vector<DeviceModel> parse_device_table(const std::string& table_text,
                                            const std::string& origin) {
  const json j = parse_json(table_text, origin);
  CAMPO_CHECK(
      j.is_object() && j.contains("devices") && j["devices"].is_array() && !j["devices"].empty(),
      origin, ": not a device table (an object whose 'devices' is a list of devices)");
  std::vector<DeviceModel> table;
  for (const json& e : j["devices"]) {
    table.push_back(parse_device(e, origin));
    for (size_t i = 0; i + 1 < table.size(); ++i)
      CAMPO_CHECK(table[i].name != table.back().name, origin, ": device ", table.back().name,
                  " is listed twice");
  }
  return table;
}

std::vector<DeviceModel> parse_device_table_file(const std::string& path) {
  return parse_device_table(read_text_file(path, "--devices file"), "--devices " + path);
}

const std::vector<DeviceModel>& builtin_devices() {
  static const std::vector<DeviceModel> table =
      parse_device_table(kBuiltinDevices, "the built-in device table");
  return table;
}

const DeviceModel& find_device(const std::vector<DeviceModel>& table, const std::string& name) {
  std::string known;
  for (const DeviceModel& d : table) {
    if (d.name == name) return d;
    known += (known.empty() ? "" : ", ") + d.name;
  }
  CAMPO_FAIL("unknown device '", name, "' (the table has ", known, ")");
}

double memory_weight(double flops, double bytes, double ridge) {
  if (flops <= 0) return 1.0;
  if (bytes <= 0) return 0.0;
  const double intensity = flops / bytes;
  return intensity <= ridge ? 1.0 - 0.5 * intensity / ridge : 0.5 * ridge / intensity;
}

double traffic_bytes(const Traffic& t) {
  double bytes = 0;
  for (const auto& [dtype, b] : t) bytes += b;
  return bytes;
}

double traffic_ms(const Traffic& t, const DeviceModel& d, bool gemm) {
  double ms = 0;
  for (const auto& [dtype, bytes] : t)
    ms += bytes / (gemm ? d.memory_gbs : d.stream_for(dtype)) * 1e-6;  // GB/s -> bytes per ms
  return ms;
}

double node_gamma(double flops, const Traffic& traffic, DType dtype, bool gemm,
                  const DeviceModel& to) {
  const double bytes = traffic_bytes(traffic), ms = traffic_ms(traffic, to, gemm);
  // The bandwidth this traffic streams at there; a node that moves nothing, memory's.
  const double bandwidth = bytes > 0 && ms > 0 ? bytes / ms * 1e-6 : to.memory_gbs;
  return memory_weight(flops, bytes, to.peak_for(dtype, gemm) / bandwidth);
}

double node_gamma(double flops, double bytes, DType dtype, bool gemm, const DeviceModel& to) {
  return node_gamma(flops, Traffic{{dtype, bytes}}, dtype, gemm, to);
}

double scale_node_time(double ms, double flops, const Traffic& from_traffic, DType from_dtype,
                       const Traffic& to_traffic, DType to_dtype, bool gemm,
                       const DeviceModel& from, const DeviceModel& to) {
  const double gamma = node_gamma(flops, to_traffic, to_dtype, gemm, to);
  const double memory_from = traffic_ms(from_traffic, from, gemm);
  const double memory_to = traffic_ms(to_traffic, to, gemm);
  // A node that moves no bytes (as recorded) scales by the bandwidths alone.
  const double memory =
      memory_from > 0 && memory_to > 0
          ? memory_to / memory_from
          : traffic_ms({{from_dtype, 1.0}}, from, gemm) / traffic_ms({{to_dtype, 1.0}}, to, gemm);
  const double compute = from.peak_for(from_dtype, gemm) / to.peak_for(to_dtype, gemm);
  return ms * std::pow(memory, gamma) * std::pow(compute, 1.0 - gamma);
}

Fp8GemmTime predict_fp8_gemm(double ms, double flops, const Traffic& from_traffic, DType from_dtype,
                             double operand_elements, double output_elements,
                             const DeviceModel& from, const DeviceModel& to, double launch_ms) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (to.fp8_gflops <= 0) return {kInf, kInf};
  DeviceModel fp8 = to;  // the product at the FP8 peak, its bytes at the memory's rate
  fp8.peak_gflops[DType::f32] = to.fp8_gflops;
  const Traffic traffic = {{DType::f32, operand_elements + 4 * output_elements}};
  constexpr double kQuantizeBytes = 5;  // read 4 (f32), write 1 (the code)
  return {
      scale_node_time(ms, flops, from_traffic, from_dtype, traffic, DType::f32, true, from, fp8),
      2 * launch_ms + operand_elements * kQuantizeBytes * 1e-6 / to.memory_gbs};
}

double scale_node_time(double ms, double flops, double bytes, DType dtype, bool gemm,
                       const DeviceModel& from, const DeviceModel& to) {
  const Traffic traffic = {{dtype, bytes}};
  return scale_node_time(ms, flops, traffic, dtype, traffic, dtype, gemm, from, to);
}

DeviceModel measure_this_cpu(std::shared_ptr<Backend> backend) {
  CAMPO_CHECK(backend->device().type == Device::cpu, "internal: measure_this_cpu on ",
              backend->device().str());
  DeviceModel d;
  const int threads = omp_get_max_threads();
  const bool native_bf16 = cpu_has_native_bf16() && backend->allows_native_low_precision();
  const bool native_f16 = cpu_has_native_f16() && backend->allows_native_f16();
  d.name = "this-cpu";
  d.kind = "cpu";
  d.full_name = backend->describe() + ", " + std::to_string(threads) + " thread(s), oneDNN ISA " +
                onednn_isa_name() + (native_bf16 ? ", native bf16" : ", bf16 emulated") +
                (native_f16 ? ", native f16" : ", f16 emulated");
  d.units = threads;
  constexpr int64_t kGemm = 1024;
  d.peak_gflops[DType::f32] = measure_gemm_peak(backend, DType::f32, kGemm, kGemm, kGemm, 5).gflops;
  for (DType low : {DType::bf16, DType::f16})  // as campo runs them: native or emulated
    d.peak_gflops[low] = measure_gemm_peak(backend, low, kGemm, kGemm, kGemm, 5).gflops;
  // Add over 3 x 64 MiB of f32 (far beyond the caches), and the same elements in bf16.
  constexpr int64_t kStream = int64_t(16) << 20;
  d.memory_gbs = measure_stream_gbs(backend, DType::f32, kStream, 5);
  d.stream_gbs[DType::bf16] = measure_stream_gbs(backend, DType::bf16, kStream, 5);
  d.source =
      "measured by campo when the profile was written: the peaks of a 1024^3 GEMM "
      "through campo's MatMul kernel (f32, bf16 and f16, best of 5) and the rates of its "
      "Add kernel over 16 Mi elements (f32: the memory bandwidth; bf16), best of 5";
  return d;
}

void check_predict_options(const PredictOptions& o) {
  CAMPO_CHECK(!o.profile_path.empty(), "--profile is required (a campo train --profile-out file)");
  CAMPO_CHECK(o.origin_calibration.empty() == o.target_calibration.empty(),
              "--origin-calibration and --target-calibration go together (each device's "
              "calibration)");
  if (!o.origin_calibration.empty()) {
    require_input_file(o.origin_calibration, "--origin-calibration file");
    require_input_file(o.target_calibration, "--target-calibration file");
  }
  CAMPO_CHECK(!o.device.empty(), "--device is required (the device to predict for)");
  require_input_file(o.profile_path, "--profile file");
  if (!o.devices_path.empty()) require_input_file(o.devices_path, "--devices file");
  if (!o.json_path.empty()) require_output_file(o.json_path, "--json file");
}

namespace {

Shape shape_of(const json& j, const std::string& where) {
  CAMPO_CHECK(j.is_array(), where, ": 'shape' is missing or not a list");
  Shape shape;
  for (const json& d : j) {
    CAMPO_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, where,
                ": a shape dimension is not a whole number >= 0");
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

DType dtype_of(const std::string& name, const std::string& where) {
  try {
    return parse_dtype(name);
  } catch (const Error&) {
    CAMPO_FAIL(where, ": unknown dtype '", name, "'");
  }
}

// A node's "inputs" or "outputs": absent in profiles of campo 0.3.0's first days (no shape
// checks then), else a list of {shape, dtype}.
std::vector<ProfiledValue> values_of(const json& e, const char* key, const std::string& where) {
  std::vector<ProfiledValue> values;
  if (!e.contains(key)) return values;
  CAMPO_CHECK(e[key].is_array(), where, ": '", key, "' is not a list");
  for (const json& v : e[key]) {
    CAMPO_CHECK(v.is_object(), where, ": an entry of '", key, "' is not an object");
    values.push_back({shape_of(v.contains("shape") ? v["shape"] : json(), where),
                      dtype_of(text(v, "dtype", where), where)});
  }
  return values;
}

std::vector<ProfiledNode> profile_nodes(const json& p, const std::string& where) {
  CAMPO_CHECK(p.contains("nodes") && p["nodes"].is_array(), where, ": 'nodes' is missing");
  std::vector<ProfiledNode> nodes;
  for (size_t i = 0; i < p["nodes"].size(); ++i) {
    const json& e = p["nodes"][i];
    const std::string at = where + ": node " + std::to_string(i);
    ProfiledNode n;
    if (e.is_object() && e.contains("graph")) n.graph = int(number(e, "graph", at, true));
    n.name = text(e, "name", at);
    n.op = text(e, "op", at);
    const std::optional<OpKind> kind = parse_op_kind(n.op);
    CAMPO_CHECK(kind.has_value(), at, ": unknown op '", n.op, "'");
    n.kind = *kind;
    n.dtype = dtype_of(text(e, "dtype", at), at);
    n.inputs = values_of(e, "inputs", at);
    n.outputs = values_of(e, "outputs", at);
    n.flops = number(e, "flops", at, true);
    n.bytes = number(e, "bytes", at, true);
    n.ms = number(e, "ms_per_step", at, true);
    n.ms_per_call = e.contains("ms_per_call") ? number(e, "ms_per_call", at, true) : n.ms;
    nodes.push_back(std::move(n));
  }
  CAMPO_CHECK(!nodes.empty(), where, ": no nodes (was the run profiled for at least one step?)");
  return nodes;
}

}  // namespace

namespace {

Traffic traffic_of(const ProfiledNode& n, std::optional<DType> compute) {
  if (n.inputs.empty() && n.outputs.empty()) {  // an old profile: its bytes in its dtype
    if (!compute || !is_floating(n.dtype)) return {{n.dtype, n.bytes}};
    return {{*compute, n.bytes * double(dtype_size(*compute)) / double(dtype_size(n.dtype))}};
  }
  Traffic t;
  for (const std::vector<ProfiledValue>* values : {&n.inputs, &n.outputs})
    for (const ProfiledValue& v : *values) {
      double elements = 1;  // in double: a file's dimensions may overflow int64's product
      for (int64_t d : v.shape) elements *= double(d);
      const DType dtype = compute && is_floating(v.dtype) ? *compute : v.dtype;
      t[dtype] += elements * double(dtype_size(dtype));
    }
  return t;
}

}  // namespace

Traffic ProfiledNode::traffic() const { return traffic_of(*this, std::nullopt); }
Traffic ProfiledNode::traffic_computing_in(DType compute) const {
  return traffic_of(*this, compute);
}

std::string RecordedProfile::said(const char* key) const {
  if (!header.contains(key)) return "?";
  const json& v = header[key];
  return v.is_string() ? v.get<std::string>() : v.is_number() ? v.dump() : "?";
}

DeviceModel RecordedProfile::origin(const std::vector<DeviceModel>& table,
                                    const std::string& from) const {
  if (!from.empty()) return find_device(table, from);
  CAMPO_CHECK(header.contains("device_model") && header["device_model"].is_object(), where,
              " does not describe the device it was measured on (a GPU profile): name it with "
              "--from");
  return parse_device(header["device_model"], where);
}

void write_profile(const std::string& path, const StepProfile& p) {
  json j = p.run;
  j["format"] = "campo-profile";
  j["version"] = 1;
  j["campo_version"] = CAMPO_VERSION;
  j["precision"] = precision_name(p.precision);
  j["batch"] = p.batch;
  j["steps"] = p.steps;
  j.update(p.device);
  j["machine"] = p.backend->describe();
  j["threads"] = omp_get_max_threads();
  j["onednn_isa"] = onednn_isa_name();
  // The origin campo predict scales from: this CPU as the run used it, measured now; a GPU
  // is named with predict --from.
  if (p.backend->device().type == Device::cpu)
    j["device_model"] = measure_this_cpu(p.backend).to_json();
  j["nodes"] = p.nodes;
  double total = 0;
  for (const json& node : j["nodes"]) total += node["ms_per_step"].get<double>();
  j["total_ms_per_step"] = total;  // of the nodes' medians
  write_file_atomically(path, j.dump(1) + "\n");
}

RecordedProfile read_profile(const std::string& path) {
  RecordedProfile r;
  r.where = "--profile " + path;
  json p = parse_json(read_text_file(path, "--profile file"), r.where);
  CAMPO_CHECK(p.is_object() && p.contains("format") && p["format"] == "campo-profile", r.where,
              ": not a campo profile (campo train --profile-out writes one)");
  CAMPO_CHECK(p.contains("version") && p["version"] == 1, r.where,
              ": a profile format version this campo does not read (it reads version 1)");
  r.nodes = profile_nodes(p, r.where);
  p.erase("nodes");
  r.header = std::move(p);
  return r;
}

std::vector<DeviceModel> device_table(const std::string& devices_path) {
  return devices_path.empty() ? builtin_devices() : parse_device_table_file(devices_path);
}

namespace {

// A calibration given to predict, read without comparing it with this machine (it describes
// another device); one error line when it cannot be used.
Calibration predict_calibration(const std::string& path, const char* option) {
  Calibration cal;
  const CalibrationCheck check = read_calibration_file(path, "cpu", cal);
  CAMPO_CHECK(check.problem == CalibrationProblem::none, option, ": ", check.message);
  return cal;
}

// How predict scaled a node.
enum class Scaled : uint8_t { roofline, shape_ratios, cast_fits };
const char* scaled_name(Scaled s) {
  return s == Scaled::shape_ratios ? "calibrations"
         : s == Scaled::cast_fits  ? "cast fits"
                                   : "roofline";
}

// A profiled node's features as node_features computes them from a graph: the profile's
// FLOPs (graph/flops.h counts GEMM-like nodes as node_features does), every operand at 4
// bytes, output 0's elements, and the alignment of its channels or GEMM dimensions to the
// calibration's block, from its shape.
NodeFeatures profiled_features(const ProfiledNode& n, const NodeShape& shape, int alignment) {
  NodeFeatures f = {};
  for (int c = kFirstCounterFeature; c < kNumFeatures; ++c)
    f[size_t(c)] = std::numeric_limits<double>::quiet_NaN();
  double elements = 0, out0 = 0;
  for (const std::vector<ProfiledValue>* values : {&n.inputs, &n.outputs})
    for (const ProfiledValue& v : *values) {
      double e = 1;
      for (int64_t d : v.shape) e *= double(d);
      elements += e;
      if (values == &n.outputs && out0 == 0) out0 = e;
    }
  auto multiple = [&](double v) { return v > 0 && std::fmod(v, double(alignment)) == 0; };
  bool aligned = multiple(shape.dims[1]);
  if (shape.family == ShapeFamily::conv)
    aligned = multiple(shape.dims[1]) && multiple(shape.dims[2]);
  if (shape.family == ShapeFamily::gemm)
    aligned = multiple(shape.dims[1]) && multiple(shape.dims[2]) && multiple(shape.dims[3]);
  f[size_t(Feature::flops)] = n.flops;
  f[size_t(Feature::bytes)] = 4 * elements;
  f[size_t(Feature::intensity)] = elements > 0 ? n.flops / (4 * elements) : 0.0;
  f[size_t(Feature::elements)] = out0;
  f[size_t(Feature::aligned)] = aligned ? 1.0 : 0.0;
  return f;
}

// A profiled node's low-precision time as calibration `cal` predicts it from its shape alone:
// its op model, given the f32 time the calibration's f32 model predicts. Nothing when the
// calibration has no model or no f32 model of the op.
std::optional<double> calibrated_low_ms(const Calibration& cal, const ProfiledNode& n,
                                        const NodeShape& shape) {
  if (!shape.known()) return std::nullopt;
  const NodeFeatures f = profiled_features(n, shape, cal.alignment);
  const OpModel* m = cal.model_for(n.kind, f);
  const F32Model* f32 = cal.f32_model_for(n.kind);
  if (!m || !f32) return std::nullopt;
  const double t = m->predict_low_ms(f, f32->predict_ms(f), &shape);
  if (!(t > 0)) return std::nullopt;
  return t;
}

}  // namespace

double run_predict(const PredictOptions& o, std::ostream& out) {
  check_predict_options(o);
  const RecordedProfile profile = read_profile(o.profile_path);
  const std::vector<DeviceModel> table = device_table(o.devices_path);
  const DeviceModel& to = find_device(table, o.device);
  const DeviceModel from = profile.origin(table, o.from);
  const std::vector<ProfiledNode>& nodes = profile.nodes;
  const bool calibrated = !o.origin_calibration.empty();
  Calibration origin_cal, target_cal;
  if (calibrated) {
    origin_cal = predict_calibration(o.origin_calibration, "--origin-calibration");
    target_cal = predict_calibration(o.target_calibration, "--target-calibration");
    CAMPO_CHECK(origin_cal.low == target_cal.low, "--origin-calibration is of ",
                dtype_name(origin_cal.low), ", --target-calibration of ",
                dtype_name(target_cal.low), ": calibrate both devices in one low precision");
  }

  struct Sum {
    int nodes = 0;
    double origin = 0, predicted = 0;
    std::map<Scaled, int> scaled;  // nodes by how they were scaled
  };
  std::map<std::string, Sum> by_op;
  Sum total;
  json per_node = json::array();
  for (const ProfiledNode& n : nodes) {
    const bool gemm = is_gemm_op(n.kind);
    const Traffic traffic = n.traffic();
    double predicted =
        scale_node_time(n.ms, n.flops, traffic, n.dtype, traffic, n.dtype, gemm, from, to);
    Scaled how = Scaled::roofline;
    if (calibrated && n.kind == OpKind::Cast && !n.inputs.empty() && !n.outputs.empty() &&
        (n.outputs[0].dtype == origin_cal.low || n.inputs[0].dtype == origin_cal.low)) {
      // A cast of the calibrations' low precision: its direction's fits, at its size.
      const bool to_low = n.outputs[0].dtype == origin_cal.low;
      double elements = 1;
      for (int64_t d : n.outputs[0].shape) elements *= double(d);
      const CastFit& a = to_low ? origin_cal.cast_to_low : origin_cal.cast_to_f32;
      const CastFit& b = to_low ? target_cal.cast_to_low : target_cal.cast_to_f32;
      const double there = a.model.cost_ms(int64_t(elements));
      if (a.samples > 0 && b.samples > 0 && there > 0) {
        predicted = n.ms * std::max(0.0, b.model.cost_ms(int64_t(elements))) / there;
        how = Scaled::cast_fits;
      }
    } else if (calibrated && n.dtype == origin_cal.low) {
      // Anchored on its measured time: scaled by how much faster the target's calibration
      // predicts this shape than the origin's does.
      std::vector<Shape> in, outs;
      for (const ProfiledValue& v : n.inputs) in.push_back(v.shape);
      for (const ProfiledValue& v : n.outputs) outs.push_back(v.shape);
      const NodeShape shape = node_shape(n.kind, in, outs);
      const std::optional<double> there = calibrated_low_ms(origin_cal, n, shape);
      const std::optional<double> here = calibrated_low_ms(target_cal, n, shape);
      if (there && here) {
        predicted = n.ms * *here / *there;
        how = Scaled::shape_ratios;
      }
    }
    Sum& s = by_op[n.op];
    ++s.nodes;
    ++s.scaled[how];
    s.origin += n.ms;
    s.predicted += predicted;
    ++total.nodes;
    total.origin += n.ms;
    total.predicted += predicted;
    per_node.push_back({{"name", n.name},
                        {"op", n.op},
                        {"dtype", dtype_name(n.dtype)},
                        {"gamma", node_gamma(n.flops, traffic, n.dtype, gemm, to)},
                        {"ms_origin", n.ms},
                        {"ms_predicted", predicted},
                        {"scaled_by", scaled_name(how)}});
  }
  const std::string model = profile.said("model");
  out << "predict: " << model << " (" << profile.said("precision") << ", batch "
      << profile.said("batch") << "), " << total.nodes << " nodes profiled over "
      << profile.said("steps") << " steps\n";
  out << "from: " << from.name << " (" << from.full_name << "): f32 "
      << from.peak_for(DType::f32, false) << " GFLOP/s, " << from.memory_gbs << " GB/s\n";
  out << "to:   " << to.name << " (" << to.full_name << "): f32 " << to.peak_for(DType::f32, false)
      << " GFLOP/s, " << to.memory_gbs << " GB/s\n";
  std::vector<std::pair<std::string, Sum>> rows(by_op.begin(), by_op.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.origin > b.second.origin; });
  char line[256];
  if (calibrated)
    out << "calibrations: " << o.origin_calibration << " (origin, made " << origin_cal.created
        << "), " << o.target_calibration << " (target, made " << target_cal.created
        << "); low-precision nodes scaled by the ratio of their "
           "times the two predict for their shape, casts by the cast fits, the rest (and ops "
           "either lacks) by the roofline\n";
  std::snprintf(line, sizeof line, "%-36s %6s %12s %12s %8s  %s\n", "op", "nodes", "measured ms",
                "predicted ms", "ratio", calibrated ? "scaled by (nodes)" : "");
  out << line;
  json ops = json::object();
  for (const auto& [op, s] : rows) {
    std::string how;
    for (const auto& [scaled, count] : s.scaled)
      how += (how.empty() ? "" : ", ") + std::string(scaled_name(scaled)) +
             (s.scaled.size() > 1 ? " (" + std::to_string(count) + ")" : "");
    std::snprintf(line, sizeof line, "%-36s %6d %12.3f %12.3f %8.3f  %s\n", op.c_str(), s.nodes,
                  s.origin, s.predicted, s.origin > 0 ? s.predicted / s.origin : 0.0,
                  calibrated ? how.c_str() : "");
    out << line;
    ops[op] = {{"nodes", s.nodes}, {"ms_origin", s.origin}, {"ms_predicted", s.predicted}};
  }
  std::snprintf(line, sizeof line, "%-36s %6d %12.3f %12.3f %8.3f\n", "step (every node)",
                total.nodes, total.origin, total.predicted,
                total.origin > 0 ? total.predicted / total.origin : 0.0);
  out << line;
  if (!o.json_path.empty()) {
    const json j = {{"model", model},
                    {"from", from.to_json()},
                    {"to", to.to_json()},
                    {"ms_per_step_origin", total.origin},
                    {"ms_per_step_predicted", total.predicted},
                    {"by_op", ops},
                    {"nodes", per_node}};
    write_file_atomically(o.json_path, j.dump(1) + "\n");
    out << "wrote " << o.json_path << "\n";
  }
  return total.predicted;
}

void check_plan_for_options(const PlanForOptions& o) {
  if (!o.active()) {
    CAMPO_CHECK(o.profile_path.empty() && o.from.empty() && o.devices_path.empty(),
                "--profile, --from and --devices go with --for (the device to plan for)");
    return;
  }
  CAMPO_CHECK(!o.profile_path.empty(),
              "--for needs --profile: a campo train --profile-out file of this model, recorded on "
              "a device you have");
  require_input_file(o.profile_path, "--profile file");
  if (!o.devices_path.empty()) require_input_file(o.devices_path, "--devices file");
}

namespace {

std::string shapes_text(const std::vector<Shape>& shapes) {
  std::string s;
  for (const Shape& shape : shapes) s += (s.empty() ? "" : ", ") + compact_shape(shape);
  return s;
}

}  // namespace

CostTable predict_cost_table(const Graph& g, const std::vector<ValueId>& fetches,
                             const RecordedProfile& profile, const DeviceModel& from,
                             const DeviceModel& to, DType low, bool fp8) {
  CAMPO_CHECK(low_precision(low), "internal: predict_cost_table for ", dtype_name(low));
  CAMPO_CHECK(to.peak_gflops.count(low), "device ", to.name, " has no ", dtype_name(low),
              " in its table entry (it does not compute in it): plan for it with the other "
              "--low-precision");
  const std::string of =
      "(the profile: model " + profile.said("model") + ", batch " + profile.said("batch") + ")";
  std::map<std::string, const ProfiledNode*> by_name;
  double fixed_ms = std::numeric_limits<double>::infinity();
  for (const ProfiledNode& n : profile.nodes) {
    CAMPO_CHECK(n.graph == 0, profile.where, " holds two step graphs ", of,
                ": --for plans models of one step graph (classifiers and BERT), not DCGAN");
    by_name.emplace(n.name, &n);
    if (n.ms_per_call > 0) fixed_ms = std::min(fixed_ms, n.ms_per_call);
  }
  // Dispatching a kernel costs what the cheapest node of the profile cost per call.
  const double fixed = std::isfinite(fixed_ms) ? fixed_ms : 0.0;
  const std::vector<char> live = live_nodes(g, fetches);
  CostTable t;
  t.nodes.resize(size_t(g.num_nodes()));
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (!live[size_t(id)] || n.kind == OpKind::Variable || n.kind == OpKind::Placeholder) continue;
    auto it = by_name.find(n.name);
    CAMPO_CHECK(it != by_name.end(), profile.where, " has no node '", n.name,
                "' of this training step: it was recorded from another model or "
                "configuration ",
                of);
    const ProfiledNode& p = *it->second;
    CAMPO_CHECK(p.kind == n.kind, profile.where, ": node '", n.name, "' is a ", p.op,
                " there but a ", op_name(n.kind), " here: another model ", of);
    std::vector<Shape> here, there;
    for (ValueId v : n.inputs) here.push_back(g.value(v).shape);
    for (const ProfiledValue& v : p.inputs) there.push_back(v.shape);
    CAMPO_CHECK(p.inputs.empty() || here == there, profile.where, ": node '", n.name, "' reads ",
                shapes_text(there), " there but ", shapes_text(here),
                " here: the profile was recorded with another batch or input size ", of);
    const bool gemm = is_gemm_op(n.kind);
    auto on_target = [&](DType compute) {
      if (!is_floating(p.dtype)) compute = p.dtype;  // indices, labels: as measured
      return scale_node_time(p.ms, p.flops, p.traffic(), p.dtype, p.traffic_computing_in(compute),
                             compute, gemm, from, to);
    };
    NodeCost& c = t.nodes[size_t(id)] = {on_target(DType::f32), on_target(low)};
    if (fp8 && is_quantizable_gemm(n.kind) && is_floating(p.dtype)) {
      const double operands = double(shape_numel(here[0]) + shape_numel(here[1]));
      const Fp8GemmTime f =
          predict_fp8_gemm(p.ms, p.flops, p.traffic(), p.dtype, operands,
                           double(shape_numel(g.value(n.outputs[0]).shape)), from, to, fixed);
      c.fp8_ms = f.total();
      c.fp8_quantize_ms = f.quantize_ms;
    }
  }
  // A cast reads 4 bytes and writes 2 per element (or the reverse), at the rate element-wise
  // work of its destination type streams at on the target, plus one dispatch (`fixed`).
  constexpr double kCastBytes = 6;
  t.cast = {fixed, kCastBytes * 1e-6 / to.stream_for(low)};  // GB/s -> ms per element
  t.cast_to_f32 = CastCostModel{fixed, kCastBytes * 1e-6 / to.memory_gbs};
  return t;
}

}  // namespace campo
