// The single communicator (one process, rank 0 of 1) and the launcher check. What every
// communicator shares is runtime/collective_errors.cc's; whether this build has MPI and
// NCCL, and the communicators built on them, are runtime/mpi_communicator.cc's: the one file
// that asks CAMPO_HAVE_MPI.
#include "runtime/communicator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "runtime/check.h"
#include "runtime/collective_errors.h"

namespace campo {
namespace {

// Rank 0 of 1: a sum, maximum or minimum over one rank is the data itself, and so is a
// broadcast from rank 0. Arguments are checked as the MPI communicator checks them.
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string transport() const override { return "single"; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    detail::check_host_all_reduce(data, count, dtype);
  }
  void broadcast(void* data, size_t bytes, int root) override {
    CAMPO_CHECK(root == 0, "broadcast from rank ", root, ", but this run has one rank (0)");
  }
  void all_gather(const void* mine, void* all, size_t bytes) override {
    if (bytes > 0 && mine != all) std::memmove(all, mine, bytes);
  }
  CommTicket start_all_reduce(float* data, int64_t count, Device device, void* stream) override {
    CAMPO_CHECK(count >= 0, "all-reduce of ", count, " elements");
    return next_ticket_++;
  }
  void finish(CommTicket ticket, void* stream) override {
    CAMPO_CHECK(ticket >= 0 && ticket < next_ticket_.load(), "internal: finish() of ticket ",
                ticket, ", which start_all_reduce never gave");
  }

 private:
  std::atomic<CommTicket> next_ticket_{0};
};

}  // namespace

std::shared_ptr<Communicator> make_single_communicator() {
  return std::make_shared<SingleCommunicator>();
}

bool launched_by_mpi() {
  // Open MPI's singleton start (make_mpi_communicator in a process that no launcher started)
  // writes PMIX_RANK and more into this process's environment, which its children inherit,
  // with OMPI_MCA_ess=singleton (under mpirun it is "^singleton"): no launcher's.
  const char* ess = std::getenv("OMPI_MCA_ess");
  if (ess && std::strcmp(ess, "singleton") == 0) return false;
  // Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx launchers (Open MPI 5, Slurm's srun
  // --mpi=pmix) PMIX_RANK; PMI-1/2 launchers (MPICH's Hydra, srun) PMI_SIZE.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    const char* value = std::getenv(name);
    if (value && *value) return true;
  }
  return false;
}

}  // namespace campo
