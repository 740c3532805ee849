// The one place a model becomes its session: the model table's ModelFamily (models/models.h)
// is read here, and nowhere else, to choose between TrainingSession (train/trainer.h:
// classifiers and BERT's masked language model) and GanSession (train/gan_trainer.h: DCGAN).
// campo train runs a model through train_model, after check_training_options; campo bench,
// campo plan and campo calibrate build sessions with make_session. Everything else asks the
// model table what a model can do (step_graph_count, has_accuracy), not what it is.
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>

#include "runtime/backend.h"
#include "train/data_parallel.h"
#include "train/model_array.h"
#include "train/options.h"
#include "train/profiling.h"
#include "train/session.h"
#include "train/training_graph.h"

namespace campo {

// The session of `spec` (SessionSpec, train/session.h).
std::unique_ptr<Session> make_session(const SessionSpec& spec, std::shared_ptr<Backend> backend);

// campo train's options checked before anything is read or made: the common checks
// (validate, train/options.h), then those of the model's session.
void check_training_options(const TrainOptions& o);

// campo train: trains the model as its session does (train() or train_gan()) and returns
// the profile it measured for --profile-out (none unless asked).
std::optional<StepProfile> train_model(const TrainOptions& o, std::ostream& log,
                                       bool log_is_terminal, const CalibrationSource& calibration);

}  // namespace campo
