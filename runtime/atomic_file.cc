#include "runtime/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/check.h"

namespace campo {

template <typename... Args>
void AtomicFile::fail(const Args&... args) {
  CAMPO_FAIL("cannot write ", kind_, " ", path_, ": ", args...);
}

namespace {

constexpr const char* kTempInfix = ".campo-tmp-";
constexpr size_t kRandomChars = 12;         // 62^12 > 2^71 names
constexpr size_t kMaxBasenameInTemp = 128;  // keeps the temporary's name under NAME_MAX
constexpr int kMaxCreateTries = 100;
constexpr char kAlphabet[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

// kRandomChars letters and digits from the kernel's generator; should it be unavailable,
// from the clock, the pid and a counter (the name then is merely unlikely, which O_EXCL
// makes safe all the same: a taken name is retried, never opened).
std::string random_suffix() {
  unsigned char bytes[kRandomChars];
  size_t got = 0;
  while (got < sizeof bytes) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, GRND_NONBLOCK);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  if (got < sizeof bytes) {
    static std::atomic<uint64_t> counter{0};
    timespec t{};
    ::clock_gettime(CLOCK_REALTIME, &t);
    uint64_t x = uint64_t(t.tv_nsec) ^ (uint64_t(t.tv_sec) << 30) ^ (uint64_t(::getpid()) << 20) ^
                 (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
    for (unsigned char& b : bytes) {  // splitmix64 steps
      x += 0x9E3779B97F4A7C15ull;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      b = static_cast<unsigned char>(z ^ (z >> 31));
    }
  }
  std::string s(kRandomChars, '0');
  for (size_t i = 0; i < kRandomChars; ++i) s[i] = kAlphabet[bytes[i] % (sizeof kAlphabet - 1)];
  return s;
}

bool is_alphanumeric(char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

// What /proc/<pid>/stat says of a process: "<pid> (<command, which may hold ')'>) <state>
// <ppid> <pgrp> <session> <tty> <tpgid> <flags> ... <starttime> ..." (fields 3, 9, 22).
struct ProcessStat {
  char state = 0;            // 'R', 'S', ..., 'Z' (zombie), 'X' (dead)
  uint64_t flags = 0;        // the kernel's PF_* flags of its main thread
  uint64_t start_ticks = 0;  // clock ticks after boot at which it started
};

bool read_process_stat(int pid, ProcessStat* out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  fields >> out->state;
  auto number = [&](uint64_t* value) {
    return std::from_chars(field.data(), field.data() + field.size(), *value).ec == std::errc();
  };
  for (int i = 4; i <= 22 && fields >> field; ++i) {
    if (i == 9 && !number(&out->flags)) return false;
    if (i == 22) return number(&out->start_ticks);
  }
  return false;
}

// True when the writer (pid, start_ticks) is gone: no process has the pid; or the process
// that has it started at another time (the pid was reused); or it is exiting (PF_EXITING:
// killed, say with SIGKILL, and tearing down) or a zombie (it has exited and its files are
// closed; only its parent has not collected its status yet). Either way it writes nothing
// more. A process of another user (EPERM) whose /proc entry cannot be read is alive.
bool is_writer_gone(int pid, uint64_t start_ticks) {
  constexpr uint64_t kPfExiting = 0x4;  // PF_EXITING, <linux/sched.h>
  if (::kill(pid_t(pid), 0) != 0) return errno == ESRCH;
  ProcessStat st;
  if (!read_process_stat(pid, &st)) return false;
  if (st.state == 'Z' || st.state == 'X' || (st.flags & kPfExiting)) return true;
  return start_ticks != 0 && st.start_ticks != 0 && st.start_ticks != start_ticks;
}

// Removes the stale temporaries in the folder open as `dir_fd` (see the header).
int remove_stale_temporaries_in(int dir_fd) {
  const int list_fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (list_fd < 0) return 0;
  DIR* dir = ::fdopendir(list_fd);
  if (!dir) {
    ::close(list_fd);
    return 0;
  }
  int removed = 0;
  const uid_t me = ::geteuid();
  while (const dirent* entry = ::readdir(dir)) {
    int pid = 0;
    uint64_t start_ticks = 0;
    if (!is_temporary_file_name(entry->d_name, &pid, &start_ticks)) continue;
    struct stat st {};
    if (::fstatat(dir_fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != me) continue;
    if (!is_writer_gone(pid, start_ticks)) continue;
    // unlinkat removes the name; it never follows a link (and the name is a regular file).
    if (::unlinkat(dir_fd, entry->d_name, 0) == 0) ++removed;
  }
  ::closedir(dir);
  return removed;
}

// This process's start time, read once per process (a forked child reads its own).
uint64_t own_start_ticks() {
  static std::atomic<int> cached_pid{0};
  static std::atomic<uint64_t> cached_ticks{0};
  const int pid = ::getpid();
  if (cached_pid.load() != pid) {
    cached_ticks.store(process_start_ticks(pid));
    cached_pid.store(pid);
  }
  return cached_ticks.load();
}

std::string folder_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

uint64_t process_start_ticks(int pid) {
  ProcessStat st;
  return read_process_stat(pid, &st) ? st.start_ticks : 0;
}

bool is_temporary_file_name(const std::string& name, int* pid, uint64_t* start_ticks) {
  // ".<basename>.campo-tmp-<pid>-<start>-<random>": parsed from the end, as the basename is
  // free. Numbers as we write them: decimal, no leading zero (a start of 0: unknown).
  const size_t infix = std::strlen(kTempInfix);
  if (name.size() < 1 + infix + 4 + kRandomChars || name[0] != '.') return false;
  size_t end = name.size() - kRandomChars;
  if (!std::all_of(name.begin() + long(end), name.end(), is_alphanumeric)) return false;
  // The decimal number that ends just before the '-' at `end`, of at most `max_digits`.
  auto number_before = [&](size_t max_digits, uint64_t* value) {
    if (end == 0 || name[end - 1] != '-') return false;
    size_t at = end - 1;
    while (at > 0 && name[at - 1] >= '0' && name[at - 1] <= '9') --at;
    const size_t digits = end - 1 - at;
    if (digits == 0 || digits > max_digits || (name[at] == '0' && digits > 1)) return false;
    std::from_chars(name.data() + at, name.data() + end - 1, *value);
    end = at;
    return true;
  };
  uint64_t start = 0, id = 0;
  if (!number_before(19, &start) || !number_before(9, &id) || id == 0) return false;
  if (end < 1 + infix || name.compare(end - infix, infix, kTempInfix) != 0) return false;
  *pid = int(id);
  *start_ticks = start;
  return true;
}

int remove_stale_temporary_files(const std::string& path) {
  const int dir_fd = ::open(folder_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return 0;
  const int removed = remove_stale_temporaries_in(dir_fd);
  ::close(dir_fd);
  return removed;
}

AtomicFile::AtomicFile(const std::string& path, const std::string& kind)
    : path_(path), kind_(kind), dir_(folder_of(path)) {
  const std::string basename = std::filesystem::path(path).filename().string();
  if (basename.empty() || basename == "." || basename == "..")
    fail("the path names a folder, not a file");
  dir_fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) {
    const int err = errno;
    if (err == ENOENT) fail("folder ", dir_, " does not exist");
    if (err == ENOTDIR) fail(dir_, " is not a folder");
    fail("cannot open folder ", dir_, ": ", std::strerror(err));
  }
  try {
    remove_stale_temporaries_in(dir_fd_);
    const uint64_t start_ticks = own_start_ticks();
    const std::string prefix = "." + basename.substr(0, kMaxBasenameInTemp) + kTempInfix +
                               std::to_string(::getpid()) + "-" + std::to_string(start_ticks) + "-";
    int err = EEXIST;
    for (int attempt = 0; attempt < kMaxCreateTries && fd_ < 0 && err == EEXIST; ++attempt) {
      tmp_name_ = prefix + random_suffix();
      // 0666: the kernel applies the umask (or the folder's default ACL) as for any new file.
      fd_ = ::openat(dir_fd_, tmp_name_.c_str(),
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      err = fd_ < 0 ? errno : 0;
    }
    if (fd_ < 0) {
      tmp_name_.clear();  // not ours: never removed
      fail("cannot create a temporary file in folder ", dir_, ": ", std::strerror(err));
    }
    // Replacing a file keeps its permission bits (as writing it in place would), set before
    // any data is written. The destination is not followed if it is a link.
    struct stat old {};
    if (::fstatat(dir_fd_, basename.c_str(), &old, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(old.st_mode) && ::fchmod(fd_, old.st_mode & 0777) != 0)
      fail("cannot set the mode of ", dir_, "/", tmp_name_, ": ", std::strerror(errno));
  } catch (...) {
    discard();
    ::close(dir_fd_);
    throw;
  }
}

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!committed_ && !tmp_name_.empty()) ::unlinkat(dir_fd_, tmp_name_.c_str(), 0);
  tmp_name_.clear();
}

AtomicFile::~AtomicFile() {
  discard();
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

void AtomicFile::write(const void* data, size_t n) {
  CAMPO_CHECK(fd_ >= 0, "internal: write to ", path_, " after commit");
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = ::write(fd_, p, std::min<size_t>(n, 1u << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail("write error on ", dir_, "/", tmp_name_, ": ", std::strerror(errno));
    p += put;
    n -= size_t(put);
  }
}

// fsync the data, rename over the target, fsync the folder so the rename persists.
void AtomicFile::commit() {
  CAMPO_CHECK(fd_ >= 0, "internal: ", path_, " committed twice");
  const std::string tmp = dir_ + "/" + tmp_name_;
  if (::fsync(fd_) != 0) fail("fsync of ", tmp, " failed: ", std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close of ", tmp, " failed: ", std::strerror(errno));
  const std::string basename = std::filesystem::path(path_).filename().string();
  if (::renameat(dir_fd_, tmp_name_.c_str(), dir_fd_, basename.c_str()) != 0)
    fail("cannot rename ", tmp, " to it: ", std::strerror(errno));
  committed_ = true;
  if (::fsync(dir_fd_) != 0)
    fail("written, but fsync of folder ", dir_, " failed: ", std::strerror(errno));
}

void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& kind) {
  AtomicFile f(path, kind);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace campo
