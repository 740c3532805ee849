#include "runtime/cuda/cupti_counters.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/check.h"
#include "runtime/cuda/cuda_check.h"

// CMake defines CAMPO_HAVE_CUPTI where the toolkit has CUPTI (CUDA::cupti); the range profiler
// and the host API that schedules and evaluates its metrics are both in libcupti (CUDA 12.6+),
// which loads libnvperf_host itself at run time.
#if CAMPO_HAVE_CUPTI
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include "runtime/cuda/cupti_error.h"
#endif

namespace campo::cuda {

const std::vector<std::string>& CuptiCounterProfiler::default_metrics() {
  static const std::vector<std::string> metrics = {
      "dram__bytes.sum",                                                 // bytes read and written
      "sm__warps_active.avg.pct_of_peak_sustained_active",               // achieved occupancy, %
      "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",  // tensor pipe busy, %
      "lts__t_sector_hit_rate.pct",                                      // L2 hit rate, %
      "smsp__inst_executed.sum",                                         // warp instructions
  };
  return metrics;
}

#if CAMPO_HAVE_CUPTI
namespace {

// A CUPTI parameter struct, zeroed, with its size set: CUPTI reads the fields the size covers.
template <typename Params>
Params cupti_params(size_t struct_size) {
  Params params{};
  params.structSize = struct_size;
  return params;
}
#define CAMPO_CUPTI_PARAMS(Type) cupti_params<Type>(Type##_STRUCT_SIZE)

// After open(): a failing CUPTI call is one error line naming the call and CUPTI's error.
#define CAMPO_CUPTI_CALL(call, params)                                               \
  do {                                                                               \
    const CUptiResult campo_cupti_status_ = call(&(params));                         \
    if (campo_cupti_status_ != CUPTI_SUCCESS)                                        \
      CAMPO_FAIL("CUPTI range profiler: ", cupti_error(#call, campo_cupti_status_)); \
  } while (0)

// In open(): a failing CUPTI call sets `why` and open() returns null.
#define CAMPO_CUPTI_OR_WHY(call, params)                     \
  do {                                                       \
    const CUptiResult campo_cupti_status_ = call(&(params)); \
    if (campo_cupti_status_ != CUPTI_SUCCESS) {              \
      why = cupti_error(#call, campo_cupti_status_);         \
      return false;                                          \
    }                                                        \
  } while (0)

// cuptiProfilerInitialize is process-wide: the first live profiler initializes it, the last
// one deinitializes it.
class ProfilerUsers {
 public:
  static CUptiResult acquire() {
    std::lock_guard<std::mutex> lock(mutex());
    if (count() == 0) {
      auto params = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Initialize_Params);
      const CUptiResult status = cuptiProfilerInitialize(&params);
      if (status != CUPTI_SUCCESS) return status;
    }
    ++count();
    return CUPTI_SUCCESS;
  }
  static void release() noexcept {
    std::lock_guard<std::mutex> lock(mutex());
    if (--count() > 0) return;
    auto params = CAMPO_CUPTI_PARAMS(CUpti_Profiler_DeInitialize_Params);
    warn_on_error(cuptiProfilerDeInitialize(&params), "cuptiProfilerDeInitialize");
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static int& count() {
    static int n = 0;
    return n;
  }
};

const char* support_level_name(CUpti_Profiler_Support_Level level) {
  switch (level) {
    case CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED:
      return "unsupported";
    case CUPTI_PROFILER_CONFIGURATION_DISABLED:
      return "disabled";
    case CUPTI_PROFILER_CONFIGURATION_SUPPORTED:
      return "supported";
    default:
      return "unknown";
  }
}

// The current context through the driver's entry points, so that campo links the CUDA runtime
// alone (no libcuda at link time). Null context: `why` says why.
CUcontext current_context(CUdevice& device, std::string& why) {
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  using CtxGetDevice = CUresult (*)(CUdevice*);
  void* get_current = nullptr;
  void* get_device = nullptr;
  for (auto [symbol, fn] :
       {std::pair{"cuCtxGetCurrent", &get_current}, std::pair{"cuCtxGetDevice", &get_device}}) {
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t status =
        cudaGetDriverEntryPointByVersion(symbol, fn, 12000, cudaEnableDefault, &found);
    if (status != cudaSuccess || found != cudaDriverEntryPointSuccess || !*fn) {
      why = std::string("cudaGetDriverEntryPointByVersion(") + symbol +
            "): " + (status != cudaSuccess ? cudaGetErrorName(status) : "symbol not found");
      return nullptr;
    }
  }
  CUcontext context = nullptr;
  CUresult status = reinterpret_cast<CtxGetCurrent>(get_current)(&context);
  if (status == CUDA_SUCCESS && context)
    status = reinterpret_cast<CtxGetDevice>(get_device)(&device);
  if (status != CUDA_SUCCESS || !context) {
    why = "cuCtxGetCurrent: no current CUDA context (driver error " + std::to_string(status) + ")";
    return nullptr;
  }
  return context;
}

}  // namespace

CuptiCounterProfiler::CuptiCounterProfiler(int device, const std::vector<std::string>& metrics,
                                           size_t max_ranges)
    : device_(device), metrics_(metrics), max_ranges_(max_ranges) {
  for (const std::string& m : metrics_) metric_names_.push_back(m.c_str());
}

std::unique_ptr<CuptiCounterProfiler> CuptiCounterProfiler::open(
    int device, const std::vector<std::string>& metrics, size_t max_ranges, std::string& why) {
  CAMPO_CHECK(!metrics.empty(), "CUPTI range profiler: no metrics to collect");
  CAMPO_CHECK(max_ranges > 0 && max_ranges <= std::numeric_limits<uint32_t>::max(),
              "CUPTI range profiler: max_ranges must be in [1, 2^32), got ", max_ranges);
  int current = -1;
  const cudaError_t status = cudaGetDevice(&current);
  if (status != cudaSuccess) {  // no driver or no device: nothing to count on
    why = std::string("cudaGetDevice: ") + cudaGetErrorName(status);
    return nullptr;
  }
  CAMPO_CHECK(current == device, "CUPTI range profiler: device ", device,
              " is not the current device (", current, "); make it current before open()");
  std::unique_ptr<CuptiCounterProfiler> profiler(
      new CuptiCounterProfiler(device, metrics, max_ranges));
  if (!profiler->start(why)) return nullptr;  // the destructor undoes what start() did
  return profiler;
}

bool CuptiCounterProfiler::start(std::string& why) {
  CUdevice cu_device = 0;
  const CUcontext context = current_context(cu_device, why);
  if (!context) return false;

  if (const CUptiResult status = ProfilerUsers::acquire(); status != CUPTI_SUCCESS) {
    why = cupti_error("cuptiProfilerInitialize", status);
    return false;
  }
  holds_profiler_ = true;

  // vGPU without profiling, confidential computing, CMP and the like: the flag says which.
  auto supported = CAMPO_CUPTI_PARAMS(CUpti_Profiler_DeviceSupported_Params);
  supported.cuDevice = cu_device;
  supported.api = CUPTI_PROFILER_RANGE_PROFILING;
  CAMPO_CUPTI_OR_WHY(cuptiProfilerDeviceSupported, supported);
  if (supported.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
    why = "cuptiProfilerDeviceSupported: device " + std::to_string(device_) + " is " +
          support_level_name(supported.isSupported);
    const std::pair<const char*, CUpti_Profiler_Support_Level> parts[] = {
        {"architecture", supported.architecture},
        {"SLI", supported.sli},
        {"vGPU", supported.vGpu},
        {"confidential compute", supported.confidentialCompute},
        {"CMP", supported.cmp},
        {"WSL", supported.wsl}};
    std::string reasons;
    for (const auto& [part, level] : parts)
      if (level != CUPTI_PROFILER_CONFIGURATION_SUPPORTED)
        reasons +=
            (reasons.empty() ? "" : ", ") + std::string(part) + " " + support_level_name(level);
    if (!reasons.empty()) why += " (" + reasons + ")";
    return false;
  }

  auto chip = CAMPO_CUPTI_PARAMS(CUpti_Device_GetChipName_Params);
  chip.deviceIndex = size_t(device_);
  CAMPO_CUPTI_OR_WHY(cuptiDeviceGetChipName, chip);
  const std::string chip_name = chip.pChipName ? chip.pChipName : "";

  // Asked before the range profiler is enabled: CUPTI refuses it while a session is active.
  auto availability = CAMPO_CUPTI_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
  availability.ctx = context;
  CAMPO_CUPTI_OR_WHY(cuptiProfilerGetCounterAvailability, availability);
  counter_availability_.assign(availability.counterAvailabilityImageSize, 0);
  availability.pCounterAvailabilityImage = counter_availability_.data();
  CAMPO_CUPTI_OR_WHY(cuptiProfilerGetCounterAvailability, availability);

  auto host = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_Initialize_Params);
  host.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  host.pChipName = chip_name.c_str();
  host.pCounterAvailabilityImage = counter_availability_.data();
  CAMPO_CUPTI_OR_WHY(cuptiProfilerHostInitialize, host);
  host_ = host.pHostObject;

  auto add = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
  add.pHostObject = host_;
  add.ppMetricNames = metric_names_.data();
  add.numMetrics = metric_names_.size();
  if (const CUptiResult status = cuptiProfilerHostConfigAddMetrics(&add); status != CUPTI_SUCCESS) {
    why = cupti_error("cuptiProfilerHostConfigAddMetrics", status);
    // Name the metric the chip does not know, the usual cause.
    for (const std::string& metric : metrics_) {
      auto properties = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_GetMetricProperties_Params);
      properties.pHostObject = host_;
      properties.pMetricName = metric.c_str();
      if (cuptiProfilerHostGetMetricProperties(&properties) != CUPTI_SUCCESS) {
        why += " ('" + metric + "' is no metric of " + chip_name + ")";
        break;
      }
    }
    return false;
  }
  auto config_size = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
  config_size.pHostObject = host_;
  CAMPO_CUPTI_OR_WHY(cuptiProfilerHostGetConfigImageSize, config_size);
  config_.assign(config_size.configImageSize, 0);
  auto config = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
  config.pHostObject = host_;
  config.configImageSize = config_.size();
  config.pConfigImage = config_.data();
  CAMPO_CUPTI_OR_WHY(cuptiProfilerHostGetConfigImage, config);
  auto passes = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
  passes.configImageSize = config_.size();
  passes.pConfigImage = config_.data();
  CAMPO_CUPTI_OR_WHY(cuptiProfilerHostGetNumOfPasses, passes);
  passes_needed_ = passes.numOfPasses;

  // Where the profiling capability is missing (a container without it, a driver that restricts
  // counters to administrators), this is the call that says so.
  auto enable = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_Enable_Params);
  enable.ctx = context;
  CAMPO_CUPTI_OR_WHY(cuptiRangeProfilerEnable, enable);
  profiler_ = enable.pRangeProfilerObject;

