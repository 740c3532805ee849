// Runs the `campo` command line in-process and captures what it prints, for CLI tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/lib/cli.h"

namespace campo::testing {

struct CliResult {
  int code;
  std::string out, err;
};

inline CliResult run_cli(std::vector<std::string> args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = cli::run(args);
  return {code, ::testing::internal::GetCapturedStdout(), ::testing::internal::GetCapturedStderr()};
}

}  // namespace campo::testing
