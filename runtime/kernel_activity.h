// Per-node GPU times from activity records, attributed without a device: CUPTI's activity
// API produces the records on CUDA (runtime/cuda/cupti_timer.h); the attribution and the
// recorded-table format below are plain C++, built and tested everywhere.
//
// While node `slot` is issued, the timer pushes the external id slot + 1 (0 means none).
// CUPTI then records each CUDA call made meanwhile as (correlation id -> external id), and
// each GPU activity the call started with the same correlation id. A node's time is the sum
// of its activities' durations, so a cuDNN convolution that launches two kernels counts both,
// a node that launches nothing counts 0, and launch gaps between kernels count nowhere
// (event pairs around a node count them). Memory copies and memsets run inside nodes too
// (Reshape, padded convolutions, a GEMM clearing its output): CUPTI's memcpy and memset
// records become activities named "[CUDA memcpy DtoD]", "[CUDA memset]", as Nsight names them.
//
// Recorded table (write_activity_table / read_activity_table): JSON lines, each ended by '\n':
//   {"format":"campo-cupti-activity","version":1,"device":"...","kernels":K,"external_correlations":E}
//   {"kind":"kernel","name":"...","start_ns":S,"end_ns":T,"correlation_id":C}   K lines
//   {"kind":"external_correlation","correlation_id":C,"external_id":X}         E lines
// in any order after the header. The header's counts make a file cut at a line's end read as
// truncated; a correlation id has at most one external id; other fields of a record are
// ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace campo {

// One GPU activity (CUpti_ActivityKernel*, or a memcpy / memset), GPU timestamps in ns.
struct KernelActivity {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t correlation_id = 0;  // of the CUDA call that launched it
  bool operator==(const KernelActivity&) const = default;
};

// CUpti_ActivityExternalCorrelation of kind CUSTOM0: the CUDA call `correlation_id` was made
// while `external_id` was pushed.
struct ExternalCorrelation {
  uint32_t correlation_id = 0;
  uint64_t external_id = 0;
  bool operator==(const ExternalCorrelation&) const = default;
};

struct ActivityTable {
  std::vector<KernelActivity> kernels;
  std::vector<ExternalCorrelation> correlations;
  bool operator==(const ActivityTable&) const = default;
};

struct NodeAttribution {
  std::vector<double> ms;         // per slot: the sum of its activities' durations
  std::vector<uint32_t> kernels;  // per slot: how many activities
  // Activities of no slot: launched outside any node (a feed, a memset between nodes), or
  // by a call with no external id.
  uint32_t unattributed_kernels = 0;
  double unattributed_ms = 0;
};

// Each activity to the slot its call's external id names (external id - 1). One error line
// for an external id past `slots`, a correlation id with two external ids, or an activity
// that ends before it starts.
NodeAttribution attribute_kernels(const ActivityTable& table, size_t slots);

// `table` as a recorded table (above) at `path`, atomically; `device` says what ran it
// (CudaBackend::describe()).
void write_activity_table(const std::string& path, const ActivityTable& table,
                          const std::string& device);

struct RecordedActivity {
  std::string device;
  ActivityTable table;
};
// A recorded table; bad input is one error line naming the file, the line and what is wrong.
RecordedActivity read_activity_table(const std::string& path);

}  // namespace campo
