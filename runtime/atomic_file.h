// AtomicFile: writes a file so that a crash mid-write never leaves a broken file at its
// path. Data goes to "<path>.tmp.<pid>"; commit() fsyncs it, renames it over the path and
// fsyncs the directory. Destroyed without commit(), it removes the temporary file.
// Errors throw campo::Error "cannot write <kind> <path>: <reason>".
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
void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& kind = "file");

}  // namespace campo