  // One record per range: the ranges of one pass, not nested, so as many tree nodes as ranges.
  auto data_size = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
  data_size.pRangeProfilerObject = profiler_;
  data_size.pMetricNames = metric_names_.data();
  data_size.numMetrics = metric_names_.size();
  data_size.maxNumOfRanges = max_ranges_;
  data_size.maxNumRangeTreeNodes = uint32_t(max_ranges_);
  CAMPO_CUPTI_OR_WHY(cuptiRangeProfilerGetCounterDataSize, data_size);
  counter_data_.assign(data_size.counterDataSize, 0);
  auto data = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
  data.pRangeProfilerObject = profiler_;
  data.counterDataSize = counter_data_.size();
  data.pCounterData = counter_data_.data();
  CAMPO_CUPTI_OR_WHY(cuptiRangeProfilerCounterDataImageInitialize, data);

  // User ranges, replayed by the caller; one nesting level, the ranges push_range makes.
  auto set = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
  set.pRangeProfilerObject = profiler_;
  set.configSize = config_.size();
  set.pConfig = config_.data();
  set.counterDataImageSize = counter_data_.size();
  set.pCounterDataImage = counter_data_.data();
  set.range = CUPTI_UserRange;
  set.replayMode = CUPTI_UserReplay;
  set.maxRangesPerPass = max_ranges_;
  set.numNestingLevels = 1;
  set.minNestingLevel = 1;
  set.passIndex = 0;
  set.targetNestingLevel = 1;
  CAMPO_CUPTI_OR_WHY(cuptiRangeProfilerSetConfig, set);
  return true;
}

CuptiCounterProfiler::~CuptiCounterProfiler() {
  if (profiler_) {
    // A pass cut short by an error: closed, so that the profiler can be disabled.
    if (range_open_) {
      auto pop = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_PopRange_Params);
      pop.pRangeProfilerObject = profiler_;
      warn_on_error(cuptiRangeProfilerPopRange(&pop), "cuptiRangeProfilerPopRange");
    }
    if (pass_open_) {
      auto stop = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_Stop_Params);
      stop.pRangeProfilerObject = profiler_;
      warn_on_error(cuptiRangeProfilerStop(&stop), "cuptiRangeProfilerStop");
    }
    auto disable = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_Disable_Params);
    disable.pRangeProfilerObject = profiler_;
    warn_on_error(cuptiRangeProfilerDisable(&disable), "cuptiRangeProfilerDisable");
  }
  if (host_) {
    auto deinit = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
    deinit.pHostObject = host_;
    warn_on_error(cuptiProfilerHostDeinitialize(&deinit), "cuptiProfilerHostDeinitialize");
  }
  if (holds_profiler_) ProfilerUsers::release();
}

