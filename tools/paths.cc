#include "tools/paths.h"

#include <string>

#include "runtime/check.h"

namespace campo::cli {

const CLI::Validator kPath([](std::string&) { return std::string(); }, "", "path");

bool is_path_option(CLI::Option* option) {
  try {
    option->get_validator("path");
    return true;
  } catch (const CLI::OptionNotFound&) {
    return false;
  }
}

void check_paths_given(CLI::App* cmd) {
  for (CLI::Option* option : cmd->get_options()) {
    if (!option->count() || !is_path_option(option)) continue;
    for (const std::string& value : option->results())
      CAMPO_CHECK(!value.empty(), option->get_name(), " needs a path, got an empty one");
  }
}

}  // namespace campo::cli
