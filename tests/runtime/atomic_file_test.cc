// AtomicFile: the temporary is a new file with an unpredictable name next to the target,
// created exclusively, never through a link planted in the folder; it gets the mode a plain
// open() would give; a missing folder is an error, never created; a save removes the
// temporaries that killed writers left in the folder
// (".<name>.campo-tmp-<pid>-<start>-<random>" of a writer that is gone, regular files of
// this user) and nothing else.
#include "runtime/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/check.h"

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
  void touch(const std::string& name, const std::string& text = "partial") const {
    std::ofstream(dir_ / name) << text;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(dir_ / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::vector<std::string> files(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::vector<std::string> files() const { return files(dir_); }
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

// The temporary name a writer of `basename` with `pid` started at `start` would use (0:
// its start time is unknown).
std::string temporary(const std::string& basename, pid_t pid, uint64_t start = 0,
                      const std::string& random = "AbCdEf012345") {
  return "." + basename + ".campo-tmp-" + std::to_string(pid) + "-" + std::to_string(start) + "-" +
         random;
}

TEST(TemporaryFileNameTest, OnlyTheExactFormIsATemporary) {
  int pid = 0;
  uint64_t start = 0;
  EXPECT_TRUE(
      is_temporary_file_name(".ck.safetensors.campo-tmp-4242-987-AbCdEf012345", &pid, &start));
  EXPECT_EQ(pid, 4242);
  EXPECT_EQ(start, 987u);
  EXPECT_TRUE(is_temporary_file_name("..campo-tmp-1-0-zzzzzzzzzzzz", &pid, &start));
  EXPECT_EQ(pid, 1);
  EXPECT_EQ(start, 0u);
  for (const char* name : {
           "ck.safetensors.campo-tmp-4242-987-AbCdEf012345",         // no leading dot
           ".ck.safetensors.campo-tmp-4242-987-AbCdEf01234",         // 11 random characters
           ".ck.safetensors.campo-tmp-4242-987-AbCdEf0123456",       // 13 random characters
           ".ck.safetensors.campo-tmp-04242-987-AbCdEf012345",       // zero-padded pid
           ".ck.safetensors.campo-tmp-4242-0987-AbCdEf012345",       // zero-padded start
           ".ck.safetensors.campo-tmp-0-987-AbCdEf012345",           // pid 0
           ".ck.safetensors.campo-tmp--987-AbCdEf012345",            // no pid
           ".ck.safetensors.campo-tmp-4242-AbCdEf012345",            // no start
           ".ck.safetensors.campo-tmp-4242-987-AbCdEf01234.",        // not alphanumeric
           ".ck.safetensors.campo-tmp-1234567890-987-AbCdEf012345",  // a 10-digit pid
           ".ck.safetensors.campo_tmp-4242-987-AbCdEf012345",        // another infix
           ".ck.safetensors.tmp.4242",                               // the old scheme
       })
    EXPECT_FALSE(is_temporary_file_name(name, &pid, &start)) << name;
}

TEST_F(AtomicFileTest, TemporaryIsAHiddenFileWithARandomNameNextToTheTarget) {
  std::string first, second;
  {
    AtomicFile a(path("ck.safetensors"), "checkpoint");
    AtomicFile b(path("ck.safetensors"), "checkpoint");  // the same path, twice at once
    first = a.temporary_name();
    second = b.temporary_name();
    EXPECT_EQ(files(),
              (std::vector<std::string>{std::min(first, second), std::max(first, second)}));
  }
  EXPECT_NE(first, second);
  const uint64_t own_start = process_start_ticks(::getpid());
  ASSERT_GT(own_start, 0u);
  const std::string prefix = ".ck.safetensors.campo-tmp-" + std::to_string(::getpid()) + "-" +
                             std::to_string(own_start) + "-";
  EXPECT_TRUE(first.starts_with(prefix)) << first;
  int pid = 0;
  uint64_t start = 0;
  EXPECT_TRUE(is_temporary_file_name(first, &pid, &start)) << first;
  EXPECT_EQ(pid, ::getpid());
  EXPECT_EQ(start, own_start);
  EXPECT_TRUE(files().empty());  // neither committed: both temporaries are gone
}

// A symbolic link planted at every name a writer could be expected to use (the old scheme's
// "<path>.tmp.<pid>" for this process and its neighbours, the new scheme's prefix with
// guessed suffixes, a dangling link, the same in a folder shared by other users) is never
// followed: the files they point to keep their bytes, a dangling link's target is not
// created, and the links stay as they were.
TEST_F(AtomicFileTest, LinksPlantedAtTemporaryNamesAreNeverFollowed) {
  fs::create_directory(dir_ / "victims");
  const fs::path victim = dir_ / "victims" / "precious";
  std::ofstream(victim) << "precious";
  const fs::path absent = dir_ / "victims" / "absent";
  std::vector<std::string> links;
  auto plant = [&](const std::string& name, const fs::path& to) {
    fs::create_symlink(to, dir_ / name);
    links.push_back(name);
  };
  const pid_t me = ::getpid();
  for (pid_t pid = std::max(1, me - 50); pid <= me + 50; ++pid)
    plant("ck.safetensors.tmp." + std::to_string(pid), pid % 2 ? victim : absent);
  for (const char* random : {"000000000000", "AAAAAAAAAAAA", "zzzzzzzzzzzz", "AbCdEf012345"})
    plant(temporary("ck.safetensors", me, process_start_ticks(me), random), victim);
  plant(temporary("ck.safetensors", dead_pid()), victim);  // a "stale" one: a link, kept
  std::sort(links.begin(), links.end());

  for (int i = 0; i < 3; ++i) write_file_atomically(path("ck.safetensors"), "new");

  EXPECT_EQ(read("victims/precious"), "precious");
  EXPECT_FALSE(fs::exists(absent));
  EXPECT_EQ(files(dir_ / "victims"), std::vector<std::string>{"precious"});
  EXPECT_EQ(read("ck.safetensors"), "new");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir_ / "ck.safetensors")));
  std::vector<std::string> expected = links;
  expected.push_back("ck.safetensors");
  expected.push_back("victims");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files(), expected);
  for (const std::string& name : links)
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir_ / name))) << name;
}

