// Ctrl-C and SIGTERM during `campo train`: the step finishes, the checkpoint is written
// (with --save), one line says so and the exit code is 128 + signal. The binary runs as a
// child process; the signal goes out once its first progress line has arrived.
#include "train/interrupt.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "graph/checkpoint.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

struct ChildResult {
  int exit_code = -1;    // -1 when killed by a signal
  int killed_by = 0;     // the signal that ended it, if one did
  std::string out, err;  // all of stdout, and stderr
};

// Runs the campo binary with `args`; once a stdout line starts with `trigger`, sends
// `signal` (0: none) `times` times in a row and then reads to the end. The child starts
// with SIGINT, SIGTERM and SIGHUP at their default action (whatever this test process
// inherited), except `ignored` (0: none), which it starts with ignored, as nohup does.
ChildResult run_and_signal(const std::vector<std::string>& args, const std::string& trigger,
                           int signal, const fs::path& err_file, int times = 1, int ignored = 0) {
  // Everything the child needs is made before fork (the test process has threads, so the
  // child may only make async-signal-safe calls before exec).
  std::vector<char*> argv = {const_cast<char*>(CAMPO_BINARY)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int err = open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int out_pipe[2];
  EXPECT_EQ(pipe2(out_pipe, O_CLOEXEC), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) std::signal(s, s == ignored ? SIG_IGN : SIG_DFL);
    execv(CAMPO_BINARY, argv.data());
    _exit(127);
  }
  close(err);
  close(out_pipe[1]);
  ChildResult r;
  FILE* out = fdopen(out_pipe[0], "r");
  char line[4096];
  bool sent = false;
  while (std::fgets(line, sizeof line, out)) {
    r.out += line;
    if (!sent && signal != 0 && std::string(line).rfind(trigger, 0) == 0) {
      for (int i = 0; i < times; ++i) kill(pid, signal);
      sent = true;
    }
  }
  std::fclose(out);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.killed_by = WTERMSIG(status);
  std::ifstream e(err_file);
  std::stringstream ss;
  ss << e.rdbuf();
  r.err = ss.str();
  return r;
}

class InterruptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("campo_interrupt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A lenet run far longer than the test waits for: 100 steps per epoch, a progress line
  // every 10 steps.
  std::vector<std::string> long_run(std::vector<std::string> extra) const {
    std::vector<std::string> a = {
        "train",    "--model",    "lenet", "--dataset",     "synthetic", "--precision",
        "fp32",     "--batch",    "8",     "--limit-train", "800",       "--limit-test",
        "16",       "--epochs",   "200",   "--steps",       "20000",     "--lr-schedule",
        "constant", "--progress", "lines"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  ChildResult run(const std::vector<std::string>& args, int signal) const {
    return run_and_signal(args, "epoch ", signal, dir_ / "stderr.txt");
  }
  fs::path dir_;
};

TEST_F(InterruptTest, SigintSavesTheCheckpointAndResumeContinues) {
  const std::string ckpt = (dir_ / "run.safetensors").string();
  ChildResult r = run(long_run({"--save", ckpt}), SIGINT);
  EXPECT_EQ(r.killed_by, 0) << "killed by signal " << r.killed_by;
  EXPECT_EQ(r.exit_code, 130) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.err, m,
      std::regex("campo: interrupted \\(SIGINT\\) at step ([0-9]+); checkpoint written "
                 "to (.*); resume with --resume (.*)\n")))
      << r.err;
  EXPECT_EQ(m[2].str(), ckpt);
  EXPECT_EQ(m[3].str(), ckpt);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  ASSERT_TRUE(fs::exists(ckpt));
  // No stray temporary file next to it.
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_TRUE(entry.path().filename() == "run.safetensors" ||
                entry.path().filename() == "stderr.txt")
        << entry.path();

  const int64_t stopped = std::stoll(m[1].str());
  ASSERT_GE(stopped, 10);
  std::vector<std::string> resume = long_run({"--resume", ckpt});
  for (size_t i = 0; i + 1 < resume.size(); ++i)
    if (resume[i] == "--steps") resume[i + 1] = std::to_string(stopped + 2);
  ChildResult again = run(resume, 0);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("resumed from " + ckpt + " at step " + std::to_string(stopped)),
            std::string::npos)
      << again.out;
  EXPECT_NE(again.out.find("\"steps\":" + std::to_string(stopped + 2)), std::string::npos)
      << again.out;
}

