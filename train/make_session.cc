#include "train/make_session.h"

#include <ostream>

#include "models/dcgan.h"
#include "models/models.h"
#include "train/gan_trainer.h"
#include "train/trainer.h"

namespace campo {

std::unique_ptr<Session> make_session(const SessionSpec& spec, std::shared_ptr<Backend> backend) {
  const TrainingGraphSpec& g = spec.graph;
  switch (model_family(g.model)) {
    case ModelFamily::classifier:
    case ModelFamily::masked_lm:
      return std::make_unique<TrainingSession>(g.model, g.model_options, g.image_shape, g.batch,
                                               g.optimizer, spec.models, std::move(backend),
                                               g.precision, spec.conv_layout, spec.data_parallel);
    case ModelFamily::gan: {
      CAMPO_CHECK(g.image_shape.size() == 3, "internal: ", g.model, " makes images, not ",
                  shape_str(g.image_shape));
      // check_data_parallel_model refuses --data-parallel for it, with the user's line.
      CAMPO_CHECK(!spec.data_parallel.on(), "internal: ", g.model, " has no data-parallel session");
      DcganOptions m;
      m.channels = int(g.image_shape[0]);
      m.image_size = int(g.image_shape[1]);
      m.nz = spec.nz;
      m.ngf = spec.ngf;
      m.ndf = spec.ndf;
      OptimizerConfig optimizer = g.optimizer;
      optimizer.slices = OptimizerConfig{}.slices;  // the session stacks its models itself
      optimizer.beta1 = kDcganAdamBeta1;            // Adam only
      return std::make_unique<GanSession>(m, g.batch, optimizer, spec.models, std::move(backend),
                                          spec.gan_samples, g.precision, spec.conv_layout,
                                          given_step_costs(spec.step_costs));
    }
  }
  CAMPO_FAIL("internal: no session for model ", g.model);
}

void check_training_options(const TrainOptions& o) {
  validate(o);  // names an unknown model
  if (model_family(o.model) == ModelFamily::gan)
    check_gan_training_options(o);
  else
    check_classifier_training_options(o);
}

std::optional<StepProfile> train_model(const TrainOptions& o, std::ostream& log,
                                       bool log_is_terminal, const CalibrationSource& calibration) {
  if (model_family(o.model) == ModelFamily::gan)
    return train_gan(o, log, log_is_terminal, calibration).profile;
  return train(o, log, log_is_terminal, calibration).profile;
}

}  // namespace campo
