// `campo eval`: evaluate a checkpoint on a data set's test split.
#include <iostream>

#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "train/trainer.h"

namespace campo::cli {

namespace {

class EvalCommand final : public Command {
 public:
  explicit EvalCommand(CLI::App& app) {
    app_ = app.add_subcommand("eval", "Evaluate a checkpoint on a test split");
    EvalOptions& o = options_;
    app_->add_option("--checkpoint", o.checkpoint, "safetensors checkpoint")
        ->required()
        ->check(kPath);
    app_->add_option("--model", o.model, "Model (default: from the checkpoint)");
    app_->add_option("--dataset", o.dataset, "Data set")->capture_default_str();
    app_->add_option("--data-dir", o.data_dir, "Directory of the data set's files")->check(kPath);
    app_->add_option("--batch", o.batch, "Batch size")->capture_default_str();
    app_->add_option("--limit", o.limit, "Evaluate on the first N samples");
    check_int64(app_, {"--batch", "--limit"});
    app_->add_option("--image-size", o.image_size, "Resize images (0: native)");
    app_->add_option("--channels", o.channels, "Image channels (0: native)");
    app_->add_option("--seq-len", o.seq_len, "text: tokens per sequence")->capture_default_str();
    app_->add_option("--mask-prob", o.mask_prob, "text: fraction of tokens to predict")
        ->capture_default_str();
    app_->add_option("--seed", o.seed, "Seed of the synthetic data set")
        ->check(kSeed)
        ->capture_default_str();
    add_device_option(app_, device_);
    add_cuda_graph_option(app_, cuda_graph_);
  }

  int run() override {
    // Without --model the model is the checkpoint's, read later: the data set's kind decides
    // (a model and a data set of different kinds are refused then).
    check_option_scopes(app_, given(app_, "--model") ? model_kind(options_.model) : kAllModels,
                        data_kind(options_.dataset));
    options_.device = parse_device_spec(device_);
    options_.cuda_graph = parse_cuda_graph_mode(cuda_graph_);
    evaluate_checkpoint(options_, std::cout);
    return 0;
  }

 private:
  EvalOptions options_;
  std::string device_ = "cpu", cuda_graph_ = "auto";  // as given
};

}  // namespace

std::unique_ptr<Command> add_eval_command(CLI::App& app) {
  return std::make_unique<EvalCommand>(app);
}

}  // namespace campo::cli
