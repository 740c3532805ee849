// Hardware counters per node: the counter features of the per-op models (amp/calibration.h),
// read in the f32 profiling step where the device lets them be read (CUDA: CUPTI's range
// profiler, runtime/cuda/cupti_counters.h; Backend::make_counter_reader), and the recorded
// table that tests the fitting and the attribution to nodes without a GPU.
//
// Recorded table (write_counter_table / read_counter_table): JSON lines, each ended by '\n':
//   {"format":"campo-hardware-counters","version":1,"device":"...","nodes":N}
//   {"node":"conv1","dram_bytes":D,"achieved_occupancy":O,"tensor_pipe":T,
//    "l2_hit_rate":L,"instructions":I[,"fp32_ms":F,"low_ms":W]}                 N lines
// A node is named once; its counters are finite numbers (a counter the device did not read
// is absent, and reads as not read); fp32_ms and low_ms, where present, are the node's
// times in each precision (a recorded calibration sample). Other fields are ignored.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace campo {

// The counters, as CUPTI names them on Hopper (cupti_counters.cc): DRAM bytes read and
// written, achieved occupancy (% of the warps an SM holds), tensor-pipe utilisation (% of
// cycles), L2 hit rate (%), warp instructions executed.
enum class Counter : uint8_t {
  dram_bytes,
  achieved_occupancy,
  tensor_pipe,
  l2_hit_rate,
  instructions,
  kCount
};
constexpr int kNumCounters = int(Counter::kCount);
const char* counter_name(Counter c);  // "dram_bytes", "achieved_occupancy", ...

// One node's counters; NaN where not read.
using CounterValues = std::array<double, kNumCounters>;
CounterValues unread_counters();  // every value NaN
bool all_read(const CounterValues& v);

struct NodeCounters {
  std::string node;
  CounterValues values = unread_counters();
  double fp32_ms = -1, low_ms = -1;  // -1: not recorded
};

struct CounterTable {
  std::string device;  // what read them (Backend::describe())
  std::vector<NodeCounters> nodes;
};

// `table` at `path`, atomically (unread counters and unrecorded times are left out).
void write_counter_table(const std::string& path, const CounterTable& table);
// A recorded table; bad input is one error line naming the file, the line and what is wrong.
CounterTable read_counter_table(const std::string& path);

// What Executable::run_bracketed calls around each node (slot: its position in the
// schedule). A NodeTimer times the brackets (runtime/backend.h); a NodeCounterReader counts.
class NodeBrackets {
 public:
  virtual ~NodeBrackets() = default;
  virtual void start(size_t slot) = 0;
  virtual void stop(size_t slot) = 0;
};

// Counters are read over passes of the same step (the hardware counts a few at a time):
// begin_pass, the step with every node bracketed, end_pass, until end_pass says the last pass
// ran; then values() per slot (unread for a slot that ran nothing).
class NodeCounterReader : public NodeBrackets {
 public:
  virtual void begin_pass() = 0;
  virtual bool end_pass() = 0;
  virtual std::vector<CounterValues> values() = 0;
  // What read them, for the calibration file ("CUPTI range profiler").
  virtual std::string source() const = 0;
};

}  // namespace campo
