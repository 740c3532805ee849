// --device through the command line: parsed once, and every command that runs steps asks
// make_backend (runtime/backend.h) for it before any work, so a device this build or
// machine lacks is the same one error line everywhere. Planning runs nothing, so
// `campo plan --device cuda` works anywhere (with CUDA's lists and fp16 by default).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "amp/calibration.h"
#include "runtime/backend.h"
#include "tests/amp/calibration_test_util.h"
#include "tests/test_util.h"
#include "tests/tools/cli_test_util.h"

namespace campo {
namespace {

namespace fs = std::filesystem;

using testing::CliResult;
using testing::expect_error;
using testing::json_event;
using testing::run_cli;

// make_backend's one line for `device` in this build on this machine ("" when the backend
// exists, as it will once the CUDA kernels land).
std::string backend_error(const std::string& device) {
  try {
    (void)make_backend(parse_device_spec(device));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The run stopped with exactly make_backend's line, exit code 1, before printing anything.
void expect_backend_error(const std::vector<std::string>& args, const std::string& device) {
  const std::string line = backend_error(device);
  ASSERT_FALSE(line.empty());
  EXPECT_NE(line.find("--device " + parse_device_spec(device).str()), std::string::npos) << line;
  const CliResult r = run_cli(args);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(r.err, "campo: error: " + line + "\n");
  EXPECT_EQ(r.out, "") << "work was done before the device was checked";
}

class DeviceCliTest : public ::testing::Test {
 protected:
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) {
    fs::create_directories(dir_);
    return (dir_ / name).string();
  }
  fs::path dir_ =
      fs::temp_directory_path() / ("campo_device_cli_" + std::to_string(::getpid()) + "_" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
};

// Runs of commands that need a backend for --device cuda, where none exists.
class NoCudaBackendTest : public DeviceCliTest {
 protected:
  void SetUp() override {
    if (backend_error("cuda").empty()) GTEST_SKIP() << "this build and machine have a CUDA backend";
  }
};

TEST_F(NoCudaBackendTest, TrainOnCudaIsMakeBackendsLineBeforeAnyWork) {
  for (const std::string device : {"cuda", "cuda:0", "cuda:1", "gpu"})
    expect_backend_error({"train", "--model", "mlp", "--dataset", "synthetic", "--steps", "1",
                          "--progress", "none", "--device", device},
                         device);
}

TEST_F(NoCudaBackendTest, DcganOnCudaIsMakeBackendsLineBeforeAnyWork) {
  const std::string samples = path("samples");
  expect_backend_error(
      {"train", "--model", "dcgan", "--dataset", "synthetic", "--image-size", "32", "--steps", "1",
       "--progress", "none", "--samples-dir", samples, "--device", "cuda"},
      "cuda");
  EXPECT_FALSE(fs::exists(samples));
}

TEST_F(NoCudaBackendTest, CalibrateOnCudaIsMakeBackendsLineBeforeAnyWork) {
  const std::string out = path("cuda.json");
  expect_backend_error({"calibrate", "--quick", "--out", out, "--device", "cuda"}, "cuda");
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(NoCudaBackendTest, ArrayAndEvalOnCudaAreMakeBackendsLineBeforeAnyWork) {
  const std::string ckpt = path("run.safetensors");
  expect_backend_error({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "1",
                        "--array", "2", "--progress", "none", "--save", ckpt, "--device", "cuda"},
                       "cuda");
  EXPECT_FALSE(fs::exists(path("run-0.safetensors")));
  expect_backend_error({"eval", "--checkpoint", "/no/such/checkpoint.safetensors", "--dataset",
                        "synthetic", "--device", "cuda"},
                       "cuda");
}

TEST_F(NoCudaBackendTest, BenchOnCudaIsMakeBackendsLineBeforeAnyWork) {
  const std::string json = path("bench.json");
  expect_backend_error({"bench", "--model", "lenet", "--batch", "4", "--steps", "1", "--repeats",
                        "1", "--warmup", "0", "--json", json, "--device", "cuda:1"},
                       "cuda:1");
  EXPECT_FALSE(fs::exists(json));
}

TEST(DeviceCliParseTest, AnUnknownDeviceIsOneLineForEveryCommand) {
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"train"}, {"plan"}, {"bench"}, {"calibrate"}}) {
    std::vector<std::string> args = command;
    args.insert(args.end(), {"--device", "tpu"});
    expect_error(run_cli(args),
                 "--device 'tpu' is not a device (expected cpu, cuda, cuda:N or cpu:strict)");
    args.back() = "cuda:x";
    expect_error(run_cli(args), "--device 'cuda:x': the GPU index must be a number");
  }
}

// A CPU's calibration file holds a CPU's costs: a cost-aware train, plan or bench on cuda
// refuses one in one line, before the device is looked for (with or without a GPU); a GPU's
// calibration (campo calibrate --device cuda) or none (the profiling step times both
// precisions) is what it takes.
TEST(DeviceCliParseTest, CostAwareOnCudaRefusesACpuCalibration) {
  testing::TempDir dir;
  const std::string file = dir.file("calibration.json");
  save_calibration(testing::sample_calibration(), file);
  const std::string line = "--calibration " + file +
                           " holds the costs of a cpu, not of --device cuda:0; calibrate it with "
                           "`campo calibrate --device cuda:0`, or --calibration none to time "
                           "both precisions in the profiling step";
  for (const std::string model : {"lenet", "dcgan"})
    expect_error(run_cli({"train", "--model", model, "--dataset", "synthetic", "--device", "cuda",
                          "--precision", "cost-aware", "--calibration", file}),
                 line);
  expect_error(run_cli({"plan", "--model", "lenet", "--device", "cuda", "--precision", "cost-aware",
                        "--calibration", file}),
               line);
  expect_error(run_cli({"bench", "--model", "lenet", "--device", "cuda", "--precision",
                        "fp32,cost-aware", "--calibration", file}),
               line);
  // Not a calibration at all: the reader's line.
  std::ofstream(file) << "{}";
  expect_error(run_cli({"plan", "--model", "lenet", "--device", "cuda", "--precision", "cost-aware",
                        "--calibration", file}),
               "calibration file " + file +
                   " is corrupt (not a campo calibration file); run "
                   "`campo calibrate --device cuda:0` to recalibrate");
}

nlohmann::json read_json(const std::string& file) {
  std::ifstream f(file);
  return nlohmann::json::parse(f);
}

// --device cpu:strict: the run is on that backend (tensors that refuse host access, so any
// host read or write outside its copies would have thrown), its steps, evaluation and
// checkpoint give --device cpu's results bit for bit, its copies carried the batches in and
// the losses out, and the default CPU backend allocated nothing during it.
TEST_F(DeviceCliTest, TrainOnCpuStrictIsTheCpuRunThroughTheBackendsCopies) {
  for (const std::string precision : {"fp32", "amp"}) {
    std::vector<nlohmann::json> results;
    for (const std::string device : {"cpu", "cpu:strict"}) {
      const std::string checkpoint = path(precision + "_" + device + ".safetensors");
      const CliResult r =
          run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "6", "--batch",
                   "16", "--limit-test", "64", "--precision", precision, "--progress", "none",
                   "--device", device, "--save", checkpoint});
      ASSERT_EQ(r.code, 0) << r.err;
      results.push_back(json_event(r.out));
      EXPECT_EQ(results.back()["device"], device);
      EXPECT_TRUE(fs::exists(checkpoint)) << device;
    }
    const nlohmann::json& cpu = results[0];
    const nlohmann::json& strict = results[1];
    EXPECT_EQ(strict["final_loss"], cpu["final_loss"]) << precision;
    EXPECT_EQ(strict["test_accuracy"], cpu["test_accuracy"]) << precision;
    EXPECT_EQ(strict["casts"], cpu["casts"]) << precision;
    EXPECT_FALSE(cpu.contains("host_copies"));
    // Images and labels in, every step (6), and the losses out.
    EXPECT_GE(strict["host_copies"]["to_device"].get<int64_t>(), 12) << strict.dump();
    EXPECT_GE(strict["host_copies"]["to_host"].get<int64_t>(), 6) << strict.dump();
    EXPECT_EQ(strict["default_cpu_allocations"], 0) << strict.dump();
  }
}

