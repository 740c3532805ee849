// Replays the fuzz targets' seed corpus (fuzz/corpus/<name>) and every input a fuzzer
// found a bug with (fuzz/regressions/<name>) through the targets' bodies (fuzz/targets.h),
// so that each fixed finding stays fixed in every build, sanitized or not. Also checks
// that the seeds are what they claim: valid files each parser accepts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "amp/calibration.h"
#include "amp/lists.h"
#include "amp/precision_policy.h"
#include "datasets/cifar10.h"
#include "datasets/idx.h"
#include "datasets/image_file.h"
#include "datasets/text_file.h"
#include "datasets/tokenizer.h"
#include "fuzz/targets.h"
#include "graph/checkpoint.h"
#include "perf/numerics_file.h"
#include "perf/predict.h"
#include "runtime/hardware_counters.h"
#include "runtime/kernel_activity.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  void (*body)(const uint8_t*, size_t);
};

const Target kTargets[] = {
    {"idx", fuzz::idx},
    {"cifar10", fuzz::cifar10},
    {"image", fuzz::image},
    {"safetensors", fuzz::safetensors},
    {"calibration", fuzz::calibration},
    {"amp_lists_file", fuzz::amp_lists_file},
    {"amp_lists_edit", fuzz::amp_lists_edit},
    {"precision_policy_file", fuzz::precision_policy_file},
    {"text", fuzz::text},
    {"predict", fuzz::predict},
    {"activity_table", fuzz::activity_table},
    {"counter_table", fuzz::counter_table},
    {"numerics_file", fuzz::numerics_file},
};

fs::path fuzz_dir() { return fs::path(CAMPO_SOURCE_DIR) / "fuzz"; }

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(FuzzReplayTest, EveryTargetHasASourceAndSeeds) {
  std::vector<std::string> sources;
  for (const fs::path& f : files_in(fuzz_dir()))
    if (f.filename().string().ends_with("_fuzz.cc")) sources.push_back(f.filename().string());
  EXPECT_EQ(sources.size(), std::size(kTargets)) << "a fuzz/<name>_fuzz.cc is not replayed here";
  for (const Target& t : kTargets) {
    EXPECT_TRUE(fs::exists(fuzz_dir() / (std::string(t.name) + "_fuzz.cc"))) << t.name;
    EXPECT_FALSE(files_in(fuzz_dir() / "corpus" / t.name).empty()) << t.name << " has no seeds";
  }
}

TEST(FuzzReplayTest, SeedsAndRegressionsRunClean) {
  for (const Target& t : kTargets)
    for (const char* set : {"corpus", "regressions"})
      for (const fs::path& file : files_in(fuzz_dir() / set / t.name)) {
        SCOPED_TRACE(file.string());
        const std::vector<uint8_t> bytes = read_bytes(file);
        t.body(bytes.data(), bytes.size());
      }
}

TEST(FuzzReplayTest, SeedsAreValidInputs) {
  const fs::path corpus = fuzz_dir() / "corpus";
  for (const fs::path& f : files_in(corpus / "idx"))
    if (f.filename().string().starts_with("images"))
      EXPECT_NO_THROW(read_idx_images(f.string())) << f;
    else
      EXPECT_NO_THROW(read_idx_labels(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "cifar10"))
    EXPECT_NO_THROW(Cifar10Dataset({f.string()}, Cifar10Options{})) << f;
  for (const fs::path& f : files_in(corpus / "image"))
    EXPECT_NO_THROW(decode_image_file(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "safetensors"))
    EXPECT_NO_THROW(read_safetensors(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "calibration")) {
    Calibration cal;
    EXPECT_EQ(read_calibration(f.string(), fuzz::calibration_fuzz_machine(), cal,
                               fuzz::kCalibrationFuzzCampoVersion)
                  .message,
              "")
        << f;
  }
  for (const fs::path& f : files_in(corpus / "amp_lists_file"))
    EXPECT_NO_THROW(AmpLists::defaults(Device::cpu, DType::bf16).edit_from_file(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "precision_policy_file"))
    EXPECT_NO_THROW(read_precision_policy(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "amp_lists_edit")) {
    const std::vector<uint8_t> bytes = read_bytes(f);
    EXPECT_NO_THROW(
        AmpLists::defaults(Device::cpu, DType::bf16).edit(std::string(bytes.begin(), bytes.end())))
        << f;
  }
  for (const fs::path& f : files_in(corpus / "predict")) {  // first byte: 0 profile, 1 table
    const std::vector<uint8_t> bytes = read_bytes(f);
    ASSERT_FALSE(bytes.empty()) << f;
    const fs::path rest = fs::temp_directory_path() / ("campo_seed_" + f.filename().string());
    std::ofstream(rest, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data() + 1), std::streamsize(bytes.size() - 1));
    std::ostream nowhere(nullptr);
    if (bytes[0] % 2 == 0)
      EXPECT_NO_THROW(run_predict({.profile_path = rest.string(), .device = "h100"}, nowhere)) << f;
    else
      EXPECT_NO_THROW(parse_device_table_file(rest.string())) << f;
    fs::remove(rest);
  }
  for (const fs::path& f : files_in(corpus / "activity_table"))
    EXPECT_NO_THROW(read_activity_table(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "counter_table"))
    EXPECT_NO_THROW(read_counter_table(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "numerics_file"))
    EXPECT_NO_THROW(read_numerics_file(f.string())) << f;
  for (const fs::path& f : files_in(corpus / "text"))
    if (f.extension() == ".json")
      EXPECT_NO_THROW(WordPieceTokenizer::load(f.string())) << f;
    else
      EXPECT_NO_THROW(WordPieceTokenizer::train(read_text_file(f.string()), 400)) << f;
}

}  // namespace
}  // namespace campo
