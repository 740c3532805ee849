#include "runtime/cuda/cupti_timer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <set>
#include <unordered_set>
#include <utility>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/file_check.h"
#include "runtime/kernel_activity.h"

// CMake defines CAMPO_HAVE_CUPTI where the toolkit has CUPTI (CUDA::cupti); without it the
// backend times with events and says so.
#if CAMPO_HAVE_CUPTI
#include <cupti.h>

#include "runtime/cuda/cupti_error.h"
#endif

namespace campo::cuda {

#if CAMPO_HAVE_CUPTI
namespace {

#define CAMPO_CUPTI_CHECK(expr)                                            \
  do {                                                                     \
    const CUptiResult campo_cupti_status_ = (expr);                        \
    if (campo_cupti_status_ != CUPTI_SUCCESS)                              \
      CAMPO_FAIL(cupti_error(#expr, campo_cupti_status_),                  \
                 " (CAMPO_CUPTI=0 times nodes with CUDA events instead)"); \
  } while (0)

// What is recorded. CUPTI writes external correlation records only beside the API records
// they annotate, so the runtime and driver API kinds are on too; their records are dropped.
struct Kind {
  CUpti_ActivityKind kind;
  const char* name;
};
constexpr Kind kKinds[] = {
    {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
    {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
    {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"},
    {CUPTI_ACTIVITY_KIND_RUNTIME, "RUNTIME"},
    {CUPTI_ACTIVITY_KIND_DRIVER, "DRIVER"},
    {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, "EXTERNAL_CORRELATION"},
};
constexpr CUpti_ExternalCorrelationKind kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
// CUPTI's guide suggests 1 to 10 MB; a ResNet-50 step's records fit in a few.
constexpr size_t kBufferBytes = size_t(8) << 20;

const char* memcpy_kind_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "PtoP";
    default:
      return "other";
  }
}

// The process's CUPTI client: the buffer callbacks and the records of the open step.
// state_mutex_ guards registration, the enabled kinds and the open step, and is held across
// CUPTI calls that may deliver buffers; the delivery callback (CUPTI's thread, or the
// flushing one) takes only records_mutex_.
class Collector {
 public:
  // Never destroyed: CUPTI may deliver buffers from its exit handler.
  static Collector& get() {
    static Collector* collector = new Collector;
    return *collector;
  }

  // Registers the callbacks (once) and enables the kinds (for the first live timer); false,
  // with `why`, when CUPTI refuses, now or in an earlier try.
  bool acquire(std::string& why) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (failure_.empty() && !registered_) {
      const CUptiResult r = cuptiActivityRegisterCallbacks(request_buffer, complete_buffer);
      if (r == CUPTI_SUCCESS)
        registered_ = true;
      else
        failure_ = cupti_error("cuptiActivityRegisterCallbacks", r);
    }
    for (size_t i = 0; failure_.empty() && timers_ == 0 && i < std::size(kKinds); ++i) {
      const CUptiResult r = cuptiActivityEnable(kKinds[i].kind);
      if (r == CUPTI_SUCCESS) continue;
      failure_ = cupti_error(std::string("cuptiActivityEnable(") + kKinds[i].name + ")", r);
      for (size_t j = 0; j < i; ++j) cuptiActivityDisable(kKinds[j].kind);
    }
    if (!failure_.empty()) {
      why = failure_;
      return false;
    }
    ++timers_;
    return true;
  }

  // The last live timer turns recording off, so untimed steps run without CUPTI.
  void release(const void* timer) noexcept {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (open_ == timer) open_ = nullptr;
    if (--timers_ > 0) return;
    warn_on_error(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    for (const Kind& k : kKinds)
      warn_on_error(cuptiActivityDisable(k.kind), "cuptiActivityDisable");
    std::lock_guard<std::mutex> records(records_mutex_);
    clear_records();
  }

  void begin_step(const void* timer) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    // The same timer again: its last step was cut short by an error.
    CAMPO_CHECK(open_ == nullptr || open_ == timer,
                "CUPTI node timers: a timed step began while another one's was open; CUPTI "
                "records for the whole process, so steps are timed one at a time");
    // What ran before the step is no node's of it.
    CAMPO_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    std::lock_guard<std::mutex> records(records_mutex_);
    clear_records();
    open_ = timer;
  }

  struct Step {
    ActivityTable table;
    size_t lost = 0;  // records dropped, or without times
  };
  // The records since begin_step; the step's stream has been synchronized, so the forced
  // flush delivers them complete.
  Step end_step(const void* timer) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    CAMPO_CHECK(open_ == timer, "internal: a CUPTI timer ended a step it did not begin");
    open_ = nullptr;
    CAMPO_CUPTI_CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    Step s;
    std::vector<std::pair<size_t, uint32_t>> runtime_ids;
    {
      std::lock_guard<std::mutex> records(records_mutex_);
      s.table = std::move(pending_);
      s.lost = lost_;
      runtime_ids = std::move(runtime_ids_);
      clear_records();
    }
    // A memcpy carries the driver call's correlation id and the runtime call's; the
    // external id is on whichever CUPTI recorded.
    std::unordered_set<uint32_t> correlated;
    for (const ExternalCorrelation& c : s.table.correlations) correlated.insert(c.correlation_id);
    for (const auto& [index, runtime_id] : runtime_ids) {
      KernelActivity& k = s.table.kernels[index];
      if (!correlated.count(k.correlation_id) && correlated.count(runtime_id))
        k.correlation_id = runtime_id;
    }
    return s;
  }

 private:
  static void CUPTIAPI request_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
    // Records are 8-byte aligned in the buffer. Null (no memory): CUPTI drops the records
    // and counts them, which end_step reports.
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI complete_buffer(CUcontext context, uint32_t stream, uint8_t* buffer,
                                       size_t /*size*/, size_t valid) {
    Collector& c = get();
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) != CUPTI_SUCCESS) dropped = 0;
    {
      std::lock_guard<std::mutex> lock(c.records_mutex_);
      c.lost_ += dropped;
      CUpti_Activity* record = nullptr;
      // A callback from CUPTI must not throw: a failure loses records, which are counted.
      try {
        while (true) {
          const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &record);
          if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
          if (r != CUPTI_SUCCESS) {  // an incomplete or invalid record ends the buffer
            ++c.lost_;
            break;
          }
          c.add(*record);
        }
      } catch (...) {
        ++c.lost_;
      }
    }
    std::free(buffer);
  }

  // Under records_mutex_.
  void add(const CUpti_Activity& record) {
    switch (record.kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto& k = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
        add_activity(k.name ? k.name : "(unnamed kernel)", k.start, k.end, k.correlationId);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto& m = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
        if (add_activity(std::string("[CUDA memcpy ") + memcpy_kind_name(m.copyKind) + "]", m.start,
                         m.end, m.correlationId) &&
            m.runtimeCorrelationId != 0 && m.runtimeCorrelationId != m.correlationId)
          runtime_ids_.push_back({pending_.kernels.size() - 1, m.runtimeCorrelationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto& m = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
        add_activity("[CUDA memset]", m.start, m.end, m.correlationId);
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        // One API call is recorded by the runtime and the driver: the same pair may come twice.
        const auto& e = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
        if (e.externalKind == kExternalKind && seen_.insert({e.correlationId, e.externalId}).second)
          pending_.correlations.push_back({e.correlationId, e.externalId});
        break;
      }
      default:  // the API records
        break;
    }
  }

  // A record without times (0: CUPTI had no device memory for them) would make its node's
  // time short: counted as lost rather than added.
  bool add_activity(std::string name, uint64_t start, uint64_t end, uint32_t correlation) {
    if (start == 0 || end < start) {
      ++lost_;
      return false;
    }
    pending_.kernels.push_back({std::move(name), start, end, correlation});
    return true;
  }

  void clear_records() {
    pending_ = {};
    seen_.clear();
    runtime_ids_.clear();
    lost_ = 0;
  }

  std::mutex state_mutex_;
  std::string failure_;  // why CUPTI cannot record in this process; never retried
  bool registered_ = false;
  int timers_ = 0;              // live CUPTI timers: the kinds are enabled while > 0
  const void* open_ = nullptr;  // the timer whose step is open

  std::mutex records_mutex_;
  ActivityTable pending_;
  std::set<std::pair<uint32_t, uint64_t>> seen_;          // external correlations
  std::vector<std::pair<size_t, uint32_t>> runtime_ids_;  // memcpy index, runtime id
  size_t lost_ = 0;
};