// `timeout -s INT` signals campo and then its process group: the same SIGINT twice within
// microseconds. The duplicate is ignored and the checkpoint written (before, the one-shot
// handler took it for a second Ctrl-C and the run died without saving, 2 times in 10).
TEST_F(InterruptTest, ADuplicateSignalStillSavesTheCheckpoint) {
  const std::string ckpt = (dir_ / "dup.safetensors").string();
  ChildResult r = run_and_signal(long_run({"--save", ckpt}), "epoch ", SIGINT, dir_ / "stderr.txt",
                                 /*times=*/2);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("checkpoint written to " + ckpt), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(ckpt));
}

// A closed terminal or ssh session (SIGHUP) saves like Ctrl-C and exits 129.
TEST_F(InterruptTest, SighupSavesTheCheckpointAndExitsWith129) {
  const std::string ckpt = (dir_ / "hup.safetensors").string();
  ChildResult r = run(long_run({"--save", ckpt}), SIGHUP);
  EXPECT_EQ(r.exit_code, 129) << r.err;
  EXPECT_NE(r.err.find("campo: interrupted (SIGHUP) at step "), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(ckpt));
}

// `nohup campo train ...`, or a script's background job (the shell ignores its SIGINT):
// a signal ignored when campo starts stays ignored, and the run completes as if it had not
// come. Before, campo installed its handler over SIG_IGN and stopped the run at once.
TEST_F(InterruptTest, SignalIgnoredAtStartStaysIgnored) {
  for (int signal : {SIGHUP, SIGINT}) {
    SCOPED_TRACE(signal_name(signal));
    const std::string ckpt = (dir_ / "nohup.safetensors").string();
    std::vector<std::string> args = long_run({"--save", ckpt});
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--steps") args[i + 1] = "200";
    ChildResult r = run_and_signal(args, "epoch ", signal, dir_ / "stderr.txt", /*times=*/3,
                                   /*ignored=*/signal);
    EXPECT_EQ(r.killed_by, 0) << "killed by signal " << r.killed_by;
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("interrupted"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("\"steps\":200"), std::string::npos) << r.out;
    EXPECT_TRUE(fs::exists(ckpt));
    fs::remove(ckpt);
  }
}

TEST_F(InterruptTest, SigtermExitsWith143) {
  const std::string ckpt = (dir_ / "run.safetensors").string();
  ChildResult r = run(long_run({"--save", ckpt}), SIGTERM);
  EXPECT_EQ(r.exit_code, 143) << "killed by " << r.killed_by << ": " << r.err;
  EXPECT_NE(r.err.find("campo: interrupted (SIGTERM) at step "), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(ckpt));
}

TEST_F(InterruptTest, WithoutSaveStillSaysSoAndFails) {
  ChildResult r = run(long_run({}), SIGINT);
  EXPECT_EQ(r.exit_code, 130) << "killed by " << r.killed_by << ": " << r.err;
  EXPECT_NE(r.err.find("; no checkpoint written (no --save given)"), std::string::npos) << r.err;
}

// dcgan saves both networks on Ctrl-C as the classifiers do (with --save), and says so.
TEST_F(InterruptTest, DcganSavesTheCheckpoint) {
  const std::string ckpt = (dir_ / "gan.safetensors").string();
  ChildResult r = run({"train",
                       "--model",
                       "dcgan",
                       "--dataset",
                       "synthetic",
                       "--image-size",
                       "32",
                       "--precision",
                       "fp32",
                       "--batch",
                       "4",
                       "--limit-train",
                       "400",
                       "--epochs",
                       "100",
                       "--progress",
                       "lines",
                       "--samples-dir",
                       (dir_ / "samples").string(),
                       "--save",
                       ckpt},
                      SIGINT);
  EXPECT_EQ(r.exit_code, 130) << "killed by " << r.killed_by << ": " << r.err;
  EXPECT_NE(r.err.find("campo: interrupted (SIGINT) at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; checkpoint written to " + ckpt), std::string::npos) << r.err;
  ASSERT_TRUE(fs::exists(ckpt));
  EXPECT_EQ(read_safetensors_metadata(ckpt).at("campo.model"), "dcgan");
}

