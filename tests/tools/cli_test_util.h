// Runs the `campo` command line in-process and captures what it prints, for CLI tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
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

// Every line of a JSON-lines file (--metrics), parsed.
inline std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The last line of a run's output that is a JSON object with "event": `event` (a command's
// JSON result line by default); a test failure, and an empty object, when there is none.
inline nlohmann::json json_event(const std::string& out, const std::string& event = "result") {
  std::istringstream lines(out);
  nlohmann::json found = nlohmann::json::object();
  bool any = false;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("{\"", 0) == 0 &&
        line.find("\"event\":\"" + event + "\"") != std::string::npos) {
      found = nlohmann::json::parse(line);
      any = true;
    }
  if (!any) ADD_FAILURE() << "no JSON line of event " << event << " in:\n" << out;
  return found;
}

}  // namespace campo::testing