void CuptiCounterProfiler::begin_pass() {
  CAMPO_CHECK(!pass_open_, "CUPTI range profiler: begin_pass() while pass ", passes_ + 1,
              " is open");
  CAMPO_CHECK(!all_passes_run_, "CUPTI range profiler: all ", passes_,
              " passes were run; decode() the counters");
  auto start = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_Start_Params);
  start.pRangeProfilerObject = profiler_;
  CAMPO_CUPTI_CALL(cuptiRangeProfilerStart, start);
  pass_open_ = true;
  ranges_this_pass_ = 0;
}

void CuptiCounterProfiler::push_range(const std::string& name) {
  CAMPO_CHECK(pass_open_, "CUPTI range profiler: push_range('", name, "') outside a pass");
  CAMPO_CHECK(!range_open_, "CUPTI range profiler: push_range('", name, "') inside range '",
              ranges_[ranges_this_pass_ - 1], "'; ranges do not nest");
  CAMPO_CHECK(ranges_this_pass_ < max_ranges_, "CUPTI range profiler: range '", name,
              "' is one more than the ", max_ranges_, " a pass may have (open()'s max_ranges)");
  if (passes_ == 0) {
    // CUPTI keys ranges by name: two of one name would be counted as one.
    CAMPO_CHECK(std::find(ranges_.begin(), ranges_.end(), name) == ranges_.end(),
                "CUPTI range profiler: range '", name, "' pushed twice in a pass");
    ranges_.push_back(name);
  } else {
    CAMPO_CHECK(ranges_this_pass_ < ranges_.size() && ranges_[ranges_this_pass_] == name,
                "CUPTI range profiler: pass ", passes_ + 1, " range ", ranges_this_pass_ + 1,
                " is '", name, "', but the first pass's was '",
                ranges_this_pass_ < ranges_.size() ? ranges_[ranges_this_pass_] : "(none)",
                "'; every pass must issue the same ranges in the same order");
  }
  auto push = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_PushRange_Params);
  push.pRangeProfilerObject = profiler_;
  push.pRangeName = ranges_[ranges_this_pass_].c_str();
  CAMPO_CUPTI_CALL(cuptiRangeProfilerPushRange, push);
  range_open_ = true;
  ++ranges_this_pass_;
}

