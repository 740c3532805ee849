// The communicators in one process (runtime/communicator.h): the single one, the timeout
// line, the launcher check, the MPI communicator outside mpirun (Open MPI's singleton: rank 0
// of 1), NCCL's over one rank where there is a GPU, and the error lines of a build or machine
// without MPI, NCCL or a GPU. The collectives of two ranks are
// tests/runtime/mpi_communicator_test.cc's, under mpirun.
#include "runtime/communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/collective_errors.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/test_util.h"

#if CAMPO_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace campo {
namespace {

using campo::testing::contains;
using campo::testing::error_message;
using campo::testing::ScopedEnv;

// The host collectives of a communicator of one rank, whatever its transport: every
// reduction, broadcast and gather leaves the data as it is.
void expect_one_rank_collectives_leave_data(Communicator& comm) {
  ASSERT_EQ(comm.rank(), 0);
  ASSERT_EQ(comm.size(), 1);
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    std::vector<float> f = {1.5f, -2.0f, 3.25f};
    comm.all_reduce(f.data(), int64_t(f.size()), DType::f32, op);
    EXPECT_EQ(f, (std::vector<float>{1.5f, -2.0f, 3.25f}));
    std::vector<int32_t> i = {7, -8};
    comm.all_reduce(i.data(), int64_t(i.size()), DType::i32, op);
    EXPECT_EQ(i, (std::vector<int32_t>{7, -8}));
    std::vector<int64_t> l = {int64_t(1) << 40, -3};
    comm.all_reduce(l.data(), int64_t(l.size()), DType::i64, op);
    EXPECT_EQ(l, (std::vector<int64_t>{int64_t(1) << 40, -3}));
  }
  std::string text = "weights";
  comm.broadcast(text.data(), text.size(), 0);
  EXPECT_EQ(text, "weights");
  const uint64_t mine = 0x1234567890abcdefull;
  uint64_t all = 0;
  comm.all_gather(&mine, &all, sizeof mine);
  EXPECT_EQ(all, mine);
  comm.all_gather(&all, &all, sizeof all);  // in place
  EXPECT_EQ(all, mine);

  // Buckets: tickets distinct, in flight together, finished in any order, data kept.
  std::vector<float> a(1000, 0.5f), b(3, -1.0f);
  const CommTicket ta = comm.start_all_reduce(a.data(), int64_t(a.size()), Device::cpu, nullptr);
  const CommTicket tb = comm.start_all_reduce(b.data(), int64_t(b.size()), Device::cpu, nullptr);
  const CommTicket empty = comm.start_all_reduce(nullptr, 0, Device::cpu, nullptr);
  EXPECT_NE(ta, tb);
  EXPECT_NE(tb, empty);
  comm.finish(tb, nullptr);
  comm.finish(empty, nullptr);
  comm.finish(ta, nullptr);
  EXPECT_EQ(a, std::vector<float>(1000, 0.5f));
  EXPECT_EQ(b, std::vector<float>(3, -1.0f));
}

// The argument errors every communicator gives alike, each one line.
void expect_argument_errors(Communicator& comm) {
  uint16_t half = 0;
  EXPECT_TRUE(contains(error_message([&] { comm.all_reduce(&half, 1, DType::f16, ReduceOp::sum); }),
                       "f32, i32 and i64 only"));
  EXPECT_TRUE(
      contains(error_message([&] { comm.all_reduce(nullptr, 4, DType::f32, ReduceOp::sum); }),
               "null pointer"));
  float x = 0;
  EXPECT_TRUE(contains(error_message([&] { comm.all_reduce(&x, -1, DType::f32, ReduceOp::max); }),
                       "all-reduce of -1 elements"));
  EXPECT_TRUE(
      contains(error_message([&] { comm.broadcast(&x, sizeof x, 1); }), "broadcast from rank 1"));
  EXPECT_TRUE(contains(error_message([&] { comm.finish(12345, nullptr); }), "ticket 12345"));
}

TEST(CommunicatorTest, SingleIsRankZeroOfOne) {
  const std::shared_ptr<Communicator> comm = make_single_communicator();
  EXPECT_EQ(comm->transport(), "single");
  EXPECT_EQ(comm->timeout(), std::chrono::minutes(10));
  comm->set_timeout(std::chrono::seconds(3));
  EXPECT_EQ(comm->timeout(), std::chrono::seconds(3));
  expect_one_rank_collectives_leave_data(*comm);
}

TEST(CommunicatorTest, SingleRefusesBadArguments) {
  const std::shared_ptr<Communicator> comm = make_single_communicator();
  expect_argument_errors(*comm);
}

TEST(CommunicatorTest, TimeoutLineNamesTheRankAndWhatWaited) {
  EXPECT_EQ(detail::timeout_line(1, 2, "gradient all-reduce", std::chrono::seconds(5)),
            "campo: rank 1 of 2: the gradient all-reduce waited more than 5 s for the other "
            "ranks (one of them died or hangs); ending the job");
  EXPECT_TRUE(contains(detail::timeout_line(0, 4, "broadcast", std::chrono::milliseconds(250)),
                       "rank 0 of 4: the broadcast waited more than 0.25 s"));
}