// A name as long as a folder entry can be (255 bytes) is written: the temporary keeps only
// the first 128 bytes of it, so that its own name fits too.
TEST_F(AtomicFileTest, TheLongestFileNameIsWritten) {
  const std::string name(255, 'n');
  write_file_atomically(path(name), "new");
  EXPECT_EQ(read(name), "new");
  EXPECT_EQ(files(), std::vector<std::string>{name});
}

// A target that is itself a link is replaced by the new file; what it pointed to stays.
TEST_F(AtomicFileTest, ALinkAtTheTargetIsReplacedNotFollowed) {
  touch("elsewhere", "precious");
  fs::create_symlink(dir_ / "elsewhere", dir_ / "out.json");
  write_file_atomically(path("out.json"), "new");
  EXPECT_EQ(read("elsewhere"), "precious");
  EXPECT_EQ(read("out.json"), "new");
  EXPECT_FALSE(fs::is_symlink(fs::symlink_status(dir_ / "out.json")));
}

// A new file gets 0666 less the umask, as open(2) would give it; a replaced file keeps its
// permission bits (as writing it in place would).
TEST_F(AtomicFileTest, ModeIsThatOfAPlainOpen) {
  auto mode = [&](const std::string& name) {
    struct stat st {};
    EXPECT_EQ(::stat(path(name).c_str(), &st), 0) << name;
    return st.st_mode & 07777;
  };
  const mode_t old_umask = ::umask(0);
  write_file_atomically(path("open.json"), "x");
  ::umask(027);
  write_file_atomically(path("group.json"), "x");
  ::umask(0077);
  touch("shared.json");
  fs::permissions(dir_ / "shared.json", fs::perms(0664));
  write_file_atomically(path("shared.json"), "x");
  touch("private.json");
  fs::permissions(dir_ / "private.json", fs::perms(0600));
  ::umask(0);
  write_file_atomically(path("private.json"), "x");
  ::umask(old_umask);
  EXPECT_EQ(mode("open.json"), 0666u);
  EXPECT_EQ(mode("group.json"), 0640u);
  EXPECT_EQ(mode("shared.json"), 0664u);
  EXPECT_EQ(mode("private.json"), 0600u);
}

