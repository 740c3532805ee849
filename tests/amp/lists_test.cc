// Mixed-precision list edits from a string (--amp-lists) and from a JSON file
// (--amp-lists-file): what applies, and the one-line error of every malformed input.
#include "amp/lists.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/error_of.h"

namespace campo {
namespace {

// The CPU's bf16 lists (the op schemas'), which these tests are written against.
AmpLists cpu_lists() { return AmpLists::defaults(Device::cpu, DType::bf16); }

namespace fs = std::filesystem;
using testing::error_of;

// Expects the edit to fail with one line holding `needle`, leaving the lists untouched.
void expect_edit_refused(const std::string& spec, const std::string& needle) {
  AmpLists lists = cpu_lists();
  const std::string msg = error_of([&] { lists.edit(spec); });
  EXPECT_NE(msg.find(needle), std::string::npos) << "edit '" << spec << "': " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_LT(msg.size(), 400u) << msg;
  EXPECT_EQ(lists.describe(), cpu_lists().describe()) << spec;
}

TEST(AmpListEditTest, WellFormedEditsApply) {
  AmpLists lists = cpu_lists();
  lists.edit(" allow += Tanh , Sigmoid ; clear-=Relu;");  // spaces and a trailing ';'
  EXPECT_EQ(lists.classify(OpKind::Tanh), AmpList::allow);
  EXPECT_EQ(lists.classify(OpKind::Sigmoid), AmpList::allow);
  EXPECT_EQ(lists.classify(OpKind::Relu), AmpList::fp32);
}

TEST(AmpListEditTest, MalformedEditsAreOneLineErrors) {
  expect_edit_refused("allow+=", "mixed-precision list edit 'allow+=' names no op");
  expect_edit_refused("=Tanh", "'=Tanh' must look like allow+=Op1,Op2");
  expect_edit_refused("allow*=Tanh", "'allow*=Tanh' must look like allow+=Op1,Op2");
  expect_edit_refused("allow+=Nope", "'allow+=Nope': unknown op 'Nope'");
  expect_edit_refused("bogus+=MatMul", "unknown mixed-precision list 'bogus'");
  expect_edit_refused("+=MatMul", "unknown mixed-precision list ''");
  expect_edit_refused(";;", "mixed-precision list edits ';;' hold no edit");
  expect_edit_refused("allow+=Tanh,,Sigmoid", "'allow+=Tanh,,Sigmoid': an empty op name");
  expect_edit_refused("allow+=Tanh,", "an empty op name");
  expect_edit_refused("allow+=Tanh;deny+=Tanh", "'deny+=Tanh': Tanh is edited twice (also in");
  expect_edit_refused("allow+=Tanh,Tanh", "Tanh is edited twice");
  expect_edit_refused("allow+=ApplyAdam", "ApplyAdam always runs in f32");
  expect_edit_refused("clear-=MatMul", "MatMul is not on the clear list (it is on allow)");
  // A valid edit before a bad one is not applied either (checked by expect_edit_refused).
  expect_edit_refused("allow+=Tanh;allow+=Nope", "unknown op 'Nope'");
}

TEST(AmpListEditTest, VeryLongInputIsShortenedInTheMessage) {
  const std::string long_name(100000, 'X');
  expect_edit_refused("allow+=" + long_name, "(100007 characters)");
  expect_edit_refused("allow+=" + long_name, "unknown op 'XXXX");
  std::string many;
  for (int i = 0; i < 20000; ++i) many += ";";
  expect_edit_refused(many, "hold no edit");
}

struct ListFile {
  std::string path =
      (fs::temp_directory_path() / ("campo_lists_" + std::to_string(::getpid()) + ".json"))
          .string();
  ~ListFile() { fs::remove(path); }
  void write(const std::string& text) const { std::ofstream(path) << text; }
};

void expect_file_refused(const ListFile& f, const std::string& text, const std::string& needle) {
  f.write(text);
  AmpLists lists = cpu_lists();
  const std::string msg = error_of([&] { lists.edit_from_file(f.path); });
  EXPECT_NE(msg.find(needle), std::string::npos) << text << ": " << msg;
  EXPECT_NE(msg.find(f.path), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.find("json.exception"), std::string::npos) << msg;
  EXPECT_EQ(lists.describe(), cpu_lists().describe()) << text;
}

TEST(AmpListFileTest, AWellFormedFileApplies) {
  ListFile f;
  f.write(R"({"allow": {"add": ["Tanh"], "remove": ["MatMul"]}, "deny": {"add": ["Relu"]}})");
  AmpLists lists = cpu_lists();
  lists.edit_from_file(f.path);
  EXPECT_EQ(lists.classify(OpKind::Tanh), AmpList::allow);
  EXPECT_EQ(lists.classify(OpKind::MatMul), AmpList::fp32);
  EXPECT_EQ(lists.classify(OpKind::Relu), AmpList::deny);
}

TEST(AmpListFileTest, MalformedFilesAreOneLineErrorsNamingTheFile) {
  ListFile f;
  expect_file_refused(f, "{\"allow\": ", "is not valid JSON");
  expect_file_refused(f, "[1, 2]", "must hold a JSON object");
  expect_file_refused(f, R"({"allow": ["Tanh"]})", "\"allow\" must be an object");
  expect_file_refused(f, R"({"allow": {"add": "Tanh"}})", "allow.add must be an array");
  expect_file_refused(f, R"({"allow": {"append": ["Tanh"]}})", "expected \"add\" or \"remove\"");
  expect_file_refused(f, R"({"allow": {"add": [3]}})", "op names are strings, got 3");
  expect_file_refused(f, R"({"allow": {"add": ["Nope"]}})", "unknown op 'Nope'");
  expect_file_refused(f, R"({"allow": {"add": [""]}})", "an empty op name");
  expect_file_refused(f, R"({"permit": {"add": ["Tanh"]}})",
                      "unknown mixed-precision list 'permit'");
  expect_file_refused(f, R"({"allow": {"add": ["Tanh"]}, "deny": {"add": ["Tanh"]}})",
                      "Tanh is edited twice");
  expect_file_refused(f, R"({"allow": {"add": ["Tanh"]}, "allow": {"add": ["Sigmoid"]}})",
                      "the key \"allow\" appears twice");
  expect_file_refused(f, R"({"clear": {"remove": ["MatMul"]}})", "MatMul is not on the clear list");
}

TEST(AmpListFileTest, AFifoOrAFolderIsRefusedWithoutReading) {
  const std::string fifo =
      (fs::temp_directory_path() / ("campo_lists_fifo_" + std::to_string(::getpid()))).string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  AmpLists lists = cpu_lists();
  std::string msg = error_of([&] { lists.edit_from_file(fifo); });
  fs::remove(fifo);
  EXPECT_NE(msg.find("mixed-precision list file " + fifo + " is a FIFO"), std::string::npos) << msg;
  const std::string dir = fs::temp_directory_path().string();
  msg = error_of([&] { lists.edit_from_file(dir); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  msg = error_of([&] { lists.edit_from_file(dir + "/campo_no_such_lists.json"); });
  EXPECT_NE(msg.find("no such file"), std::string::npos) << msg;
}

}  // namespace
}  // namespace campo
