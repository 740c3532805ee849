#include "train/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "graph/variables.h"
#include "models/models.h"
#include "runtime/check.h"
#include "runtime/hash.h"

namespace campo {

void validate(const DataParallelOptions& d) {
  CAMPO_CHECK(std::isfinite(d.bucket_mb) && d.bucket_mb > 0 && d.bucket_mb <= 4096,
              "--bucket-mb must be in (0, 4096], got ", d.bucket_mb);
  CAMPO_CHECK(std::isfinite(d.timeout_s) && d.timeout_s >= 1 && d.timeout_s <= 86400,
              "--comm-timeout must be 1 to 86400 seconds, got ", d.timeout_s);
}

std::shared_ptr<Communicator> join_ranks(const DataParallelOptions& d, Device device) {
  validate(d);
  std::shared_ptr<Communicator> comm =
      launched_by_mpi() ? make_mpi_communicator(device) : make_single_communicator();
  comm->set_timeout(std::chrono::milliseconds(int64_t(d.timeout_s * 1000)));
  return comm;
}

DataParallelRun data_parallel_run(std::shared_ptr<Communicator> comm, const DataParallelOptions& d) {
  return {std::move(comm), int64_t(d.bucket_mb * double(1 << 20))};
}

void check_data_parallel_model(const DataParallelOptions& d, const std::string& model) {
  CAMPO_CHECK(!d.enabled || step_graph_count(model) == 1,
              "--data-parallel runs classifiers and BERT; ", model,
              " (two step graphs) is not data-parallel yet");
}

DeviceSpec rank_device(const DeviceSpec& device, const DataParallelOptions& dp) {
  if (!dp.enabled || device.type != Device::cuda) return device;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!local) local = std::getenv("LOCAL_RANK");
  DeviceSpec d = device;
  if (local && *local) d.index += std::atoi(local);
  return d;
}

void broadcast_variables(Communicator& comm, VariableStore& vars) {
  if (comm.size() == 1) return;
  for (const std::string& name : vars.names()) {
    Tensor host = vars.read(name);
    comm.broadcast(host.data(), host.nbytes(), 0);
    vars.write(name, host);
  }
}

void check_ranks_agree(Communicator& comm, const std::string& what) {
  if (comm.size() == 1) return;
  uint64_t hash = fnv1a64(what);
  std::vector<uint64_t> all(size_t(comm.size()));
  comm.all_gather(&hash, all.data(), sizeof hash);
  std::string differ;
  for (int r = 1; r < comm.size(); ++r)
    if (all[size_t(r)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  CAMPO_CHECK(differ.empty(), "--data-parallel: rank(s) ", differ,
              " build a different training step or run than rank 0 (every rank must run the "
              "same command on the same data)");
}

nlohmann::json communication_json(const Communicator& comm, const Communicator::Stats& cost,
                                  double steps) {
  steps = std::max(steps, 1.0);
  const double reduce_ms = 1e3 * cost.reduce_seconds / steps;
  return {{"buckets", double(cost.buckets) / steps},
          {"bytes_per_step", double(cost.bytes) / steps},
          {"wait_ms_per_step", 1e3 * cost.wait_seconds / steps},
          {"reduce_ms_per_step", comm.reduce_timed() ? nlohmann::json(reduce_ms) : nlohmann::json()}};
}

void average_over_ranks(Communicator& comm, float* values, int64_t n) {
  if (comm.size() == 1) return;
  comm.all_reduce(values, n, DType::f32, ReduceOp::sum);
  for (int64_t i = 0; i < n; ++i) values[i] /= float(comm.size());
}

}  // namespace campo
