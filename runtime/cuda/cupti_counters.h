// Per-range hardware counters from CUPTI's range profiler (CUDA 12.6+): user ranges, user
// replay. The counters a set of metrics needs rarely fit the hardware at once, so CUPTI splits
// them into passes and the caller replays the same work once per pass, with the same ranges in
// the same order; CUPTI neither saves nor restores memory between passes, so the work must
// give the same counts when run again (a step whose inputs it does not overwrite).
//
// A profiler is driven from one thread, and a context has one range profiler at a time
// (cuptiProfilerInitialize, which is process-wide, is counted across profilers). Compiled
// only with CAMPO_HAVE_CUDA (runtime/cuda/); its CUPTI calls only with CAMPO_HAVE_CUPTI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/hardware_counters.h"

// CUPTI's opaque handles (cupti_range_profiler.h, cupti_profiler_host.h), declared here so
// that this header needs no CUPTI headers.
struct CUpti_RangeProfiler_Object;
struct CUpti_Profiler_Host_Object;

namespace campo::cuda {

// Per-range hardware counters of CUDA work through CUPTI's range profiler (user ranges, user
// replay): the caller issues the same work once per pass, each node between push_range and
// pop_range, until end_pass says every pass the metrics need was run; decode() then gives each
// range's metric values.
class CuptiCounterProfiler {
 public:
  // The metrics the calibration reads, in this order (Hopper names):
  // dram bytes, achieved occupancy, tensor-pipe utilisation, L2 hit rate, instructions.
  static const std::vector<std::string>& default_metrics();
  // Starts range profiling of `metrics` on device `device` (the caller has made it current and
  // created its context). Null where counters cannot be read, with `why` set to one phrase naming
  // the CUPTI call and its error ("cuptiRangeProfilerEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"),
  // e.g. containers without the profiling capability, MIG instances, devices CUPTI does not
  // support. A metric this chip does not know is such a case too (its name is in `why`). No
  // metrics, no ranges, or a device that is not the current one are the caller's errors, and throw.
  static std::unique_ptr<CuptiCounterProfiler> open(int device,
                                                    const std::vector<std::string>& metrics,
                                                    size_t max_ranges, std::string& why);
  ~CuptiCounterProfiler();  // disables the profiler, frees its images; never throws
  CuptiCounterProfiler(const CuptiCounterProfiler&) = delete;
  CuptiCounterProfiler& operator=(const CuptiCounterProfiler&) = delete;

  void begin_pass();
  // At most max_ranges ranges a pass, not nested, each name once; every pass repeats the first
  // pass's names in its order.
  void push_range(const std::string& name);
  void pop_range();
  // Ends a pass (synchronizes the device's work first); true when all passes were run.
  bool end_pass();
  // After the last pass: range name -> values in the order of the metrics given to open().
  std::map<std::string, std::vector<double>> decode();
  int passes() const;  // passes run so far

 private:
  CuptiCounterProfiler(int device, const std::vector<std::string>& metrics, size_t max_ranges);
  // open()'s CUPTI calls: false, with `why` set, where CUPTI refuses; the destructor undoes
  // the part that was done.
  bool start(std::string& why);

  int device_;
  std::vector<std::string> metrics_;
  std::vector<const char*> metric_names_;  // into metrics_, as CUPTI takes them
  size_t max_ranges_;

  bool holds_profiler_ = false;  // this profiler counts in the process's cuptiProfilerInitialize
  CUpti_Profiler_Host_Object* host_ = nullptr;      // metric scheduling and evaluation
  CUpti_RangeProfiler_Object* profiler_ = nullptr;  // collection on the device's context
  std::vector<uint8_t> counter_availability_;       // which counters this context may read
  std::vector<uint8_t> config_;                     // the metrics' counters, scheduled in passes
  std::vector<uint8_t> counter_data_;               // what decode() fills, per range
  size_t passes_needed_ = 0;                        // as CUPTI scheduled the config

  // The first pass's range names, in order: later passes must repeat them. A deque, so the
  // names CUPTI is given stay where they are while it profiles.
  std::deque<std::string> ranges_;
  size_t ranges_this_pass_ = 0;
  bool pass_open_ = false;
  bool range_open_ = false;
  bool all_passes_run_ = false;
  bool decoded_ = false;
  int passes_ = 0;
};

// The backend's NodeCounterReader (CudaBackend::make_counter_reader): one range per node
// slot, named by the slot, over CuptiCounterProfiler::default_metrics() (the order of
// Counter); null with `why` where CUPTI cannot read them on device `device` (current).
std::unique_ptr<NodeCounterReader> make_cupti_counter_reader(int device, size_t slots,
                                                             std::string& why);

}  // namespace campo::cuda