// Cost-aware's profiling step and its padding timings run on the run's device too (their
// plan follows timings, so it is not compared with the CPU run's).
TEST_F(DeviceCliTest, CostAwareOnCpuStrictProfilesOnThatBackend) {
  const CliResult r =
      run_cli({"train", "--model", "lenet", "--dataset", "synthetic", "--steps", "3", "--batch",
               "16", "--limit-test", "32", "--precision", "cost-aware", "--progress", "none",
               "--device", "cpu:strict"});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = json_event(r.out);
  EXPECT_EQ(j["device"], "cpu:strict");
  EXPECT_EQ(j["default_cpu_allocations"], 0) << j.dump();
}

// Planning needs no GPU: the amp plan for CUDA uses CUDA's lists, in fp16 by default.
TEST_F(DeviceCliTest, PlanForCudaNeedsNoGpuAndDefaultsToFp16) {
  const std::string json = path("plan.json");
  const CliResult r = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "amp",
                               "--device", "cuda", "--json", json});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: lenet, precision amp, device cuda:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" nodes in f16, "), std::string::npos) << r.out;
  const nlohmann::json j = read_json(json);
  EXPECT_EQ(j["device"], "cuda:0");
  EXPECT_EQ(j["low_precision"], "fp16");
  int convolutions_in_f16 = 0;
  for (const auto& n : j["graphs"][0]["nodes"])
    if (n["op"] == "Conv2D") {
      EXPECT_EQ(n["list"], "allow");
      convolutions_in_f16 += n["dtype"] == "f16";
    }
  EXPECT_EQ(convolutions_in_f16, 2);  // LeNet's two
}

