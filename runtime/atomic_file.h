// AtomicFile: writes a file so that a crash mid-write never leaves a broken file at its
// path. Data goes to "<path>.tmp.<pid>"; commit() fsyncs it, renames it over the path and
// fsyncs the directory. Destroyed without commit(), it removes the temporary file.
// Errors throw campo::Error "cannot write <kind> <path>: <reason>".
//
// A writer killed mid-write (kill -9, power loss) leaves its "<path>.tmp.<pid>" behind.
// The constructor removes such leftovers of the same path: a sibling named exactly
// "<basename>.tmp.<digits>" whose pid is not a live process (kill(pid, 0) fails with
// ESRCH). A live process's file is never touched, nor any other file. Pids are those of
// this host's (namespace's) processes: writers in another PID namespace or on another host
// sharing the directory are not seen, so two such writers must not save the same path.
#pragma once

#include <string>

namespace campo {

class AtomicFile {
 public:
  // `kind` names the file in messages ("checkpoint", "file", "PNG image").
  AtomicFile(const std::string& path, const std::string& kind = "file");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void commit();

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args);
  std::string path_, kind_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The whole of `bytes` to `path`, atomically.
// Removes the stale temporary files of `path` described above; returns how many. Best
// effort: a leftover that cannot be removed is left as it was. Called by AtomicFile.
int remove_stale_temporary_files(const std::string& path);

void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& kind = "file");

}  // namespace campo
