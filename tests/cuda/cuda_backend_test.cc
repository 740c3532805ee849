// The CUDA backend through the Backend interface: host round trips of every float dtype at
// sizes with tails (and one larger than a staging chunk), device copies, fill_zero, scalars,
// timers (CUPTI's, and events where CUPTI is off), the caching allocator on the real device,
// the out-of-memory and device-index error lines, copies from another thread, tensors
// outliving their backend, the GPU's PCI bus id and NVML's energy counter found through it.
// Without a GPU (or in a build without CUDA) each test skips with the reason.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "runtime/backend.h"
#include "runtime/caching_allocator.h"
#include "runtime/device_energy.h"
#include "runtime/energy.h"
#include "runtime/kernel_activity.h"
#include "runtime/nvml_energy.h"
#include "runtime/pci_device.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;
using testing::random_tensor_of;

// Host tensors compared bit for bit: a copy must not change a single bit of any dtype.
::testing::AssertionResult same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return ::testing::AssertionFailure() << dtype_name(a.dtype()) << shape_str(a.shape()) << " vs "
                                         << dtype_name(b.dtype()) << shape_str(b.shape());
  if (a.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) != 0)
    return ::testing::AssertionFailure()
           << dtype_name(a.dtype()) << shape_str(a.shape()) << ": bytes differ";
  return ::testing::AssertionSuccess();
}

CachingAllocator& allocator_of(Backend& backend) {
  auto* owner = dynamic_cast<CachingAllocatorOwner*>(&backend);
  CAMPO_CHECK(owner != nullptr, "the CUDA backend is not a CachingAllocatorOwner");
  return owner->allocator();
}

TEST(CudaBackendCudaTest, RoundTripEveryDtype) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(1);
  // 9'000'001 f32 elements is 36 MB: more than one 16 MiB staging chunk, with a tail.
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000003), int64_t(9000001)}) {
      const Tensor host = random_tensor_of(dtype, {n}, rng);
      const Tensor device = gpu->to_device(host);
      EXPECT_EQ(device.device(), Device::cuda);
      EXPECT_TRUE(same_bytes(gpu->to_host(device), host)) << "n = " << n;
    }
  // An empty tensor copies nothing, and a shaped one keeps its shape.
  const Tensor empty = random_tensor_of(DType::f32, {0, 3}, rng);
  EXPECT_TRUE(same_bytes(gpu->to_host(gpu->to_device(empty)), empty));
  const Tensor shaped = random_tensor_of(DType::bf16, {3, 5, 7}, rng);
  EXPECT_TRUE(same_bytes(gpu->to_host(gpu->to_device(shaped)), shaped));
}

TEST(CudaBackendCudaTest, CopyDeviceToDevice) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(2);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor host = random_tensor_of(dtype, {1000003}, rng);
    const Tensor src = gpu->to_device(host);
    const Tensor dst = gpu->empty(host.shape(), dtype);
    gpu->copy(dst, src);
    EXPECT_TRUE(same_bytes(gpu->to_host(dst), host)) << dtype_name(dtype);
  }
  const Tensor a = gpu->empty({7}, DType::f32), b = gpu->empty({8}, DType::f32);
  EXPECT_TRUE(contains(error_message([&] { gpu->copy(a, b); }), "copy: f32[8] into f32[7]"));
}

TEST(CudaBackendCudaTest, FillZero) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(3);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor t = gpu->to_device(random_tensor_of(dtype, {1000003}, rng, 1.0f, 2.0f));
    gpu->fill_zero(t);
    const Tensor back = gpu->to_host(t);
    const Tensor zeros = Tensor::zeros(t.shape(), dtype);
    EXPECT_TRUE(same_bytes(back, zeros)) << dtype_name(dtype);
  }
  EXPECT_TRUE(
      same_bytes(gpu->to_host(gpu->zeros({7}, DType::f32)), Tensor::zeros({7}, DType::f32)));
}

TEST(CudaBackendCudaTest, ScalarsAndHostBoundary) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const Tensor s = gpu->zeros({1}, DType::f32);
  EXPECT_EQ(gpu->read_scalar(s), 0.0f);
  gpu->write_scalar(s, 3.25f);
  EXPECT_EQ(gpu->read_scalar(s), 3.25f);
  gpu->write_scalar(s, -1e-30f);
  EXPECT_EQ(gpu->read_scalar(s), -1e-30f);
  // Device tensors refuse host access.
  EXPECT_TRUE(contains(error_message([&] { (void)s.data(); }), "from the host"));
}