TEST_F(DeviceCliTest, PlanForCudaTakesLowPrecisionAndListEdits) {
  const std::string json = path("plan.json");
  const CliResult r =
      run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "amp", "--device", "cuda",
               "--low-precision", "bf16", "--amp-lists", "allow-=Conv2D", "--json", json});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = read_json(json);
  EXPECT_EQ(j["low_precision"], "bf16");
  for (const auto& n : j["graphs"][0]["nodes"])
    if (n["op"] == "Conv2D") EXPECT_EQ(n["dtype"], "f32") << n.dump();  // off the allow list
}

TEST_F(DeviceCliTest, Fp32PlanForCudaWorks) {
  const CliResult r = run_cli(
      {"plan", "--model", "lenet", "--batch", "8", "--precision", "fp32", "--device", "cuda"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: lenet, precision fp32, device cuda:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("totals: 0 nodes in "), std::string::npos) << r.out;
}

// The CPU still plans in bf16 when --low-precision is not given.
TEST(DevicePlanTest, PlanForTheCpuDefaultsToBf16) {
  const CliResult r = run_cli({"plan", "--model", "lenet", "--batch", "8", "--precision", "amp"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("plan: lenet, precision amp, device cpu"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" nodes in bf16, "), std::string::npos) << r.out;
}

// Cost-aware for cuda profiles on the GPU (with a calibration made on it, or timing both
// precisions): without a GPU that is make_backend's one line, before any calibration or
// profiling runs; this machine's CPU calibration is never used for it.
TEST_F(NoCudaBackendTest, CostAwarePlanForCudaNeedsTheGpu) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"--calibration", "none"}}) {
    std::vector<std::string> args = {"plan",     "--model", "lenet",       "--batch",   "8",
                                     "--device", "cuda",    "--precision", "cost-aware"};
    args.insert(args.end(), extra.begin(), extra.end());
    expect_backend_error(args, "cuda");
  }
  const CliResult r = run_cli({"plan", "--model", "lenet", "--device", "cuda", "--precision",
                               "cost-aware", "--calibration", "/no/such/calibration.json"});
  expect_error(r, "calibration file /no/such/calibration.json");
  EXPECT_EQ(r.out, "");
}

// --deterministic on the CPU: accepted, recorded in train's JSON result and every bench entry
// (false without it, also after a run that set it: the shared CPU backend is set by every
// run), and the same bits (oneDNN and campo's CPU kernels already are deterministic; amp, not
// the default cost-aware, whose plan follows timings that differ run to run).
TEST_F(DeviceCliTest, DeterministicIsRecordedAndChangesNothingOnTheCpu) {
  std::vector<nlohmann::json> results;
  for (const bool deterministic : {true, false}) {
    std::vector<std::string> args = {"train", "--model", "lenet", "--dataset", "synthetic",
                                     "--steps", "2", "--batch", "16", "--limit-test", "32",
                                     "--progress", "none", "--precision", "amp"};
    if (deterministic) args.push_back("--deterministic");
    const CliResult r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    results.push_back(json_event(r.out));
    EXPECT_EQ(results.back()["deterministic"], deterministic) << results.back().dump();
  }
  EXPECT_EQ(results[0]["final_loss"], results[1]["final_loss"]);
  const std::string file = path("bench.json");
  const CliResult r = run_cli({"bench", "--model", "lenet", "--precision", "fp32", "--steps", "1",
                               "--warmup", "0", "--repeats", "1", "--no-peak", "--deterministic",
                               "--json", file});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json bench = read_json(file);
  ASSERT_EQ(bench.size(), 1u) << bench.dump();
  EXPECT_EQ(bench[0]["deterministic"], true) << bench.dump();
  EXPECT_FALSE(bench[0].contains("conv_algo_search")) << "the CPU has no cuDNN algorithm cache";
}

}  // namespace
}  // namespace campo