void CuptiCounterProfiler::pop_range() {
  CAMPO_CHECK(range_open_, "CUPTI range profiler: pop_range() without an open range");
  auto pop = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_PopRange_Params);
  pop.pRangeProfilerObject = profiler_;
  CAMPO_CUPTI_CALL(cuptiRangeProfilerPopRange, pop);
  range_open_ = false;
}

bool CuptiCounterProfiler::end_pass() {
  CAMPO_CHECK(pass_open_, "CUPTI range profiler: end_pass() without begin_pass()");
  CAMPO_CHECK(!range_open_, "CUPTI range profiler: end_pass() inside range '",
              ranges_[ranges_this_pass_ - 1], "'");
  CAMPO_CHECK(ranges_this_pass_ == ranges_.size(), "CUPTI range profiler: pass ", passes_ + 1,
              " had ", ranges_this_pass_, " ranges, the first pass ", ranges_.size(),
              "; every pass must issue the same ranges");
  CAMPO_CUDA_CHECK(cudaDeviceSynchronize());
  auto stop = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_Stop_Params);
  stop.pRangeProfilerObject = profiler_;
  pass_open_ = false;  // a Stop that failed is not tried again by the destructor
  CAMPO_CUPTI_CALL(cuptiRangeProfilerStop, stop);
  ++passes_;
  all_passes_run_ = stop.isAllPassSubmitted != 0;
  return all_passes_run_;
}