TEST(CudaBackendCudaTest, TimerGivesNonNegativeTimes) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const Tensor big = gpu->empty({int64_t(64) << 20}, DType::f32);
  auto timer = gpu->make_timer(3);
  for (int step = 0; step < 2; ++step) {
    timer->start(0);
    gpu->fill_zero(big);
    timer->stop(0);
    timer->start(1);
    timer->stop(1);
    const std::vector<double>& ms = timer->elapsed_ms();
    ASSERT_EQ(ms.size(), 3u);
    EXPECT_GT(ms[0], 0.0);  // 256 MB of memset takes time
    EXPECT_GE(ms[1], 0.0);
    EXPECT_EQ(ms[2], 0.0);  // never timed
  }
}

// The CUPTI timer (runtime/cuda/cupti_timer.h): both memsets of slot 0 counted, none for
// slot 1, the one between the nodes apart, as the recorded table (CAMPO_CUPTI_RECORD) shows.
// Skips, saying why, where CUPTI cannot record (e.g. a container without the privilege).
TEST(CudaBackendCudaTest, CuptiTimerCountsEveryActivityOfANode) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  testing::TempDir dir;
  testing::ScopedEnv on("CAMPO_CUPTI", std::nullopt);
  testing::ScopedEnv record("CAMPO_CUPTI_RECORD", dir.file("step.jsonl"));
  std::unique_ptr<NodeTimer> timer;
  try {
    timer = gpu->make_timer(2);
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  EXPECT_EQ(gpu->node_timer_source(), "CUPTI kernel activity");
  const Tensor t = gpu->empty({int64_t(1) << 22}, DType::f32);
  for (int step = 0; step < 2; ++step) {
    timer->start(0);
    gpu->fill_zero(t);
    gpu->fill_zero(t);
    timer->stop(0);
    gpu->fill_zero(t);
    timer->start(1);
    timer->stop(1);
    const std::vector<double> ms = timer->elapsed_ms();
    ASSERT_EQ(ms.size(), 2u);
    EXPECT_GT(ms[0], 0.0);
    EXPECT_EQ(ms[1], 0.0);
    const RecordedActivity r = read_activity_table(dir.file("step.jsonl"));
    EXPECT_EQ(r.device, gpu->describe());
    const NodeAttribution a = attribute_kernels(r.table, 2);
    EXPECT_EQ(a.kernels, (std::vector<uint32_t>{2, 0})) << "step " << step;
    EXPECT_EQ(a.unattributed_kernels, 1u) << "step " << step;
    EXPECT_DOUBLE_EQ(a.ms[0], ms[0]);
  }
}

TEST(CudaBackendCudaTest, CuptiOffTimesWithEventsAndSaysSo) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  {
    testing::ScopedEnv off("CAMPO_CUPTI", "0");
    testing::ScopedEnv no_record("CAMPO_CUPTI_RECORD", std::nullopt);
    auto timer = gpu->make_timer(1);
    EXPECT_EQ(gpu->node_timer_source(), "CUDA events (CUPTI unavailable: CAMPO_CUPTI=0)");
    testing::TempDir dir;
    testing::ScopedEnv record("CAMPO_CUPTI_RECORD", dir.file("t.jsonl"));
    EXPECT_TRUE(contains(error_message([&] { gpu->make_timer(1); }),
                         "CAMPO_CUPTI_RECORD=" + dir.file("t.jsonl") +
                             ": nothing to record, CUPTI is unavailable (CAMPO_CUPTI=0)"));
  }
  testing::ScopedEnv bad("CAMPO_CUPTI", "yes");
  EXPECT_TRUE(contains(error_message([&] { gpu->make_timer(1); }),
                       "CAMPO_CUPTI must be 0 (time nodes with CUDA events) or 1 (CUPTI, the "
                       "default), got 'yes'"));
}

TEST(CudaBackendCudaTest, AllocatorReusesFreedBlocks) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  CachingAllocator& allocator = allocator_of(*gpu);
  void* first = nullptr;
  {
    auto block = gpu->allocate(123457);
    first = block.get();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 256, 0u);
  }
  const size_t raw = allocator.stats().raw_allocations;
  auto again = gpu->allocate(123457);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(allocator.stats().raw_allocations, raw);
  // A training-like loop of tensors of repeated sizes: no raw allocation after the first step.
  size_t raw_after_first = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<Tensor> live;
    for (int64_t n : {int64_t(1), int64_t(1000), int64_t(1000003), int64_t(3) << 20})
      live.push_back(gpu->zeros({n}, DType::f32));
    gpu->synchronize();
    if (step == 0) raw_after_first = allocator.stats().raw_allocations;
    EXPECT_EQ(allocator.stats().raw_allocations, raw_after_first) << "step " << step;
  }
  // The loop's blocks are free; `again` still holds its small segment. empty_cache releases
  // the wholly free segments (the loop's large ones) and keeps every block in use.
  const AllocatorStats before = allocator.stats();
  allocator.empty_cache();
  const AllocatorStats after = allocator.stats();
  EXPECT_LT(after.bytes_reserved, before.bytes_reserved);
  EXPECT_LT(after.segments, before.segments);
  EXPECT_GE(after.segments, 1u);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.raw_frees - before.raw_frees, before.segments - after.segments);
}

