#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/check.h"

namespace campo {

template <typename... Args>
void AtomicFile::fail(const Args&... args) {
  CAMPO_FAIL("cannot write ", kind_, " ", path_, ": ", args...);
}

namespace {

constexpr const char* kTempInfix = ".tmp.";

// The pid in "<basename>.tmp.<pid>", or 0 when `name` is not of that form.
pid_t temporary_file_pid(const std::string& name, const std::string& basename) {
  const std::string prefix = basename + kTempInfix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return 0;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 9 || digits[0] == '0') return 0;  // pids fit in 9 digits, no padding
  for (char c : digits)
    if (c < '0' || c > '9') return 0;
  return pid_t(std::stol(digits));
}

}  // namespace

int remove_stale_temporary_files(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string basename = target.filename().string();
  if (basename.empty()) return 0;
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  int removed = 0;
  for (; !ec && it != end; it.increment(ec)) {
    const pid_t pid = temporary_file_pid(it->path().filename().string(), basename);
    if (pid <= 0 || pid == ::getpid()) continue;
    std::error_code type_ec;
    if (!fs::is_regular_file(it->symlink_status(type_ec)) || type_ec) continue;
    // ESRCH: no such process. EPERM means it exists (another user's): keep its file.
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (::unlink(it->path().c_str()) == 0) ++removed;
  }
  return removed;
}

AtomicFile::AtomicFile(const std::string& path, const std::string& kind)
    : path_(path), kind_(kind), tmp_(path + kTempInfix + std::to_string(::getpid())) {
  remove_stale_temporary_files(path_);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create ", tmp_, ": ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t put = ::write(fd_, p, std::min<size_t>(n, 1u << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) fail("write error on ", tmp_, ": ", std::strerror(errno));
    p += put;
    n -= size_t(put);
  }
}

// fsync the data, rename over the target, fsync the directory so the rename persists.
void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("fsync of ", tmp_, " failed: ", std::strerror(errno));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close of ", tmp_, " failed: ", std::strerror(errno));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("cannot rename ", tmp_, " to it: ", std::strerror(errno));
  committed_ = true;
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    fail("written, but cannot open directory ", dir, " to sync it: ", std::strerror(errno));
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0) fail("written, but fsync of directory ", dir, " failed: ", std::strerror(err));
}

void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& kind) {
  AtomicFile f(path, kind);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace campo
