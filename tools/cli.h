// The campo command line: subcommands train, eval, and --version.
#pragma once

#include <string>
#include <vector>

namespace campo::cli {

// Parses argv, runs the subcommand, returns the process exit code. Errors are printed
// as one line "campo: error: ..." on stderr with a non-zero return.
int main(int argc, char** argv);
int run(const std::vector<std::string>& args);

}  // namespace campo::cli
