// Runs the `campo` command line in-process and captures what it prints, for CLI tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tools/cli.h"

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

// The run failed with one `campo: error: ...` line that contains `needle` (no crash dump).
inline void expect_error(const CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("campo: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "stderr: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace campo::testing
