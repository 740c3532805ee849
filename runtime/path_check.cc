#include "runtime/path_check.h"

#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "runtime/check.h"

namespace campo {

namespace {

// What a path names on disk: an existing file's device and inode (links followed), or,
// for a path that does not exist yet, its folder's device and inode and its name.
struct FileIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
  std::string name;  // empty for an existing file
  bool operator==(const FileIdentity&) const = default;
};

std::optional<FileIdentity> identify(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return FileIdentity{st.st_dev, st.st_ino, ""};
  const std::filesystem::path p(path);
  const std::string folder = p.parent_path().empty() ? "." : p.parent_path().string();
  if (::stat(folder.c_str(), &st) != 0) return std::nullopt;  // the option's own check says why
  return FileIdentity{st.st_dev, st.st_ino, p.filename().string()};
}

bool is_output(PathUse::Kind k) {
  return k == PathUse::Kind::output_file || k == PathUse::Kind::output_directory;
}
bool is_directory(PathUse::Kind k) {
  return k == PathUse::Kind::input_directory || k == PathUse::Kind::output_directory;
}

}  // namespace

void check_distinct_paths(const std::vector<PathUse>& paths) {
  std::vector<std::optional<FileIdentity>> ids;
  for (const PathUse& p : paths) ids.push_back(p.path.empty() ? std::nullopt : identify(p.path));
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const PathUse &a = paths[j], &b = paths[i];
      if (!ids[i] || !ids[j] || !(is_output(a.kind) || is_output(b.kind))) continue;
      if (*ids[i] != *ids[j]) continue;
      // The output named first in the line: a file output where the other is a directory
      // (it would replace it), else the later option.
      const bool a_replaces =
          a.kind == PathUse::Kind::output_file && b.kind != PathUse::Kind::output_file;
      const PathUse& out = a_replaces || !is_output(b.kind) ? a : b;
      const PathUse& other = &out == &b ? a : b;
      if (!is_output(other.kind) && !out.may_replace.empty() && out.may_replace == other.option)
        continue;
      const std::string both = out.option + " " + out.path + " and " + other.option + " " +
                               other.path + " are the same ";
      if (out.kind == PathUse::Kind::output_file && is_directory(other.kind))
        CAMPO_FAIL(both, "path: the file would replace the directory; give ", out.option,
                   " another path");
      CAMPO_FAIL(both, is_directory(out.kind) || is_directory(other.kind) ? "directory" : "file",
                 is_output(other.kind) ? ": the run would write both outputs into one"
                                       : ": the output would overwrite the input",
                 "; give ", out.option, " another path");
    }
}

}  // namespace campo
