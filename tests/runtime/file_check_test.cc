// require_input_file / require_output_file / require_output_directory: each refusal names
// the path and what is wrong, and nothing is created.
#include "runtime/file_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/check.h"
#include "tests/datasets/idx_file_util.h"

namespace fs = std::filesystem;

namespace campo {
namespace {

class FileCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("campo_file_check_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

using testing::error_message;

TEST_F(FileCheckTest, InputFileRefusesMissingDirectoryAndFifo) {
  std::ofstream(path("ok")) << "x";
  EXPECT_NO_THROW(require_input_file(path("ok"), "checkpoint"));
  {
    std::string e = error_message([&] { require_input_file(path("missing"), "checkpoint"); });
    EXPECT_NE(e.find("checkpoint " + path("missing") + ": no such file"), std::string::npos) << e;
  }
  std::string e = error_message([&] { require_input_file(dir_.string(), "calibration file"); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  e = error_message([&] { require_input_file(path("fifo"), "list file"); });
  EXPECT_NE(e.find("list file " + path("fifo") + " is a FIFO"), std::string::npos) << e;
}

TEST_F(FileCheckTest, OutputFileRefusesMissingDirectoryAndDirectoryTarget) {
  EXPECT_NO_THROW(require_output_file(path("new.safetensors"), "checkpoint"));
  std::ofstream(path("old")) << "x";
  EXPECT_NO_THROW(require_output_file(path("old"), "checkpoint"));
  std::string e = error_message([&] { require_output_file(path("no/such/x"), "checkpoint"); });
  EXPECT_NE(e.find("does not exist"), std::string::npos) << e;
  e = error_message([&] { require_output_file(dir_.string(), "checkpoint"); });
  EXPECT_NE(e.find("is a directory"), std::string::npos) << e;
  std::ofstream(path("file")) << "x";
  e = error_message([&] { require_output_file(path("file/x"), "JSON file"); });
  EXPECT_NE(e.find("is not a directory"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(path("new.safetensors")));
}

TEST_F(FileCheckTest, OutputFileRefusesUnwritableDirectory) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may write to any directory";
  fs::create_directories(path("ro"));
  fs::permissions(path("ro"), fs::perms::owner_read | fs::perms::owner_exec);
  std::string e = error_message([&] { require_output_file(path("ro/x"), "checkpoint"); });
  EXPECT_NE(e.find("not writable"), std::string::npos) << e;
}

TEST_F(FileCheckTest, OutputDirectoryMayBeCreatedButNotOverAFile) {
  EXPECT_NO_THROW(require_output_directory(path("a/b/c"), "samples folder"));
  EXPECT_FALSE(fs::exists(path("a")));
  std::ofstream(path("file")) << "x";
  std::string e = error_message([&] { require_output_directory(path("file"), "samples folder"); });
  EXPECT_NE(e.find(" is a regular file, not a directory"), std::string::npos) << e;
  e = error_message([&] { require_output_directory(path("file/sub"), "samples folder"); });
  EXPECT_NE(e.find("is not a directory"), std::string::npos) << e;
}

}  // namespace
}  // namespace campo
