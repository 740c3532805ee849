// The subcommands of `campo`, one file each (tools/<name>_command.cc): each adds itself and
// its options to the command line, and runs once the line is parsed, owning its options and
// its one call into train/ or perf/. tools/cli.cc is the dispatch.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace campo::cli {

class Command {
 public:
  virtual ~Command() = default;
  // Whether the command line named this subcommand.
  bool parsed() const { return app_->parsed(); }
  // The subcommand's own options (tools/cli.cc checks their paths before run).
  CLI::App* app() const { return app_; }
  // Runs it (after the command line is parsed); returns the exit code. Errors throw.
  virtual int run() = 0;

 protected:
  CLI::App* app_ = nullptr;  // the subcommand's own
};

// Each adds its subcommand to `app`, in the order `campo --help` lists them.
std::unique_ptr<Command> add_train_command(CLI::App& app);
std::unique_ptr<Command> add_graph_command(CLI::App& app);
std::unique_ptr<Command> add_predict_command(CLI::App& app);
std::unique_ptr<Command> add_eval_command(CLI::App& app);
std::unique_ptr<Command> add_plan_command(CLI::App& app);
std::unique_ptr<Command> add_bench_command(CLI::App& app);
std::unique_ptr<Command> add_calibrate_command(CLI::App& app);

// Every option of every subcommand whose value is a path (tools/options.h's kPath), as
// (subcommand, option): each is refused when given empty, with one line (tests walk it).
std::vector<std::pair<std::string, std::string>> path_options();

}  // namespace campo::cli