TEST_F(InterruptTest, DcganWithoutSaveSaysSo) {
  ChildResult r = run({"train", "--model", "dcgan", "--dataset", "synthetic", "--image-size", "32",
                       "--precision", "fp32", "--batch", "4", "--limit-train", "400", "--epochs",
                       "100", "--progress", "lines", "--samples-dir", (dir_ / "samples").string()},
                      SIGINT);
  EXPECT_EQ(r.exit_code, 130) << "killed by " << r.killed_by << ": " << r.err;
  EXPECT_NE(r.err.find("; no checkpoint written (no --save given)"), std::string::npos) << r.err;
}

// The handler records the first signal and stays installed: a duplicate within the window
// is ignored (the process lives on, the first signal stays recorded); the scope's end
// restores the previous handlers.
// Sets SIGINT, SIGTERM and SIGHUP to their default action for its lifetime (the test
// process may have inherited them ignored, e.g. as a script's background job).
class DefaultSignals {
 public:
  DefaultSignals() {
    for (size_t i = 0; i < 3; ++i) saved_[i] = std::signal(kSignals[i], SIG_DFL);
  }
  ~DefaultSignals() {
    for (size_t i = 0; i < 3; ++i) std::signal(kSignals[i], saved_[i]);
  }

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  sighandler_t saved_[3];
};

TEST(InterruptScopeTest, FirstSignalIsRecordedAndADuplicateIsIgnored) {
  DefaultSignals defaults;
  struct sigaction before = {};
  sigaction(SIGINT, nullptr, &before);
  {
    InterruptScope scope;
    EXPECT_EQ(interrupt_signal(), 0);
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction installed = {};
      sigaction(signal, nullptr, &installed);
      // Reads and waits the signal interrupts resume (no spurious EINTR in the data loader).
      EXPECT_TRUE(installed.sa_flags & SA_RESTART) << signal_name(signal);
      EXPECT_FALSE(installed.sa_flags & SA_RESETHAND) << signal_name(signal);
    }
    std::raise(SIGINT);
    EXPECT_EQ(interrupt_signal(), SIGINT);
    std::raise(SIGTERM);  // within the window: the same request, ignored
    std::raise(SIGINT);
    EXPECT_EQ(interrupt_signal(), SIGINT);
  }
  struct sigaction after = {};
  sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  InterruptScope next;  // a new scope starts clear
  EXPECT_EQ(interrupt_signal(), 0);
}

// A second signal after the window is a second request: the default action, at once (in a
// child process, which only makes async-signal-safe calls after fork).
TEST(InterruptScopeTest, ASecondSignalAfterTheWindowEndsTheProcess) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::signal(SIGINT, SIG_DFL);
    InterruptScope scope;
    std::raise(SIGINT);
    const timespec wait = {1, 200000000};  // past kDuplicateWindowNs
    nanosleep(&wait, nullptr);
    std::raise(SIGINT);
    _exit(0);  // not reached when the second signal ends the process
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

// A signal ignored when the scope begins stays ignored in it (no handler), and after it;
// the others get the handler.
TEST(InterruptScopeTest, AnIgnoredSignalStaysIgnored) {
  DefaultSignals defaults;
  std::signal(SIGHUP, SIG_IGN);
  {
    InterruptScope scope;
    struct sigaction hup = {}, term = {};
    sigaction(SIGHUP, nullptr, &hup);
    sigaction(SIGTERM, nullptr, &term);
    EXPECT_EQ(hup.sa_handler, SIG_IGN);
    EXPECT_NE(term.sa_handler, SIG_IGN);
    EXPECT_NE(term.sa_handler, SIG_DFL);
    std::raise(SIGHUP);
    EXPECT_EQ(interrupt_signal(), 0);
  }
  struct sigaction after = {};
  sigaction(SIGHUP, nullptr, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
}

TEST(InterruptedTest, MessageAndExitCode) {
  Interrupted a(SIGINT, "at step 37", "x.safetensors", "");
  EXPECT_STREQ(a.what(),
               "interrupted (SIGINT) at step 37; checkpoint written to x.safetensors; resume "
               "with --resume x.safetensors");
  EXPECT_EQ(a.exit_code(), 130);
  Interrupted b(SIGTERM, "at step 3", "", "no --save given");
  EXPECT_STREQ(b.what(),
               "interrupted (SIGTERM) at step 3; no checkpoint written (no --save given)");
  EXPECT_EQ(b.exit_code(), 143);
}

}  // namespace
}  // namespace campo
