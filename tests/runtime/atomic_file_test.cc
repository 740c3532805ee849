// AtomicFile: a save removes the temporary files that killed writers of the same path left
// behind ("<path>.tmp.<pid>" of a dead pid), and nothing else: not a live process's
// temporary file, not another path's, not a name that only looks similar.
#include "runtime/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace campo {
namespace {

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("campo_atomic_file_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void touch(const std::string& name) const { std::ofstream(dir_ / name) << "partial"; }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  fs::path dir_;
};

// The pid of a child that has exited and been reaped: no process has it (until the kernel
// hands it out again, which takes a full turn of the pid space).
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST_F(AtomicFileTest, SaveRemovesStaleTemporaryFilesOfDeadWritersOnly) {
  const std::string dead = std::to_string(dead_pid());
  const std::string dead_2 = std::to_string(dead_pid());
  touch("ck.safetensors.tmp." + dead);        // a killed writer of this path: removed
  touch("ck.safetensors.tmp." + dead_2);      // another one: removed
  touch("ck.safetensors.tmp.1");              // pid 1 is alive: kept
  touch("other.safetensors.tmp." + dead);     // another path's: kept
  touch("ck.safetensors.tmp." + dead + "x");  // not a pid: kept
  touch("ck.safetensors.tmp.0" + dead);       // zero-padded, not one we write: kept
  touch("xck.safetensors.tmp." + dead);       // another basename: kept
  fs::create_directory(dir_ / ("ck.safetensors.tmp.9" + dead));  // a directory: kept

  write_file_atomically(path("ck.safetensors"), "new");

  std::vector<std::string> expected = {"ck.safetensors",
                                       "ck.safetensors.tmp.0" + dead,
                                       "ck.safetensors.tmp.1",
                                       "ck.safetensors.tmp." + dead + "x",
                                       "ck.safetensors.tmp.9" + dead,
                                       "other.safetensors.tmp." + dead,
                                       "xck.safetensors.tmp." + dead};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files(), expected);
  std::ifstream in(dir_ / "ck.safetensors");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "new");
}

TEST_F(AtomicFileTest, LiveWritersTemporaryFileIsKept) {
  // A child that stays alive while the parent saves the same path: its file must survive.
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  pid_t child = ::fork();
  if (child == 0) {
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    (void)!::read(release[0], &c, 1);
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const std::string live = "ck.safetensors.tmp." + std::to_string(child);
  touch(live);
  write_file_atomically(path("ck.safetensors"), "new");
  EXPECT_EQ(files(), (std::vector<std::string>{"ck.safetensors", live}));
  (void)!::write(release[1], &c, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
  // Now its writer is gone, the next save cleans it up.
  write_file_atomically(path("ck.safetensors"), "newer");
  EXPECT_EQ(files(), std::vector<std::string>{"ck.safetensors"});
}

}  // namespace
}  // namespace campo
