// Node times from CUPTI's activity API: the GPU time of every kernel, memcpy and memset a
// node started, summed per node (runtime/kernel_activity.h says how they are attributed).
// Event pairs around a node (CudaNodeTimer, the fallback) also count the gaps between its
// launches; CUPTI counts only the work.
//
// CUPTI is process-global: one set of buffer callbacks, registered once; the activity kinds
// stay enabled while any CUPTI timer lives. Timers may coexist (two executables timed in
// turn, amp/padding.cc), but their steps must not interleave: a step runs from its timer's
// first start() to its elapsed_ms(), and another timer starting a step meanwhile is an
// error. The external correlation ids are pushed per thread: a step is issued from one
// thread, as the executor does.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "runtime/backend.h"

namespace campo::cuda {

// A CUPTI timer of `slots` nodes issued on `stream`, or null with `why_not` saying why CUPTI
// cannot record in this process (CAMPO_CUPTI=0, a build without CUPTI, or a CUPTI error such
// as CUPTI_ERROR_INSUFFICIENT_PRIVILEGES); the caller then times with events. After a
// failure CUPTI is not tried again in this process. With CAMPO_CUPTI_RECORD=FILE each step's
// records are written to FILE (write_activity_table, headed by `device`), so the last
// step's remain. CAMPO_CUPTI other than 0 or 1 is one error line.
std::unique_ptr<NodeTimer> make_cupti_timer(cudaStream_t stream, size_t slots,
                                            const std::string& device, std::string& why_not);

}  // namespace campo::cuda