std::map<std::string, std::vector<double>> CuptiCounterProfiler::decode() {
  CAMPO_CHECK(all_passes_run_, "CUPTI range profiler: decode() after ", passes_, " of the ",
              passes_needed_, " passes the metrics need; run passes until end_pass() is true");
  if (!decoded_) {
    auto decode = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
    decode.pRangeProfilerObject = profiler_;
    CAMPO_CUPTI_CALL(cuptiRangeProfilerDecodeData, decode);
    CAMPO_CHECK(decode.numOfRangeDropped == 0, "CUPTI range profiler: ", decode.numOfRangeDropped,
                " ranges were dropped: the counter data holds ", max_ranges_);
    decoded_ = true;
  }
  auto info = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
  info.pCounterDataImage = counter_data_.data();
  info.counterDataImageSize = counter_data_.size();
  CAMPO_CUPTI_CALL(cuptiRangeProfilerGetCounterDataInfo, info);
  CAMPO_CHECK(info.numTotalRanges == ranges_.size(), "CUPTI range profiler: decoded ",
              info.numTotalRanges, " ranges, but each pass pushed ", ranges_.size());

  std::map<std::string, std::vector<double>> values;
  for (size_t r = 0; r < info.numTotalRanges; ++r) {
    auto range = CAMPO_CUPTI_PARAMS(CUpti_RangeProfiler_CounterData_GetRangeInfo_Params);
    range.pCounterDataImage = counter_data_.data();
    range.counterDataImageSize = counter_data_.size();
    range.rangeIndex = r;
    range.rangeDelimiter = "/";
    CAMPO_CUPTI_CALL(cuptiRangeProfilerCounterDataGetRangeInfo, range);
    std::vector<double> metric_values(metric_names_.size(), 0.0);
    auto evaluate = CAMPO_CUPTI_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    evaluate.pHostObject = host_;
    evaluate.pCounterDataImage = counter_data_.data();
    evaluate.counterDataImageSize = counter_data_.size();
    evaluate.rangeIndex = r;
    evaluate.ppMetricNames = metric_names_.data();
    evaluate.numMetrics = metric_names_.size();
    evaluate.pMetricValues = metric_values.data();
    CAMPO_CUPTI_CALL(cuptiProfilerHostEvaluateToGpuValues, evaluate);
    values[range.rangeName ? range.rangeName : ""] = std::move(metric_values);
  }
  return values;
}

int CuptiCounterProfiler::passes() const { return passes_; }

#else  // CAMPO_HAVE_CUPTI

std::unique_ptr<CuptiCounterProfiler> CuptiCounterProfiler::open(
    int /*device*/, const std::vector<std::string>& /*metrics*/, size_t /*max_ranges*/,
    std::string& why) {
  why = "this build has no CUPTI";
  return nullptr;
}

// No profiler is ever made without CUPTI: the members exist for the linker only.
CuptiCounterProfiler::~CuptiCounterProfiler() = default;
void CuptiCounterProfiler::begin_pass() { CAMPO_FAIL("this build has no CUPTI"); }
void CuptiCounterProfiler::push_range(const std::string&) { CAMPO_FAIL("this build has no CUPTI"); }
void CuptiCounterProfiler::pop_range() { CAMPO_FAIL("this build has no CUPTI"); }
bool CuptiCounterProfiler::end_pass() { CAMPO_FAIL("this build has no CUPTI"); }
std::map<std::string, std::vector<double>> CuptiCounterProfiler::decode() {
  CAMPO_FAIL("this build has no CUPTI");
}
int CuptiCounterProfiler::passes() const { return passes_; }

#endif  // CAMPO_HAVE_CUPTI

namespace {

class CuptiNodeCounters final : public NodeCounterReader {
 public:
  CuptiNodeCounters(std::unique_ptr<CuptiCounterProfiler> profiler, size_t slots)
      : profiler_(std::move(profiler)), slots_(slots) {}
  void begin_pass() override { profiler_->begin_pass(); }
  void start(size_t slot) override { profiler_->push_range(std::to_string(slot)); }
  void stop(size_t) override { profiler_->pop_range(); }
  bool end_pass() override { return profiler_->end_pass(); }
  std::vector<CounterValues> values() override {
    std::vector<CounterValues> out(slots_, unread_counters());
    for (const auto& [name, v] : profiler_->decode()) {
      const size_t slot = std::stoul(name);
      CAMPO_CHECK(slot < slots_ && v.size() == size_t(kNumCounters), "internal: CUPTI range '",
                  name, "' with ", v.size(), " values, of ", slots_, " slots");
      std::copy(v.begin(), v.end(), out[slot].begin());
    }
    return out;
  }
  std::string source() const override { return "CUPTI range profiler"; }

 private:
  std::unique_ptr<CuptiCounterProfiler> profiler_;
  size_t slots_;
};

}  // namespace

std::unique_ptr<NodeCounterReader> make_cupti_counter_reader(int device, size_t slots,
                                                             std::string& why) {
  static_assert(int(Counter::kCount) == 5, "default_metrics() lists one metric per Counter");
  std::unique_ptr<CuptiCounterProfiler> p = CuptiCounterProfiler::open(
      device, CuptiCounterProfiler::default_metrics(), std::max<size_t>(slots, 1), why);
  if (!p) return nullptr;
  return std::make_unique<CuptiNodeCounters>(std::move(p), slots);
}

}  // namespace campo::cuda
