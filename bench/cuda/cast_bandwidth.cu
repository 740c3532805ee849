// Cast bandwidth micro-benchmark: times the CUDA Cast kernel (ops/cuda/cast.cu, run through
// the kernel registry on the CUDA backend's stream) for f32 -> f16, f16 -> f32 and
// f32 -> bf16 on a 256 MiB source buffer (or the MiB given), with CUDA events, and prints
// the bytes moved per second (read + write) and their fraction of the device's peak memory
// bandwidth, 2 * memory clock * bus width / 8 (HBM and GDDR are double data rate; the clock
// and width from cudaDeviceGetAttribute, since CUDA 13 dropped cudaDeviceProp's
// memoryClockRate). Without a GPU it says so and exits with status 1.
//
// Usage: campo_bench_cast [source MiB = 256] [timed runs = 20]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

#include "ops/kernel.h"
#include "ops/op.h"
#include "runtime/backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"

namespace {

using namespace campo;

// Peak bandwidth in bytes per second of device `index`.
double peak_bytes_per_second(int index) {
  int clock_khz = 0, bus_bits = 0;
  CAMPO_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, index));
  CAMPO_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index));
  return 2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0;
}

void bench(const std::shared_ptr<Backend>& backend, DType from, DType to, size_t source_bytes,
           int reps, double peak) {
  auto& gpu = dynamic_cast<cuda::CudaBackend&>(*backend);
  const int64_t n = int64_t(source_bytes / dtype_size(from));
  ExecContext ctx(backend);
  const Tensor x = backend->zeros({n}, from), y = backend->zeros({n}, to);
  const KernelSpec spec{OpKind::Cast, CastAttrs{to}, from, {{{n}, from}}, {{{n}, to}}, "Cast"};
  auto kernel = create_kernel(spec, ctx);
  for (int k = 0; k < 3; ++k) kernel->run(ctx, {x}, {y});  // warm-up
  cudaEvent_t start, stop;
  CAMPO_CUDA_CHECK(cudaEventCreate(&start));
  CAMPO_CUDA_CHECK(cudaEventCreate(&stop));
  CAMPO_CUDA_CHECK(cudaEventRecord(start, gpu.stream()));
  for (int k = 0; k < reps; ++k) kernel->run(ctx, {x}, {y});
  CAMPO_CUDA_CHECK(cudaEventRecord(stop, gpu.stream()));
  CAMPO_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CAMPO_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CAMPO_CUDA_CHECK(cudaEventDestroy(start));
  CAMPO_CUDA_CHECK(cudaEventDestroy(stop));
  const double seconds = double(ms) / 1e3 / reps;
  const double bytes = double(n) * double(dtype_size(from) + dtype_size(to));
  const double rate = bytes / seconds;
  std::printf("Cast %-4s -> %-4s  %10lld elements  %8.3f ms  %8.1f GB/s  %5.1f%% of peak\n",
              dtype_name(from), dtype_name(to), static_cast<long long>(n), seconds * 1e3,
              rate / 1e9, 100.0 * rate / peak);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? size_t(std::strtoull(argv[1], nullptr, 10)) : 256;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  if (mib == 0 || reps <= 0) {
    std::fprintf(stderr, "usage: %s [source MiB = 256] [timed runs = 20]\n", argv[0]);
    return 2;
  }
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cast_bandwidth: no CUDA device (%s); nothing to measure\n",
                 status != cudaSuccess ? cudaGetErrorString(status) : "0 devices");
    return 1;
  }
  try {
    const std::shared_ptr<Backend> backend = make_backend({Device::cuda, 0});
    const double peak = peak_bytes_per_second(0);
    std::printf(
        "%s\npeak memory bandwidth %.1f GB/s (2 x memory clock x bus width); source buffer %zu "
        "MiB, %d runs\n",
        backend->describe().c_str(), peak / 1e9, mib, reps);
    const size_t bytes = mib << 20;
    bench(backend, DType::f32, DType::f16, bytes, reps, peak);
    bench(backend, DType::f16, DType::f32, bytes, reps, peak);
    bench(backend, DType::f32, DType::bf16, bytes, reps, peak);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cast_bandwidth: %s\n", e.what());
    return 1;
  }
  return 0;
}
