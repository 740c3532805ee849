// Checks on paths a user names, made before any work is spent on them.
//   require_input_file: the path exists and is a regular file (a FIFO, device or directory
//     would hang or mislead a reader); follows symbolic links.
//   require_output_file: a later write of the path can succeed: the path is not a
//     directory, its directory exists and is writable. Nothing is created.
// Both throw campo::Error "<kind> <path>: <what is wrong>".
#pragma once

#include <string>

namespace campo {

void require_input_file(const std::string& path, const std::string& kind);
void require_output_file(const std::string& path, const std::string& kind);
// The directory `path` exists (or can be created: its nearest existing ancestor is a
// writable directory) and is writable. Nothing is created.
void require_output_directory(const std::string& path, const std::string& kind);

}  // namespace campo
