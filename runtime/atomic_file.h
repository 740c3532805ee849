// AtomicFile: writes a file so that a crash mid-write never leaves a broken file at its
// path, and so that nothing planted in the destination's folder can redirect the write.
//
// The data goes to a new temporary file in the destination's folder, named
//   ".<basename>.campo-tmp-<pid>-<start>-<random>"      (<basename> cut to 128 bytes)
// where <pid> and <start> name the writing process (its start time in clock ticks since
// boot: a pid is reused, the pair is not) and <random> is 12 letters and digits from
// getrandom(2). It is created with
// O_CREAT | O_EXCL | O_NOFOLLOW (a name that already exists, a symbolic link included, is
// never opened: another random name is tried) and with mode 0666 filtered by the umask, as
// a plain open() would create it; when the destination is an existing regular file, its
// permission bits are copied first, before any data is written. commit() fsyncs the data,
// renames the temporary over the destination and fsyncs the folder. Every step works on
// one descriptor of the folder (openat, renameat, unlinkat), so the folder cannot be
// swapped in between. A destination that is a symbolic link is replaced by the new file;
// the file it pointed to is left as it was. Destroyed without commit() (or when a write
// fails), the temporary is removed and the destination is untouched.
// Errors throw campo::Error "cannot write <kind> <path>: <reason>"; a missing folder is
// "cannot write <kind> <path>: folder <dir> does not exist" (no folder is ever created).
//
// A writer killed mid-write (kill -9, power loss) leaves its temporary behind. The
// constructor removes such leftovers in the destination's folder (of any destination, so
// that a run that never saves the same name again is cleaned too): a name of exactly the
// form above that is a regular file (not followed if it is a link) owned by this user,
// whose writer is gone: no process has the pid (kill(pid, 0) fails with ESRCH), or the
// process that has it now started at another time than <start> (the pid was reused, by
// this very process too), or it is exiting or a zombie (killed, and writing no more; a
// script that kills a run with SIGKILL and starts the next one before collecting it
// leaves a zombie, which kill(pid, 0) alone takes for a live writer).
// Nothing else is touched. Pids are those of this host's (namespace's) processes: writers
// in another PID namespace or on another host sharing the folder are not seen, so such
// writers must not write into the same folder at once.
#pragma once

#include <cstdint>
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

  // The temporary's name inside the destination's folder (for tests).
  const std::string& temporary_name() const { return tmp_name_; }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args);
  void discard();  // closes and removes the temporary
  std::string path_, kind_, dir_, tmp_name_;
  int dir_fd_ = -1, fd_ = -1;
  bool committed_ = false;
};

// Removes the stale temporary files in the folder of `path` described above; returns how
// many. Best effort: a leftover that cannot be removed is left as it was. Called by
// AtomicFile.
int remove_stale_temporary_files(const std::string& path);

// Whether `name` has the form of an AtomicFile temporary; its writer's pid and start time
// in *pid and *start_ticks.
bool is_temporary_file_name(const std::string& name, int* pid, uint64_t* start_ticks);

// The start time of process `pid` in clock ticks since boot (/proc/<pid>/stat), or 0 when
// it cannot be read.
uint64_t process_start_ticks(int pid);

// The whole of `bytes` to `path`, atomically.
void write_file_atomically(const std::string& path, const std::string& bytes,
                           const std::string& kind = "file");

}  // namespace campo
