// Options whose value is a file or directory, of every subcommand: marked where they are
// added (`->check(kPath)`) and checked once, after the command line is parsed (tools/cli.cc),
// so an empty path never means "not given" (a default) in one place and a file named "" in
// another: it is refused everywhere with the same line.
#pragma once

#include <CLI/CLI.hpp>

namespace campo::cli {

// The mark; it checks nothing itself and adds nothing to the help.
extern const CLI::Validator kPath;
// Whether `option` carries the mark.
bool is_path_option(CLI::Option* option);
// Every given path option of `cmd` is not empty: "--X needs a path, got an empty one".
void check_paths_given(CLI::App* cmd);

}  // namespace campo::cli