TEST(CudaBackendCudaTest, OutOfMemoryNamesTheSizes) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const std::string msg = error_message([&] { gpu->allocate(size_t(1) << 50); });  // 1 PiB
  EXPECT_TRUE(contains(msg, "out of device memory: asked for 1073741824.0 MiB, "));
  EXPECT_TRUE(contains(msg, " MiB free of "));
  EXPECT_TRUE(contains(msg, "(campo holds "));
  // The failed cudaMalloc leaves no error behind for the next call.
  Rng rng(4);
  const Tensor host = random_tensor_of(DType::f32, {1000}, rng);
  EXPECT_TRUE(same_bytes(gpu->to_host(gpu->to_device(host)), host));
}

TEST(CudaBackendCudaTest, DeviceIndexOutOfRangeNamesTheCount) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const std::string msg = error_message([] { make_backend({Device::cuda, 99}); });
  EXPECT_TRUE(contains(msg, "--device cuda:99: this machine has "));
  EXPECT_TRUE(contains(msg, " CUDA device"));
}

TEST(CudaBackendCudaTest, DescribeNamesTheGpu) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const std::string d = gpu->describe();
  EXPECT_TRUE(contains(d, "cuda:0: "));
  EXPECT_TRUE(contains(d, "compute capability "));
  EXPECT_TRUE(contains(d, " GiB, "));
  EXPECT_TRUE(contains(d, " SMs, driver "));
  EXPECT_EQ(gpu->device(), (DeviceSpec{Device::cuda, 0}));
  EXPECT_EQ(gpu->kernel_device(), Device::cuda);
  EXPECT_FALSE(gpu->emulates_low_precision());
}

TEST(CudaBackendCudaTest, CopiesFromAnotherThread) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  Rng rng(5);
  const Tensor host = random_tensor_of(DType::bf16, {100003}, rng);
  Tensor back;
  std::thread loader([&] { back = gpu->to_host(gpu->to_device(host)); });
  loader.join();
  EXPECT_TRUE(same_bytes(back, host));
}

TEST(CudaBackendCudaTest, TensorsMayOutliveTheirBackend) {
  Tensor survivor;
  {
    auto gpu = CAMPO_CUDA_OR_SKIP();
    survivor = gpu->zeros({1000}, DType::f32);
    gpu->zeros({5000}, DType::f32);  // cached, released with the backend
  }
  survivor = Tensor();  // freed raw: no crash, no leak report
  SUCCEED();
}

// The bus id CUDA gives is one NVML finds (the match bench's energy relies on), and the
// counter read through it over one idle second is a GPU's power in watts, not milli- or
// kilowatts. A GPU without the counter or a user NVML refuses skips with the reason; NVML
// not finding the CUDA device's bus id fails.
TEST(CudaBackendCudaTest, NvmlFindsTheGpuByItsPciBusId) {
  auto gpu = CAMPO_CUDA_OR_SKIP();
  const auto* pci = dynamic_cast<const PciDevice*>(gpu.get());
  ASSERT_NE(pci, nullptr) << "the CUDA backend is not a PciDevice";
  const std::string bus_id = pci->pci_bus_id();
  EXPECT_TRUE(std::regex_match(bus_id, std::regex("[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"
                                                  "\\.[0-9a-fA-F]")))
      << bus_id;
  DeviceEnergy energy = open_device_energy(*gpu, kPowercapRoot, nvml_library_path());
  if (!energy.meter) {
    ASSERT_FALSE(contains(energy.unavailable, "NVML finds no GPU at PCI bus id"))
        << energy.unavailable;
    GTEST_SKIP() << "NVML energy not available: " << energy.unavailable;
  }
  EXPECT_STREQ(energy.meter->source(), "nvml");
  gpu->synchronize();
  const auto before = energy.meter->read();
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const auto after = energy.meter->read();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double watts = energy.meter->joules_between(before, after) / seconds;
  EXPECT_GT(watts, 5) << "GPU " << bus_id;  // an idle data-centre GPU draws tens of watts
  EXPECT_LT(watts, 2000) << "GPU " << bus_id;
}

}  // namespace
}  // namespace campo