// An output's folder is never created: a missing one is one clear error, and nothing is
// left behind.
TEST_F(AtomicFileTest, MissingFolderIsAnErrorAndIsNotCreated) {
  try {
    write_file_atomically(path("no/such/out.json"), "x", "JSON file");
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write JSON file " + path("no/such/out.json") +
                                         ": folder " + path("no/such") + " does not exist");
  }
  EXPECT_FALSE(fs::exists(dir_ / "no"));
  touch("file");
  EXPECT_THROW(write_file_atomically(path("file/out.json"), "x"), Error);
  EXPECT_EQ(files(), std::vector<std::string>{"file"});
}

TEST_F(AtomicFileTest, UncommittedWriteLeavesTheOldFile) {
  touch("ck.safetensors", "old");
  {
    AtomicFile f(path("ck.safetensors"));
    f.write("new", 3);
  }  // an error between write and commit
  EXPECT_EQ(read("ck.safetensors"), "old");
  EXPECT_EQ(files(), std::vector<std::string>{"ck.safetensors"});
}

TEST_F(AtomicFileTest, SaveRemovesStaleTemporaryFilesOfDeadWritersOnly) {
  const pid_t dead = dead_pid(), dead_2 = dead_pid(), me = ::getpid();
  const uint64_t my_start = process_start_ticks(me);
  ASSERT_GT(my_start, 1u);
  touch(temporary("ck.safetensors", dead));           // a killed writer of this path: removed
  touch(temporary("ck.safetensors", dead_2, 12345));  // another one: removed
  touch(temporary("other.safetensors", dead));        // another path's, same folder: removed
  touch(
      temporary("ck.safetensors", me, my_start - 1));  // an earlier process with this pid: removed
  touch(temporary("ck.safetensors", 1));               // pid 1 is alive: kept
  touch(temporary("ck.safetensors", me, my_start));    // this process's: kept
  touch(temporary("ck.safetensors", me));              // this pid, start unknown: kept
  touch(temporary("ck.safetensors", dead, 0, "short"));  // not the form: kept
  touch("ck.safetensors.tmp." + std::to_string(dead));   // not the form: kept
  fs::create_directory(dir_ / temporary("ck.safetensors", dead, 0, "DIRECTORY000"));  // kept
  fs::create_directory(dir_ / "sub");
  std::ofstream(dir_ / "sub" / temporary("ck.safetensors", dead)) << "x";  // another folder

  write_file_atomically(path("ck.safetensors"), "new");

  std::vector<std::string> expected = {"ck.safetensors",
                                       temporary("ck.safetensors", 1),
                                       temporary("ck.safetensors", me, my_start),
                                       temporary("ck.safetensors", me),
                                       temporary("ck.safetensors", dead, 0, "short"),
                                       "ck.safetensors.tmp." + std::to_string(dead),
                                       temporary("ck.safetensors", dead, 0, "DIRECTORY000"),
                                       "sub"};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files(), expected);
  EXPECT_EQ(files(dir_ / "sub").size(), 1u);
  EXPECT_EQ(read("ck.safetensors"), "new");
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
  const std::string live = temporary("ck.safetensors", child, process_start_ticks(child));
  touch(live);
  // The same pid with another start time: a writer before this child that had the pid.
  touch(temporary("ck.safetensors", child, process_start_ticks(child) + 1));
  write_file_atomically(path("ck.safetensors"), "new");
  EXPECT_EQ(files(), (std::vector<std::string>{live, "ck.safetensors"}));
  (void)!::write(release[1], &c, 1);
  int status = 0;
  ::waitpid(child, &status, 0);
  for (int fd : {ready[0], ready[1], release[0], release[1]}) ::close(fd);
  // Now its writer is gone, the next save cleans it up.
  write_file_atomically(path("ck.safetensors"), "newer");
  EXPECT_EQ(files(), std::vector<std::string>{"ck.safetensors"});
}

// A writer killed with SIGKILL whose parent has not collected it yet (a zombie: it has
// exited and closed its files) is gone too: its temporary goes with the next save. Before,
// kill(pid, 0) took the zombie for a live process and the leftover stayed.
TEST_F(AtomicFileTest, KilledWriterNotYetReapedIsDead) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    char c = 1;
    (void)!::write(ready[1], &c, 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  touch(temporary("ck.safetensors", child, process_start_ticks(child)));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  siginfo_t info{};  // wait until it is a zombie, without reaping it
  ASSERT_EQ(::waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT), 0);
  write_file_atomically(path("ck.safetensors"), "new");
  EXPECT_EQ(files(), std::vector<std::string>{"ck.safetensors"});
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace campo
