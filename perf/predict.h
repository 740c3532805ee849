// `campo predict`: a training step's time on a device you do not have, from a per-node
// profile measured on one you have (`campo train --profile-out`), after Habitat (Yu et al.,
// USENIX ATC 2021). Each node's measured time is scaled from the origin device to the target
// by its roofline position (wave scaling without per-kernel counters):
//
//   t_target = t_origin x (B_o / B_t)^gamma x (P_o / P_t)^(1 - gamma)
//
// B the memory bandwidth (for a node that is not GEMM-like, the rate element-wise work of
// each of its dtypes streams at: DeviceModel::stream_gbs, traffic_ms), P the peak FLOP rate
// of the node's kind on each device (the low-precision peak for a GEMM-like node computing
// in f16/bf16, else the f32 peak), and
// gamma in [0, 1] how memory-bound the node is on the target, from its arithmetic intensity
// I = FLOPs / bytes (graph/flops.h; bytes: every input and output once) against the
// target's ridge point R = P_t / B_t, as Habitat interpolates it: gamma = 1 - I / (2R) for
// I <= R, R / (2I) above, 1 for a node without FLOPs. Devices come from a table of published
// specifications (perf/devices.json, built in; --devices FILE for one's own) or, for the CPU
// a profile was measured on, from measuring it (measure_this_cpu) when the profile is written.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "amp/cost_aware.h"
#include "graph/graph.h"
#include "runtime/backend.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"
#include "train/loop_options.h"

