// Backend::identity (runtime/backend.h): what each backend says its machine is, the key of
// calibration files. The CPU's fields are the ones calibration files have always recorded,
// with the values this machine has; the strict backend's are the CPU's under its own kind;
// the CUDA backend's name the GPU and its software (skipped without a GPU).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu_backend.h"
#include "runtime/cpu_features.h"
#include "tests/test_util.h"

namespace campo {
namespace {

std::vector<std::string> names(const BackendIdentity& id) {
  std::vector<std::string> out;
  for (const BackendIdentity::Field& f : id.fields) out.push_back(f.name);
  return out;
}

TEST(BackendIdentityTest, TheCpusFieldsAreThoseOfItsCalibrationFiles) {
  const BackendIdentity id = CpuBackend().identity();
  EXPECT_EQ(id.kind, "cpu");
  EXPECT_EQ(names(id), (std::vector<std::string>{"cpu_model", "logical_cores", "onednn_isa",
                                                 "onednn_version", "native_bf16",
                                                 "native_f16"}));
  EXPECT_EQ(id.find("cpu_model")->value, cpu_model_name());
  EXPECT_EQ(id.find("logical_cores")->value, std::to_string(std::thread::hardware_concurrency()));
  EXPECT_EQ(id.find("onednn_isa")->value, onednn_isa_name());
  EXPECT_EQ(id.find("onednn_version")->value, onednn_version());
  // Only the library version makes a file stale rather than another machine's.
  for (const BackendIdentity::Field& f : id.fields)
    EXPECT_EQ(f.is_version, f.name == "onednn_version") << f.name;
  EXPECT_EQ(id.find("native_bf16")->set_by, "CAMPO_CPU_BF16");
  EXPECT_EQ(id.find("native_f16")->set_by, "CAMPO_CPU_F16");
  EXPECT_EQ(id.find("gpu"), nullptr);
}

TEST(BackendIdentityTest, NativeBf16FollowsTheCpuAndCampoCpuBf16) {
  {
    testing::ScopedEnv env("CAMPO_CPU_BF16", "emulate");
    EXPECT_EQ(CpuBackend().identity().find("native_bf16")->value, "false");
  }
  testing::ScopedEnv env("CAMPO_CPU_BF16", "native");
  EXPECT_EQ(CpuBackend().identity().find("native_bf16")->value,
            cpu_has_native_bf16() ? "true" : "false");
}

TEST(BackendIdentityTest, NativeF16FollowsTheCpuAndCampoCpuF16) {
  {
    testing::ScopedEnv env("CAMPO_CPU_F16", "emulate");
    EXPECT_EQ(CpuBackend().identity().find("native_f16")->value, "false");
  }
  testing::ScopedEnv env("CAMPO_CPU_F16", "native");
  EXPECT_EQ(CpuBackend().identity().find("native_f16")->value,
            cpu_has_native_f16() ? "true" : "false");
  // AVX-512 FP16 is what oneDNN's f16 convolutions need; the flag and the ISA agree.
  EXPECT_EQ(cpu_has_native_f16(), cpu_has_avx512_fp16_instructions() &&
                                      onednn_isa_name().find("fp16") != std::string::npos);
}

TEST(BackendIdentityTest, TheStrictBackendIsTheCpuUnderItsOwnKind) {
  const BackendIdentity cpu = default_cpu_backend()->identity();
  const BackendIdentity strict = make_backend({Device::cpu_strict, 0})->identity();
  EXPECT_EQ(strict.kind, "cpu:strict");
  ASSERT_EQ(names(strict), names(cpu));
  for (size_t i = 0; i < cpu.fields.size(); ++i)
    EXPECT_EQ(strict.fields[i].value, cpu.fields[i].value) << cpu.fields[i].name;
  // Its calibrations are its own: another default file.
  EXPECT_NE(strict.hardware_hash(), cpu.hardware_hash());
}

TEST(BackendIdentityTest, TheHashIgnoresVersionsOnly) {
  BackendIdentity a;
  a.kind = "cpu";
  a.fields = {{"cpu_model", "X"}, {"onednn_version", "3.1.1", true}};
  BackendIdentity b = a;
  b.fields[1].value = "3.2.0";
  EXPECT_EQ(a.hardware_hash(), b.hardware_hash());
  b.fields[0].value = "Y";
  EXPECT_NE(a.hardware_hash(), b.hardware_hash());
  b = a;
  b.kind = "cuda";
  EXPECT_NE(a.hardware_hash(), b.hardware_hash());
}

TEST(BackendIdentityTest, TheCudaBackendNamesTheGpuAndItsLibraries) {
  if (!testing::have_cuda_backend()) GTEST_SKIP() << "no CUDA backend in this build or machine";
  const std::shared_ptr<Backend> gpu = make_backend({Device::cuda, 0});
  const BackendIdentity id = gpu->identity();
  EXPECT_EQ(id.kind, "cuda");
  EXPECT_EQ(names(id), (std::vector<std::string>{"gpu", "compute_capability", "multiprocessors",
                                                 "driver", "cuda_runtime", "cudnn", "cublaslt"}));
  for (const BackendIdentity::Field& f : id.fields) {
    EXPECT_FALSE(f.value.empty()) << f.name;
    const bool hardware =
        f.name == "gpu" || f.name == "compute_capability" || f.name == "multiprocessors";
    EXPECT_EQ(f.is_version, !hardware) << f.name;
  }
  EXPECT_NE(gpu->describe().find(id.find("gpu")->value), std::string::npos) << gpu->describe();
}

}  // namespace
}  // namespace campo
