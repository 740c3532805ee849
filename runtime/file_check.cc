#include "runtime/file_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/check.h"

namespace fs = std::filesystem;

namespace campo {

namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The nearest existing ancestor directory of `dir` must be a writable directory.
void require_writable_directory(const std::string& dir, const std::string& path,
                                const std::string& kind) {
  fs::path p = dir.empty() ? fs::path(".") : fs::path(dir);
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0) {
    CAMPO_CHECK(errno == ENOENT || errno == ENOTDIR, kind, " ", path, ": cannot inspect ",
                p.string(), ": ", std::strerror(errno));
    fs::path parent = p.parent_path();
    if (parent.empty() || parent == p) parent = ".";
    if (parent == p) break;
    p = parent;
  }
  CAMPO_CHECK(S_ISDIR(st.st_mode), kind, " ", path, ": ", p.string(), " is not a directory");
  CAMPO_CHECK(::access(p.c_str(), W_OK | X_OK) == 0, kind, " ", path, ": directory ", p.string(),
              " is not writable");
}

}  // namespace

void require_input_file(const std::string& path, const std::string& kind) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    CAMPO_FAIL(kind, " ", path, ": ",
               errno == ENOENT ? std::string("no such file") : std::strerror(errno));
  CAMPO_CHECK(S_ISREG(st.st_mode), kind, " ", path, " is ", file_type_name(st.st_mode),
              ", not a regular file");
  CAMPO_CHECK(::access(path.c_str(), R_OK) == 0, kind, " ", path, ": not readable");
}

void require_output_file(const std::string& path, const std::string& kind) {
  CAMPO_CHECK(!path.empty(), kind, ": empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    CAMPO_CHECK(S_ISREG(st.st_mode), kind, " ", path, " is ", file_type_name(st.st_mode),
                ", not a file that can be replaced");
  const fs::path parent = fs::path(path).parent_path();
  struct stat dst {};
  const std::string dir = parent.empty() ? "." : parent.string();
  if (::stat(dir.c_str(), &dst) != 0)
    CAMPO_FAIL(kind, " ", path, ": directory ", dir,
               errno == ENOENT ? std::string(" does not exist")
                               : ": " + std::string(std::strerror(errno)));
  CAMPO_CHECK(S_ISDIR(dst.st_mode), kind, " ", path, ": ", dir, " is not a directory");
  CAMPO_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, kind, " ", path, ": directory ", dir,
              " is not writable");
}

void require_output_directory(const std::string& path, const std::string& kind) {
  CAMPO_CHECK(!path.empty(), kind, ": empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    CAMPO_CHECK(S_ISDIR(st.st_mode), kind, " ", path, " is ", file_type_name(st.st_mode),
                ", not a directory");
    CAMPO_CHECK(::access(path.c_str(), W_OK | X_OK) == 0, kind, " ", path,
                ": directory is not writable");
    return;
  }
  require_writable_directory(fs::path(path).parent_path().string(), path, kind);
}

}  // namespace campo
