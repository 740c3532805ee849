// `campo predict`: a training step's time on a device you do not have, from a per-node
// profile measured on one you have (`campo train --profile-out`), after Habitat (Yu et al.,
// USENIX ATC 2021). Each node's measured time is scaled from the origin device to the target
// by its roofline position (wave scaling without per-kernel counters):
//
//   t_target = t_origin x (B_o / B_t)^gamma x (P_o / P_t)^(1 - gamma)
//
// B the memory bandwidth (for a node that is not GEMM-like, the rate element-wise work of
// its dtype streams at: DeviceModel::stream_gbs), P the peak FLOP rate of the node's kind on
// each device (the low-precision peak for a GEMM-like node computing in f16/bf16, else the
// f32 peak), and
// gamma in [0, 1] how memory-bound the node is on the target, from its arithmetic intensity
// I = FLOPs / bytes (graph/flops.h; bytes: every input and output once) against the
// target's ridge point R = P_t / B_t, as Habitat interpolates it: gamma = 1 - I / (2R) for
// I <= R, R / (2I) above, 1 for a node without FLOPs. Devices come from a table of published
// specifications (train/devices.json, built in; --devices FILE for one's own) or, for the CPU
// a profile was measured on, from measuring it (measure_this_cpu) when the profile is written.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/dtype.h"

namespace campo {

// One device of the table.
struct DeviceModel {
  std::string name;       // what --device names it by
  std::string kind;       // "gpu" or "cpu"
  std::string full_name;  // for people
  std::string source;     // where the figures come from
  int units = 0;          // SMs or cores
  double clock_mhz = 0;   // informative
  std::map<DType, double> peak_gflops;  // f32, and the low precisions it computes natively
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

// A device table's devices (the format of train/devices.json); `origin` names the text in
// error lines. Each entry is checked: a name, a kind, positive f32 peak and bandwidth.
std::vector<DeviceModel> parse_device_table(const std::string& text, const std::string& origin);
DeviceModel parse_device(const nlohmann::json& j, const std::string& origin);
// A device table file (--devices), read and parsed.
std::vector<DeviceModel> parse_device_table_file(const std::string& path);
// The table built into campo (train/devices.json).
const std::vector<DeviceModel>& builtin_devices();
// The device called `name`; one error line naming the known ones otherwise.
const DeviceModel& find_device(const std::vector<DeviceModel>& table, const std::string& name);

// Habitat's gamma for a node of arithmetic intensity `intensity` (FLOPs per byte) on a
// device whose ridge point is `ridge` (FLOPs per byte); a node without FLOPs is 1.
double memory_weight(double flops, double bytes, double ridge);
// A node's gamma on `to`: memory_weight against the ridge of its peak and bandwidth there.
double node_gamma(double flops, double bytes, DType dtype, bool gemm, const DeviceModel& to);
// A node's time on `to`, measured `ms` on `from` (the formula above).
double scale_node_time(double ms, double flops, double bytes, DType dtype, bool gemm,
                       const DeviceModel& from, const DeviceModel& to);

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
};
void check_predict_options(const PredictOptions& o);
// Reads the profile, predicts every node on the target, prints the table per op kind and
// the total; writes the JSON. Returns the predicted ms per step.
double run_predict(const PredictOptions& o, std::ostream& out);

}  // namespace campo