class CuptiNodeTimer final : public NodeTimer {
 public:
  CuptiNodeTimer(cudaStream_t stream, size_t slots, std::string device, std::string record_path)
      : stream_(stream),
        ms_(slots, 0.0),
        device_(std::move(device)),
        record_path_(std::move(record_path)) {}
  ~CuptiNodeTimer() override {
    if (pushed_)
      warn_on_error(cuptiActivityPopExternalCorrelationId(kExternalKind, nullptr),
                    "cuptiActivityPopExternalCorrelationId");
    Collector::get().release(this);
  }

  void start(size_t slot) override {
    CAMPO_CHECK(slot < ms_.size(), "internal: CUPTI timer slot ", slot, " of ", ms_.size());
    if (!step_open_) {
      Collector::get().begin_step(this);
      step_open_ = true;
    }
    if (pushed_) {  // the last node threw before its stop
      CAMPO_CUPTI_CHECK(cuptiActivityPopExternalCorrelationId(kExternalKind, nullptr));
      pushed_ = 0;
    }
    CAMPO_CUPTI_CHECK(cuptiActivityPushExternalCorrelationId(kExternalKind, slot + 1));
    pushed_ = slot + 1;
  }

  void stop(size_t slot) override {
    uint64_t last = 0;
    CAMPO_CUPTI_CHECK(cuptiActivityPopExternalCorrelationId(kExternalKind, &last));
    pushed_ = 0;
    CAMPO_CHECK(last == slot + 1, "internal: CUPTI timer stopped slot ", slot, " while slot ",
                last - 1, " was timed");
  }

