// train/metrics_log.h: CRC-32C against its published check values; the event file decoded
// by hand (framing, both CRCs, the protobuf fields) and the --metrics lines, each complete
// as soon as it is logged; resumed runs; the paths refused before any work.
#include "train/metrics_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/train/tfevents_reader.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::DecodedEvent;
using testing::error_message;
using testing::event_files;
using testing::read_event_file;
using testing::scalar_of;
using testing::TempDir;

// The lines of a file as written.
std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  for (const std::string& line : read_lines(path)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(Crc32cTest, KnownCheckValues) {
  // The catalogued check value of CRC-32C, and RFC 3720 (iSCSI) B.4's vectors.
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  const std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xff);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32cTest, MaskRotatesAndAddsTheConstant) {
  const std::string digits = "123456789";
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(masked_crc32c(digits.data(), digits.size()),
            uint32_t(((crc >> 15) | (crc << 17)) + 0xa282ead8u));
}

TEST(MetricsLogTest, LoggedStepsAreEveryTenthOfAnEpochAndTheLast) {
  std::vector<int64_t> logged;
  for (int64_t s = 1; s <= 100; ++s)
    if (is_logged_step(s, 100, s == 100)) logged.push_back(s);
  EXPECT_EQ(logged, (std::vector<int64_t>{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}));
  for (int64_t s = 1; s <= 6; ++s) EXPECT_TRUE(is_logged_step(s, 6, s == 6)) << s;
  EXPECT_FALSE(is_logged_step(7, 35, false));  // every 3rd of 35
  EXPECT_TRUE(is_logged_step(7, 35, true));    // the run's last step
}

TEST(MetricsLogTest, EventFileDecodesToTheLoggedScalars) {
  TempDir dir;
  const std::string tb = dir.file("tb/run1");  // created, with its parent
  const double before = now_seconds();
  {
    MetricsLog log({.tensorboard_dir = tb});
    EXPECT_TRUE(log.enabled());
    log.log_step({.step = 5,
                  .epoch = 1,
                  .losses = {2.25},
                  .lrs = {0.05f},
                  .loss_scale = 1024.0f,
                  .skipped_steps = 2,
                  .samples_per_sec = 1234.5});
    log.log_step({.step = 10, .epoch = 2, .losses = {1.5}, .lrs = {0.025f}, .samples_per_sec = 99});
    log.log_eval(10, {0.875});
  }
  const double after = now_seconds();
  const std::vector<std::string> files = event_files(tb);
  ASSERT_EQ(files.size(), 1u);
  const std::string name = fs::path(files[0]).filename().string();
  EXPECT_NE(name.find("." + std::to_string(::getpid()) + ".campo"), std::string::npos) << name;
  const std::vector<DecodedEvent> events = read_event_file(files[0]);
  ASSERT_EQ(events.size(), 4u);
  for (const DecodedEvent& e : events) {
    EXPECT_GE(e.wall_time, before - 1);
    EXPECT_LE(e.wall_time, after + 1);
  }
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].step, 0);
  EXPECT_TRUE(events[0].scalars.empty());

  EXPECT_EQ(events[1].step, 5);
  ASSERT_EQ(events[1].scalars.size(), 4u);
  EXPECT_EQ(events[1].scalars[0].first, "train/loss");
  EXPECT_EQ(scalar_of(events[1], "train/loss"), 2.25f);
  EXPECT_EQ(scalar_of(events[1], "train/lr"), 0.05f);
  EXPECT_EQ(scalar_of(events[1], "train/loss_scale"), 1024.0f);
  EXPECT_EQ(scalar_of(events[1], "train/samples_per_sec"), 1234.5f);
  EXPECT_EQ(events[2].step, 10);
  EXPECT_EQ(scalar_of(events[2], "train/loss"), 1.5f);
  EXPECT_EQ(scalar_of(events[2], "train/lr"), 0.025f);
  EXPECT_EQ(scalar_of(events[2], "train/loss_scale"), 1.0f);
  EXPECT_EQ(events[3].step, 10);
  ASSERT_EQ(events[3].scalars.size(), 1u);
  EXPECT_EQ(scalar_of(events[3], "eval/accuracy"), 0.875f);
}

// The event file is a new file with the mode open(2) gives one (0666 less the umask; it
// was 0644 whatever the umask).
TEST(MetricsLogTest, EventFileHasTheModeOfAPlainOpen) {
  TempDir dir;
  const mode_t old_umask = ::umask(002);
  { MetricsLog log({.tensorboard_dir = dir.str()}); }
  ::umask(old_umask);
  const std::vector<std::string> files = event_files(dir.str());
  ASSERT_EQ(files.size(), 1u);
  struct stat st {};
  ASSERT_EQ(::stat(files[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0664u);
}

TEST(MetricsLogTest, AFlippedByteFailsTheCrc) {
  TempDir dir;
  {
    MetricsLog log({.tensorboard_dir = dir.str()});
    log.log_eval(1, {0.5});
  }
  const std::string path = event_files(dir.str()).at(0);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bytes[bytes.size() - 6] ^= 0x01;  // inside the last record's data
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  try {
    read_event_file(path);
    ADD_FAILURE() << "a corrupt record was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the data's CRC does not match"), std::string::npos)
        << e.what();
  }
}

