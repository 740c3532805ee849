#include "fuzz/fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace campo::fuzz {
namespace {

std::string temp_dir() {
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0)
    return "/dev/shm";
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

}  // namespace

TempInput::TempInput(const std::string& name, const uint8_t* data, size_t size)
    : path_(temp_dir() + "/campo-fuzz-" + name + "-" + std::to_string(::getpid())) {
  std::FILE* f = std::fopen(path_.c_str(), "wb");
  require(f != nullptr, "cannot create the fuzz input's temp file");
  const bool written = size == 0 || std::fwrite(data, 1, size, f) == size;
  require(std::fclose(f) == 0 && written, "cannot write the fuzz input's temp file");
}

TempInput::~TempInput() { std::remove(path_.c_str()); }

void require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "campo fuzz: property violated: %s\n", what);
  std::abort();
}

}  // namespace campo::fuzz
