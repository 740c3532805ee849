// `campo train --model dcgan --device cpu:strict` (runtime/strict_backend.h): the GAN session
// runs on the backend --device names, as the classifiers do (device_cli_test.cc): its steps,
// samples and checkpoint give --device cpu's results bit for bit, every host boundary is
// crossed through the backend's copies (a direct host access to one of its tensors throws),
// and the default CPU backend allocates nothing during the run. Model arrays (--array) too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::CliResult;
using testing::json_event;
using testing::run_cli;

class DcganDeviceCliTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  testing::TempDir dir_;
};

std::string file_bytes(const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  EXPECT_TRUE(f.good()) << file;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// 3 steps of 32x32 synthetic images.
std::vector<std::string> dcgan_args(const std::string& precision, const std::string& device,
                                    const std::string& samples, const std::string& checkpoint,
                                    const std::string& batch = "16") {
  return {"train",   "--model",    "dcgan",   "--dataset", "synthetic", "--image-size",
          "32",      "--steps",    "3",       "--batch",   batch,       "--precision",
          precision, "--progress", "none",    "--device",  device,      "--samples-dir",
          samples,   "--save",     checkpoint};
}

TEST_F(DcganDeviceCliTest, TrainOnCpuStrictIsTheCpuRunThroughTheBackendsCopies) {
  for (const std::string precision : {"fp32", "amp"}) {
    std::vector<nlohmann::json> results;
    std::vector<std::string> checkpoints, samples;
    for (const std::string device : {"cpu", "cpu:strict"}) {
      const std::string tag = precision + "_" + (device == "cpu" ? "cpu" : "strict");
      const std::string dir = path("samples_" + tag), checkpoint = path(tag + ".safetensors");
      const CliResult r = run_cli(dcgan_args(precision, device, dir, checkpoint));
      ASSERT_EQ(r.code, 0) << r.err;
      results.push_back(json_event(r.out));
      EXPECT_EQ(results.back()["device"], device);
      EXPECT_EQ(results.back()["steps"], 3);
      checkpoints.push_back(checkpoint);
      samples.push_back(dir + "/epoch_001.png");
      EXPECT_EQ(results.back()["samples"], samples.back());
      EXPECT_TRUE(fs::exists(samples.back())) << device;
    }
    const nlohmann::json& cpu = results[0];
    const nlohmann::json& strict = results[1];
    for (const char* key : {"loss_d", "loss_g", "d_x", "d_g_z"})
      EXPECT_EQ(strict[key], cpu[key]) << precision << " " << key;
    // The weights, optimizer states and positions, and the sample grid, byte for byte.
    EXPECT_EQ(file_bytes(checkpoints[1]), file_bytes(checkpoints[0])) << precision;
    EXPECT_EQ(file_bytes(samples[1]), file_bytes(samples[0])) << precision;
    EXPECT_FALSE(cpu.contains("host_copies"));
    // Images, noise and learning rates in, every step (3); the statistics out.
    EXPECT_GE(strict["host_copies"]["to_device"].get<int64_t>(), 3 * 3) << strict.dump();
    EXPECT_GE(strict["host_copies"]["to_host"].get<int64_t>(), 3 * 5) << strict.dump();
    EXPECT_EQ(strict["default_cpu_allocations"], 0) << strict.dump();
    // Steps 2 and 3 took their images from the prefetch (train/prefetch.h).
    EXPECT_EQ(strict["host_copies"]["uploads"], 2) << strict.dump();
  }
}

// Cost-aware's profiling steps of both step graphs run on the run's device too (their plan
// follows timings, so it is not compared with the CPU run's).
TEST_F(DcganDeviceCliTest, CostAwareOnCpuStrictProfilesOnThatBackend) {
  std::vector<std::string> args =
      dcgan_args("cost-aware", "cpu:strict", path("samples"), path("ck.safetensors"));
  args.insert(args.end(), {"--calibration", "none"});
  const CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = json_event(r.out);
  EXPECT_EQ(j["device"], "cpu:strict");
  EXPECT_EQ(j["default_cpu_allocations"], 0) << j.dump();
}

// --array 2: the fused session on the named backend, each model's results as on the CPU.
TEST_F(DcganDeviceCliTest, ArrayOnCpuStrictIsTheCpuRun) {
  std::vector<nlohmann::json> results;
  for (const std::string device : {"cpu", "cpu:strict"}) {
    const std::string tag = device == "cpu" ? "cpu" : "strict";
    std::vector<std::string> args =
        dcgan_args("fp32", device, path("samples_" + tag), path(tag + ".safetensors"), "8");
    args.insert(args.end(), {"--array", "2", "--seed", "3,4"});
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    results.push_back(json_event(r.out));
    EXPECT_EQ(results.back()["device"], device);
    ASSERT_EQ(results.back()["models"].size(), 2u) << results.back().dump();
  }
  for (size_t i = 0; i < 2; ++i)
    for (const char* key : {"loss_d", "loss_g", "d_x", "d_g_z"})
      EXPECT_EQ(results[1]["models"][i][key], results[0]["models"][i][key]) << i << " " << key;
  EXPECT_EQ(file_bytes(path("strict-1.safetensors")), file_bytes(path("cpu-1.safetensors")));
  EXPECT_EQ(results[1]["default_cpu_allocations"], 0) << results[1].dump();
}

}  // namespace
}  // namespace campo