TEST(MetricsLogTest, MetricsLinesAreCompleteAsSoonAsLogged) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  MetricsLog log({.metrics_path = path, .tensorboard_dir = dir.file("tb")});
  log.log_step({.step = 3,
                .epoch = 1,
                .losses = {0.5},
                .lrs = {0.05f},
                .loss_scale = 65536.0f,
                .skipped_steps = 1,
                .samples_per_sec = 250});
  // Read while the log is still open, as after a crash: every line and record is whole.
  std::vector<std::string> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            R"({"event":"train","step":3,"epoch":1,"loss":0.5,"lr":0.05,"loss_scale":65536,)"
            R"("skipped_steps":1,"samples_per_sec":250})");
  EXPECT_EQ(read_event_file(log.event_file()).size(), 2u);
  log.log_eval(3, {0.25});
  lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], R"({"event":"eval","step":3,"test_accuracy":0.25})");
  EXPECT_EQ(read_event_file(log.event_file()).size(), 3u);
}

// A float (lr, loss scale) reads as the float's shortest text, a double as the double's; a
// non-finite value as null (JSON has no inf).
TEST(MetricsLogTest, NumbersAreTheirShortestText) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  {
    MetricsLog log({.metrics_path = path});
    log.log_step({.step = 1,
                  .epoch = 1,
                  .losses = {0.1 + 0.2},
                  .lrs = {0.03302772f},
                  .loss_scale = 0.5f,
                  .samples_per_sec = std::numeric_limits<double>::infinity()});
  }
  EXPECT_EQ(read_lines(path).at(0),
            R"({"event":"train","step":1,"epoch":1,"loss":0.30000000000000004,"lr":0.03302772,)"
            R"("loss_scale":0.5,"skipped_steps":0,"samples_per_sec":null})");
  EXPECT_EQ(read_json_lines(path).at(0)["lr"].get<float>(), 0.03302772f);
}

TEST(MetricsLogTest, AnArrayLogsEveryModel) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  {
    MetricsLog log({.metrics_path = path, .tensorboard_dir = dir.str(), .models = 2});
    log.log_step(
        {.step = 1, .epoch = 1, .losses = {2.0, 3.0}, .lrs = {0.1f, 0.01f}, .samples_per_sec = 64});
    log.log_eval(1, {0.5, 0.75});
    // A single model's values for an array of two is a bug of the caller.
    EXPECT_THROW(log.log_eval(1, {0.5}), Error);
  }
  const std::vector<nlohmann::json> lines = read_json_lines(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["losses"], (nlohmann::json{2.0, 3.0}));
  EXPECT_EQ(lines[0]["lrs"], (nlohmann::json{0.1, 0.01}));
  EXPECT_FALSE(lines[0].contains("loss"));
  EXPECT_EQ(lines[1]["test_accuracies"], (nlohmann::json{0.5, 0.75}));
  const std::vector<DecodedEvent> events = read_event_file(event_files(dir.str()).at(0));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(scalar_of(events[1], "train/loss/model_0"), 2.0f);
  EXPECT_EQ(scalar_of(events[1], "train/loss/model_1"), 3.0f);
  EXPECT_EQ(scalar_of(events[1], "train/lr/model_1"), 0.01f);
  EXPECT_EQ(scalar_of(events[1], "train/samples_per_sec"), 64.0f);
  EXPECT_EQ(scalar_of(events[2], "eval/accuracy/model_0"), 0.5f);
  EXPECT_EQ(scalar_of(events[2], "eval/accuracy/model_1"), 0.75f);
}

