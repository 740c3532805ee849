// `campo graph`: print the compiled training-step graph of a model (text or Graphviz DOT).
#include <iostream>

#include "models/models.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/options.h"
#include "train/options.h"
#include "train/trainer.h"

namespace campo::cli {

namespace {

class GraphCommand final : public Command {
 public:
  explicit GraphCommand(CLI::App& app) {
    app_ = app.add_subcommand("graph",
                              "Print the compiled training-step graph (text or Graphviz DOT)");
    app_->add_option("--model", options_.model, "Model: " + join(model_names()))
        ->capture_default_str();
    app_->add_option("--dataset", options_.dataset, "Data set (gives the input shape)")
        ->capture_default_str();
    app_->add_option("--data-dir", options_.data_dir, "Directory of the data set's files")
        ->check(kPath);
    app_->add_option("--batch", options_.batch, "Batch size")->capture_default_str();
    app_->add_option("--optimizer", optimizer_, "sgd or adam")->capture_default_str();
    app_->add_option("--format", format_, "text or dot")->capture_default_str();
    app_->add_flag("--no-multi-tensor-updates{false}", options_.multi_tensor_updates,
                   "One optimizer update node per parameter (as campo train's option)");
  }

  int run() override {
    check_option_scopes(app_, model_kind(options_.model), data_kind(options_.dataset));
    options_.optimizer = parse_optimizer(optimizer_);
    std::cout << dump_training_graph(options_, format_);
    return 0;
  }

 private:
  TrainOptions options_;
  std::string format_ = "text", optimizer_ = "sgd";
};

}  // namespace

std::unique_ptr<Command> add_graph_command(CLI::App& app) {
  return std::make_unique<GraphCommand>(app);
}

}  // namespace campo::cli