  const std::vector<double>& elapsed_ms() override {
    CAMPO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (!step_open_) return ms_;
    step_open_ = false;
    const Collector::Step step = Collector::get().end_step(this);
    CAMPO_CHECK(step.lost == 0, "CUPTI lost ", step.lost,
                " activity records of a timed step (dropped, or without times), so its node "
                "times would be short; CAMPO_CUPTI=0 times nodes with CUDA events instead");
    // Before attributing: a table that does not attribute is the one to look at.
    if (!record_path_.empty()) write_activity_table(record_path_, step.table, device_);
    ms_ = attribute_kernels(step.table, ms_.size()).ms;
    return ms_;
  }

 private:
  cudaStream_t stream_;  // the backend's; the timer must not outlive its backend
  std::vector<double> ms_;
  std::string device_, record_path_;
  bool step_open_ = false;
  uint64_t pushed_ = 0;  // the external id pushed and not yet popped (0: none)
};

}  // namespace
#endif  // CAMPO_HAVE_CUPTI

std::unique_ptr<NodeTimer> make_cupti_timer(cudaStream_t stream, size_t slots,
                                            const std::string& device, std::string& why_not) {
  const char* mode = std::getenv("CAMPO_CUPTI");
  const std::string wanted = mode ? mode : "1";
  CAMPO_CHECK(wanted == "0" || wanted == "1",
              "CAMPO_CUPTI must be 0 (time nodes with CUDA events) or 1 (CUPTI, the default), "
              "got '",
              wanted, "'");
  const char* record = std::getenv("CAMPO_CUPTI_RECORD");
  const std::string record_path = record ? record : "";
  if (!record_path.empty()) require_output_file(record_path, "CAMPO_CUPTI_RECORD file");
  // A recording asked for is made, or refused: never a run that silently writes nothing.
  auto unavailable = [&](const std::string& why) -> std::unique_ptr<NodeTimer> {
    CAMPO_CHECK(record_path.empty(), "CAMPO_CUPTI_RECORD=", record_path,
                ": nothing to record, CUPTI is unavailable (", why, ")");
    why_not = why;
    return nullptr;
  };
  if (wanted == "0") return unavailable("CAMPO_CUPTI=0");
#if CAMPO_HAVE_CUPTI
  std::string why;
  if (!Collector::get().acquire(why)) return unavailable(why);
  try {
    return std::make_unique<CuptiNodeTimer>(stream, slots, device, record_path);
  } catch (...) {
    Collector::get().release(nullptr);
    throw;
  }
#else
  return unavailable("this build has no CUPTI: CMake found no CUDA::cupti in the toolkit");
#endif
}

}  // namespace campo::cuda