// A session without one loss (DCGAN: the discriminator's and the generator's) logs them by
// name.
TEST(MetricsLogTest, NamedValuesReplaceTheLoss) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  {
    MetricsLog single({.metrics_path = path, .tensorboard_dir = dir.file("one")});
    single.log_step({.step = 2,
                     .epoch = 1,
                     .lrs = {2e-4f},
                     .samples_per_sec = 10,
                     .named = {{"loss_d", {1.25}}, {"loss_g", {0.5}}}});
  }
  EXPECT_EQ(read_lines(path).at(0),
            R"({"event":"train","step":2,"epoch":1,"loss_d":1.25,"loss_g":0.5,"lr":2e-04,)"
            R"("loss_scale":1,"skipped_steps":0,"samples_per_sec":10})");
  const DecodedEvent e = read_event_file(event_files(dir.file("one")).at(0)).at(1);
  EXPECT_EQ(e.scalars.size(), 5u);  // no train/loss
  EXPECT_EQ(scalar_of(e, "train/loss_d"), 1.25f);
  EXPECT_EQ(scalar_of(e, "train/loss_g"), 0.5f);
  {
    MetricsLog array({.metrics_path = path, .tensorboard_dir = dir.file("two"), .models = 2});
    array.log_step({.step = 1,
                    .epoch = 1,
                    .lrs = {2e-4f, 1e-4f},
                    .named = {{"loss_d", {1.0, 2.0}}, {"loss_g", {3.0, 4.0}}}});
    EXPECT_THROW(array.log_step(
                     {.step = 2, .epoch = 1, .lrs = {2e-4f, 1e-4f}, .named = {{"loss_d", {1.0}}}}),
                 Error);
  }
  EXPECT_EQ(read_json_lines(path).at(0)["loss_g"], (nlohmann::json{3.0, 4.0}));
  const DecodedEvent a = read_event_file(event_files(dir.file("two")).at(0)).at(1);
  EXPECT_EQ(scalar_of(a, "train/loss_g/model_1"), 4.0f);
  EXPECT_EQ(scalar_of(a, "train/lr/model_1"), 1e-4f);
}

TEST(MetricsLogTest, AResumedRunAppendsAndTellsTensorBoardWhereItRestarted) {
  TempDir dir;
  const std::string path = dir.file("m.jsonl");
  {
    MetricsLog log({.metrics_path = path, .tensorboard_dir = dir.str()});
    log.log_step({.step = 4, .epoch = 1, .losses = {1.0}, .lrs = {0.1f}});
  }
  {
    MetricsLog log({.metrics_path = path, .tensorboard_dir = dir.str(), .resumed_step = 2});
    log.log_step({.step = 3, .epoch = 1, .losses = {0.9}, .lrs = {0.1f}});
  }
  const std::vector<nlohmann::json> lines = read_json_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["step"], 4);
  EXPECT_EQ(read_lines(path).at(1), R"({"event":"resume","step":2})");
  EXPECT_EQ(lines[2]["step"], 3);
  // Two files (the second of this process in this second sorts after the first); the
  // second starts with SessionLog START at step 3, the first step the resumed run trains.
  const std::vector<std::string> files = event_files(dir.str());
  ASSERT_EQ(files.size(), 2u);
  const std::vector<DecodedEvent> resumed = read_event_file(files[1]);
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_EQ(resumed[0].file_version, "brain.Event:2");
  EXPECT_TRUE(resumed[1].session_start);
  EXPECT_EQ(resumed[1].step, 3);
  EXPECT_EQ(scalar_of(resumed[2], "train/loss"), 0.9f);
  EXPECT_EQ(read_event_file(files[0]).size(), 2u);
}

TEST(MetricsLogTest, NothingGivenWritesNothing) {
  MetricsLog log({});
  EXPECT_FALSE(log.enabled());
  log.log_step({.step = 1, .epoch = 1, .losses = {1.0}, .lrs = {0.1f}});
  log.log_eval(1, {0.5});
  EXPECT_EQ(log.event_file(), "");
}

TEST(MetricsLogTest, PathsThatCannotBeWrittenAreOneLine) {
  TempDir dir;
  std::ofstream(dir.file("file")) << "x";
  std::string e = error_message([&] { check_metrics_outputs(dir.file("no/such/m.jsonl"), ""); });
  EXPECT_NE(e.find("--metrics file " + dir.file("no/such/m.jsonl")), std::string::npos) << e;
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  e = error_message([&] { check_metrics_outputs(dir.str(), ""); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  e = error_message([&] { check_metrics_outputs("", dir.file("file")); });
  EXPECT_NE(e.find("--tensorboard directory " + dir.file("file")), std::string::npos) << e;
  EXPECT_NE(e.find("not a directory"), std::string::npos) << e;
  e = error_message([&] { check_metrics_outputs("", dir.file("file/tb")); });
  EXPECT_NE(e.find("is not a directory"), std::string::npos) << e;
  // A directory to be made is fine, and nothing is made by the check.
  EXPECT_NO_THROW(check_metrics_outputs(dir.file("m.jsonl"), dir.file("a/b/tb")));
  EXPECT_FALSE(fs::exists(dir.file("a")));
  EXPECT_FALSE(fs::exists(dir.file("m.jsonl")));
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir.file("ro"));
    fs::permissions(dir.file("ro"), fs::perms::owner_read | fs::perms::owner_exec);
    e = error_message([&] { check_metrics_outputs("", dir.file("ro/tb")); });
    EXPECT_NE(e.find("not writable"), std::string::npos) << e;
    e = error_message([&] { MetricsLog log({.metrics_path = dir.file("ro/m.jsonl")}); });
    EXPECT_NE(e.find("--metrics file " + dir.file("ro/m.jsonl") + ": cannot open it"),
              std::string::npos)
        << e;
    fs::permissions(dir.file("ro"), fs::perms::owner_all);
  }
}

}  // namespace
}  // namespace campo
