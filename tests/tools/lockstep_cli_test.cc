// `campo bench --lockstep` as an orchestrator drives it: the binary, commands piped to its
// stdin, the protocol read from its stdout (the table goes to stderr).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

TEST(LockstepCliTest, ReadyLineThenOneResultLinePerRunThenExitZero) {
  testing::TempDir dir;
  const std::string command =
      "printf 'run\\nrun\\n' | '" + std::string(CAMPO_BINARY) +
      "' bench --lockstep --model lenet --batch 8 --precision fp32,amp --steps 1 --warmup 1 "
      "--no-peak --json '" +
      dir.file("b.json") + "' 2>'" + dir.file("stderr.txt") + "'";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  std::istringstream lines(out);
  std::string line;
  std::vector<nlohmann::json> msgs;
  while (std::getline(lines, line)) msgs.push_back(nlohmann::json::parse(line));  // JSON only
  ASSERT_EQ(msgs.size(), 3u) << out;
  EXPECT_EQ(msgs[0]["ready"], true);
  EXPECT_EQ(msgs[0]["framework"], std::string("campo ") + CAMPO_VERSION);
  EXPECT_EQ(msgs[0]["model"], "lenet");
  EXPECT_EQ(msgs[0]["precisions"], (nlohmann::json{"fp32", "amp"}));
  EXPECT_EQ(msgs[0]["gemm_flops_per_step"], 36222720 / 2);  // batch 8 (flops_test: batch 16)
  EXPECT_GT(msgs[0]["params"].get<int64_t>(), 0);
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_GT(msgs[i]["samples_per_sec"]["fp32"].get<double>(), 0) << msgs[i].dump();
    EXPECT_GT(msgs[i]["samples_per_sec"]["amp"].get<double>(), 0) << msgs[i].dump();
  }
}

TEST(LockstepCliTest, RepeatsWithLockstepIsAnError) {
  testing::expect_error(
      testing::run_cli({"bench", "--lockstep", "--repeats", "3", "--model", "lenet"}),
      "--repeats does not apply to --lockstep");
}

}  // namespace
}  // namespace campo