namespace campo {

// One device of the table.
struct DeviceModel {
  std::string name;                     // what --device names it by
  std::string kind;                     // "gpu" or "cpu"
  std::string full_name;                // for people
  std::string source;                   // where the figures come from
  int units = 0;                        // SMs or cores
  double clock_mhz = 0;                 // informative
  std::map<DType, double> peak_gflops;  // f32, and the low precisions it computes natively
  // FP8 GEMMs (E4M3/E5M2 operands, f32 accumulation; "fp8" in the table's peak_gflops), dense;
  // 0: the device has no FP8 GEMM.
  double fp8_gflops = 0;
  double memory_gbs = 0;
  // The rate element-wise work streams at, per dtype, where it differs from memory_gbs: a
  // CPU that emulates bf16 converts every element (measure_stream_gbs). Unlisted: memory_gbs.
  std::map<DType, double> stream_gbs;
  double stream_for(DType dtype) const;
  // The peak for a node computing in `dtype` (GEMM-like: at its own precision's peak; other
  // nodes at the f32 peak); one error line where the device has no such precision.
  double peak_for(DType dtype, bool gemm) const;
  nlohmann::json to_json() const;
};

// A device table's devices (the format of perf/devices.json); `origin` names the text in
// error lines. Each entry is checked: a name, a kind, positive f32 peak and bandwidth.
std::vector<DeviceModel> parse_device_table(const std::string& text, const std::string& origin);
DeviceModel parse_device(const nlohmann::json& j, const std::string& origin);
// A device table file (--devices), read and parsed.
std::vector<DeviceModel> parse_device_table_file(const std::string& path);
// The table built into campo (perf/devices.json).
const std::vector<DeviceModel>& builtin_devices();
// The device called `name`; one error line naming the known ones otherwise.
const DeviceModel& find_device(const std::vector<DeviceModel>& table, const std::string& name);

// Habitat's gamma for a node of arithmetic intensity `intensity` (FLOPs per byte) on a
// device whose ridge point is `ridge` (FLOPs per byte); a node without FLOPs is 1.
double memory_weight(double flops, double bytes, double ridge);

// What a node reads and writes: bytes by dtype (every input and output once).
using Traffic = std::map<DType, double>;
double traffic_bytes(const Traffic& t);
// The ms `t` takes on `d`: a GEMM-like node's at the memory bandwidth, another node's bytes
// of each dtype at the rate that dtype streams at (stream_for): on a CPU that emulates bf16
// a Cast to bf16 converts its 2 output bytes per element, not its 4 input ones.
double traffic_ms(const Traffic& t, const DeviceModel& d, bool gemm);

// A node's gamma on `to` computing in `dtype`: memory_weight against the ridge of its peak
// and the bandwidth its traffic streams at there.
double node_gamma(double flops, const Traffic& traffic, DType dtype, bool gemm,
                  const DeviceModel& to);
double node_gamma(double flops, double bytes, DType dtype, bool gemm, const DeviceModel& to);
// A node's time on `to`, measured `ms` on `from` (the formula above), where it may compute
// in another precision than it was measured in: the memory term is the ratio of the two
// traffics' times (traffic_ms), the compute term that of the two precisions' peaks, and
// gamma is the node's on `to` with its traffic there. With one dtype's bytes on both sides
// it is the formula above.
double scale_node_time(double ms, double flops, const Traffic& from_traffic, DType from_dtype,
                       const Traffic& to_traffic, DType to_dtype, bool gemm,
                       const DeviceModel& from, const DeviceModel& to);
double scale_node_time(double ms, double flops, double bytes, DType dtype, bool gemm,
                       const DeviceModel& from, const DeviceModel& to);

// A recorded profile (campo train --profile-out), as predict and plan --for read it.
struct ProfiledValue {
  Shape shape;
  DType dtype = DType::f32;
};
struct ProfiledNode {
  int graph = 0;  // a GAN's D (0) and G (1) step graphs; else 0
  std::string name, op;
  OpKind kind{};
  DType dtype = DType::f32;  // its compute type
  std::vector<ProfiledValue> inputs, outputs;
  double flops = 0, bytes = 0;
  double ms = 0;           // per step: the median call's times the calls per step
  double ms_per_call = 0;  // the median call's
  // What it reads and writes as recorded, and with every floating value in `compute` (f32
  // or a low precision) and the others as recorded. A profile without values: its bytes in
  // its dtype.
  Traffic traffic() const;
  Traffic traffic_computing_in(DType compute) const;
};
struct RecordedProfile {
  std::string where;      // "--profile PATH", for error lines
  nlohmann::json header;  // every field but the nodes
  std::vector<ProfiledNode> nodes;
  // A header field as text, "?" where the profile does not say.
  std::string said(const char* key) const;
  // The device it was measured on: --from's entry of `table` when `from` is given, else
  // the profile's own device_model (a CPU's, measured when it was written); one error line
  // when neither names one.
  DeviceModel origin(const std::vector<DeviceModel>& table, const std::string& from) const;
};
RecordedProfile read_profile(const std::string& path);
// Writes a run's --profile-out (the format read_profile reads: version 1): what ran where
// (the run's fields, the device report's, the machine, the threads, oneDNN's ISA; on the
// CPU this CPU measured now, measure_this_cpu, as the origin predict scales from) and every
// node's time over the profiled steps.
void write_profile(const std::string& path, const StepProfile& profile);

// `campo plan|bench --for DEVICE --profile FILE [--from NAME] [--devices FILE]`: the
// cost-aware plan for DEVICE from per-node costs predicted from a profile, instead of costs
// measured or calibrated where the plan runs.
struct PlanForOptions {
  std::string device;        // --for: the target, by name; empty: not asked for
  std::string profile_path;  // --profile
  std::string from;          // --from (default: the profile's own device model)
  std::string devices_path;  // --devices
  bool active() const { return !device.empty(); }
};
// Option checks before any work: --for needs --profile, and the files can be read.
void check_plan_for_options(const PlanForOptions& o);
// The table --devices names, else the built-in one.
std::vector<DeviceModel> device_table(const std::string& devices_path);

// Each node's f32 and `low` time on `to` for the cost-aware policy (node ids as g's), from
// the profile's nodes of the same names, each measured in the precision its run gave it and
// scaled to both (scale_node_time); leaves cost nothing. The cast model: a fixed cost, the
// profile's cheapest node per call (what dispatching a kernel costs where it was measured),
// plus its bytes (4 + 2 per element) at `to`'s rate for the cast's destination type. One
// error line naming the node when g has a node the profile lacks or whose input shapes
// differ: a profile of another model, batch or input size.
// Only the nodes a step runs to compute `fetches` are looked for (live_nodes); the others
// cost nothing.
// With `fp8`, each GEMM-like node (is_quantizable_gemm) also gets its FP8 time on `to`
// (NodeCost::fp8_ms, predict_fp8_gemm), where `to` has an FP8 peak.
CostTable predict_cost_table(const Graph& g, const std::vector<ValueId>& fetches,
                             const RecordedProfile& profile, const DeviceModel& from,
                             const DeviceModel& to, DType low, bool fp8 = false);

// A GEMM-like node's time on `to` with FP8 operands (the "fp8" format of runtime/gemm_quant.h:
// each operand quantized every step, the product accumulated and written in f32), from its
// time `ms` measured on `from` as scale_node_time scales it: the product at to's FP8 peak,
// its operands read as one byte an element and its output written as four. Quantizing costs
// one kernel per operand (`launch_ms` each) that reads the f32 operand and writes its codes,
// the amax taken in the same pass (delayed scaling, Transformer Engine's default; current
// scaling would read it once more): 5 bytes an element at to's memory bandwidth. Each GEMM
// node quantizes its own operands, as campo's graph runs them (a weight read by the forward
// and the data-gradient GEMM is quantized by each). Both infinite where `to` has no FP8 GEMM.
struct Fp8GemmTime {
  double gemm_ms = 0, quantize_ms = 0;
  double total() const { return gemm_ms + quantize_ms; }
};
Fp8GemmTime predict_fp8_gemm(double ms, double flops, const Traffic& from_traffic, DType from_dtype,
                             double operand_elements, double output_elements,
                             const DeviceModel& from, const DeviceModel& to, double launch_ms);

// This CPU as the process runs it now (its OpenMP threads, oneDNN's ISA): the f32 and bf16
// GEMM peaks through campo's MatMul kernel, the bandwidth of campo's f32 Add kernel over
// buffers far larger than the caches, and the rate its bf16 Add streams at. About a second.
DeviceModel measure_this_cpu(std::shared_ptr<Backend> backend);

struct PredictOptions {
  std::string profile_path;  // --profile: a campo train --profile-out file
  std::string device;        // --device: the target, by name
  std::string from;          // --from: the origin, by name (default: the profile's own)
  std::string devices_path;  // --devices: a table to use instead of the built-in one
  std::string json_path;     // --json: the per-node prediction
  // --origin-calibration / --target-calibration (both or neither): each device's calibration
  // (campo calibrate on it). A low-precision node is then scaled by the ratio of the times
  // the two calibrations predict for its shape (its op model, shape fits included, given the
  // f32 time of the calibration's f32 model) instead of by the roofline, and a Cast by the
  // ratio of their cast fits of its direction: per-shape efficiency in place of the one peak
  // ratio. Ops either calibration lacks, and f32 nodes, as before; the table says which way
  // each op was scaled.
  std::string origin_calibration, target_calibration;
};
void check_predict_options(const PredictOptions& o);
// Reads the profile, predicts every node on the target, prints the table per op kind and
// the total; writes the JSON. Returns the predicted ms per step.
double run_predict(const PredictOptions& o, std::ostream& out);

}  // namespace campo
