// The files a run reads and writes, checked against each other before any work: an output
// never lands on an input or on another output, and a file never replaces a directory
// another option names (STYLE.md: files a user gives are sacred). Paths are compared as the
// files they name, not as strings: `a`, `./a`, `dir/../a` and a link to `a` are one file.
#pragma once

#include <string>
#include <vector>

namespace campo {

// One path option of a run, as given.
struct PathUse {
  enum class Kind {
    input_file,        // read: a checkpoint, a profile, a vocabulary, a text data set, ...
    input_directory,   // read: --data-dir, a folder data set
    output_file,       // written (replaced) by the run
    output_directory,  // created or filled by the run (--tensorboard, --samples-dir)
  };
  std::string option;  // "--metrics"
  std::string path;
  Kind kind = Kind::output_file;
  // An output may name the same file as this input option: read before any work and
  // replaced atomically later (--save over the --resume checkpoint continues a run in place).
  std::string may_replace;
};

// Refuses, with one error line naming both options, the first of:
//  - an output (file or directory) that is the same file as an input or as another output;
//  - an output file that is a directory another option names (it would replace it).
// (An output whose may_replace names the input's option is allowed on it.)
// Unset (empty) paths are skipped: whether a path may be empty is each option's own check.
// Two inputs may be the same file. An output that does not exist yet is identified by its
// folder (as a file: device and inode) and its name.
void check_distinct_paths(const std::vector<PathUse>& paths);

}  // namespace campo
