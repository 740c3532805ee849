// The one training loop of `campo train`, for every kind of run: a classifier or BERT's
// masked LM, alone or as a model array (TrainingSession, train/trainer.h) and DCGAN, alone
// or arrayed (GanSession, train/gan_trainer.h), each a Session (train/session.h).
// run_training drives it: epochs of batches from its data loaders (resumed mid-epoch where a
// checkpoint left off), each model's learning rate from the schedule, checkpoints (every N
// steps, at each epoch end, on Ctrl-C), the evaluation, and what --profile-out records.
// What is shown and recorded as it goes (the banner, progress, --metrics and --tensorboard,
// --profile's table, the JSON result) is its observer's, train/run_report.h.
#pragma once

#include <iosfwd>

#include "train/loop_options.h"
#include "train/session.h"

namespace campo {

class DeviceReport;
class Timer;

// Runs the loop (see the file comment) from `o.resumed`'s position; SIGINT, SIGTERM or
// SIGHUP end it after the current step with Interrupted (train/interrupt.h), the
// checkpoints written first. Prints the banner, progress, the summary and the JSON result
// (o.result, the run's common fields, the device report, `wall`'s time: the whole run's).
TrainingLoopResult run_training(Session& session, const TrainingLoopOptions& o,
                                const DeviceReport& device, const Timer& wall, std::ostream& log);

}  // namespace campo