TEST(CommunicatorTest, LaunchedByMpiReadsTheLaunchersVariables) {
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE", std::nullopt), pmix("PMIX_RANK", std::nullopt),
      pmi("PMI_SIZE", std::nullopt), ess("OMPI_MCA_ess", std::nullopt);
  EXPECT_FALSE(launched_by_mpi());
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    ScopedEnv set(name, "2");
    EXPECT_TRUE(launched_by_mpi()) << name;
  }
  {
    ScopedEnv empty("OMPI_COMM_WORLD_SIZE", "");
    EXPECT_FALSE(launched_by_mpi());
  }
  // What Open MPI's singleton start leaves in the environment is no launcher's; mpirun's is.
  ScopedEnv rank("PMIX_RANK", "0");
  {
    ScopedEnv singleton("OMPI_MCA_ess", "singleton");
    EXPECT_FALSE(launched_by_mpi());
  }
  ScopedEnv mpirun("OMPI_MCA_ess", "^singleton");
  EXPECT_TRUE(launched_by_mpi());
}

// Outside mpirun, Open MPI starts as a singleton: the MPI communicator is rank 0 of 1, its
// collectives (through the communication thread) leave the data, and its argument errors
// are the single communicator's. Without MPI in the build: one line saying what to install.
TEST(CommunicatorTest, MpiOutsideMpirunIsRankZeroOfOne) {
  if (!mpi_built_in()) {
    const std::string msg = error_message([] { make_mpi_communicator(Device::cpu); });
    EXPECT_TRUE(contains(msg, "--data-parallel needs Open MPI, and this build has none"));
    EXPECT_TRUE(contains(msg, "libopenmpi-dev"));
    return;
  }
  if (launched_by_mpi()) GTEST_SKIP() << "started by mpirun: this test is of a process alone";
  const std::shared_ptr<Communicator> comm = make_mpi_communicator(Device::cpu);
  EXPECT_EQ(comm->transport(), "mpi");
  EXPECT_FALSE(launched_by_mpi()) << "the singleton's own variables read as a launcher's";
  comm->set_timeout(std::chrono::seconds(30));
  expect_one_rank_collectives_leave_data(*comm);
  expect_argument_errors(*comm);
  // A second communicator shares the process's MPI.
  const std::shared_ptr<Communicator> again = make_mpi_communicator(Device::cpu_strict);
  EXPECT_EQ(again->size(), 1);
  float x = 2;
  EXPECT_TRUE(contains(
      error_message([&] { again->start_all_reduce(&x, 1, Device::cuda, nullptr); }), "NCCL"));
}

// make_mpi_communicator(Device::cuda) without a GPU, NCCL or MPI: one line, no crash.
TEST(CommunicatorTest, CudaWithoutGpuIsOneErrorLine) {
  if (campo::testing::have_cuda_backend())
    GTEST_SKIP() << "a GPU is present: this test is of a machine without one";
  const std::string msg = error_message([] { make_mpi_communicator(Device::cuda); });
  if (!mpi_built_in())
    EXPECT_TRUE(contains(msg, "needs Open MPI"));
  else if (!nccl_built_in())
    EXPECT_TRUE(contains(msg, "needs NCCL, and this build has none"));
  else
    EXPECT_TRUE(contains(msg, "--data-parallel on cuda: no CUDA device is present"));
}

// Where there are a GPU and NCCL: the "mpi+nccl" communicator of one rank (MPI's singleton).
// CUDA buckets are summed in place on NCCL's stream, after the caller's stream's work and
// before its next (the legacy default stream here, then a device-wide synchronize); several
// in flight, finished out of order, twice (the done-events are reused); host buckets go to MPI.
TEST(CommunicatorTest, CudaBucketsOverOneRankWithNccl) {
  std::string why_not;
  const std::shared_ptr<Backend> gpu = campo::testing::try_cuda_backend(&why_not);
  if (!gpu) GTEST_SKIP() << "no CUDA: " << why_not;
  if (!nccl_built_in()) GTEST_SKIP() << "this build has no NCCL (it needs MPI and CUDA)";
  if (launched_by_mpi()) GTEST_SKIP() << "started by mpirun: this test is of a process alone";
#if CAMPO_HAVE_CUDA
  const std::shared_ptr<Communicator> comm = make_mpi_communicator(Device::cuda);
  EXPECT_EQ(comm->transport(), "mpi+nccl");
  comm->set_timeout(std::chrono::seconds(30));
  expect_one_rank_collectives_leave_data(*comm);
  Rng rng(7);
  const std::vector<int64_t> sizes = {1, 1000, 1 << 20};
  for (int round = 0; round < 2; ++round) {
    std::vector<Tensor> host, device;
    std::vector<CommTicket> tickets;
    for (int64_t n : sizes) {
      host.push_back(campo::testing::random_tensor({n}, rng));
      device.push_back(gpu->to_device(host.back()));
      tickets.push_back(
          comm->start_all_reduce(device.back().device_data<float>(), n, Device::cuda, nullptr));
    }
    for (size_t b = sizes.size(); b-- > 0;) comm->finish(tickets[b], nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (size_t b = 0; b < sizes.size(); ++b) {
      const Tensor back = gpu->to_host(device[b]);
      EXPECT_EQ(std::memcmp(back.data(), host[b].data(), host[b].nbytes()), 0)
          << "round " << round << " bucket of " << sizes[b];
    }
  }
#endif
}

}  // namespace
}  // namespace campo
