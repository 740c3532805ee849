// Data-parallel training (train/data_parallel.h). The Mpi* suites run under
// `mpirun -np 2` (ctest's mpi_ entries): every rank runs the same test body.
//
// Two ranks with batch B against one process with batch 2B on the same samples (the ranks'
// shards of each global batch, DataLoader's shards): the losses and the weights after 20
// steps. Not bitwise: the two ranks' mean losses are summed and halved where one process
// takes one mean over 2B rows, and oneDNN's weight-gradient reductions split the batch
// differently at B and 2B rows, so sums differ by an ulp now and then, which training then
// amplifies (ReLU masks flip where a pre-activation cancels). As in the model-array tests
// (model_array_test.cc), every step must lie within 3x the envelope of a control, the
// one-process run restarted from its parameters times 1 + 1e-6 u (rounding-sized noise),
// plus 1e-4 relative. Ranks that reduced wrongly (a missing 1 / ranks, a bucket reduced on
// one rank only, a shard read twice) are off by 1e-2 or more from the first update. The
// replicas themselves must stay bitwise identical: every rank applies the same reduced
// gradients.
//
// Batch norm keeps each rank's own batch statistics (as PyTorch's DDP does without
// SyncBatchNorm), so ResNet-18 is not one process's run at batch 2B: its replicas are
// checked to stay identical and to train.
#include "train/data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "datasets/loader.h"
#include "datasets/synthetic.h"
#include "graph/optimizer.h"
#include "runtime/cpu_backend.h"
#include "tests/train/array_test_util.h"
#include "train/trainer.h"

namespace campo {
namespace {

// The Mpi* suites need the launcher: ctest runs them under mpiexec -n 2.
class MpiDataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!mpi_built_in()) GTEST_SKIP() << "this build has no MPI (CAMPO_MPI)";
    if (!launched_by_mpi()) GTEST_SKIP() << "not started by mpirun (ctest runs it as 2 ranks)";
  }
};

std::shared_ptr<Communicator> world() {
  static std::shared_ptr<Communicator> comm = [] {
    auto c = make_mpi_communicator(Device::cpu);
    c->set_timeout(std::chrono::seconds(120));
    return c;
  }();
  return comm;
}

ModelOptions options_for(const Shape& image) {
  ModelOptions m;
  m.in_channels = int(image[0]);
  m.image_size = int(image[1]);
  return m;
}

std::shared_ptr<const Dataset> data_for(const Shape& image, int64_t size) {
  SyntheticOptions so;
  so.size = size;
  so.image_shape = image;
  return std::make_shared<SyntheticDataset>(so);
}

// This rank's shard of each global batch, in order.
LoaderOptions my_shard(int64_t batch, const Communicator& comm) {
  return {.batch_size = batch,
          .shuffle = false,
          .drop_last = true,
          .shard = comm.rank(),
          .shards = comm.size()};
}

// Whether every rank holds the same bits in every parameter and optimizer state of `vars`
// (buffers, batch norm's running statistics, are each rank's own).
bool replicas_identical(Communicator& comm, const VariableStore& vars) {
  uint64_t hash = 1469598103934665603ull;
  std::vector<std::string> names = vars.names_of_kind(VariableKind::parameter);
  for (const std::string& name : vars.names_of_kind(VariableKind::optimizer_state))
    names.push_back(name);
  for (const std::string& name : names) {
    const Tensor t = vars.read(name);
    const auto* p = static_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  }
  std::vector<uint64_t> all(size_t(comm.size()));
  comm.all_gather(&hash, all.data(), sizeof hash);
  for (uint64_t h : all)
    if (h != all[0]) return false;
  return true;
}

// The largest |a - b| / max|b| over a parameter's elements, over every parameter.
double weight_distance(const VariableStore& a, const VariableStore& b) {
  double worst = 0;
  for (const std::string& name : b.names_of_kind(VariableKind::parameter)) {
    const std::vector<float> x = a.read(name).to_float_vector(), y = b.read(name).to_float_vector();
    double diff = 0, scale = 1e-12;
    for (size_t i = 0; i < y.size(); ++i) {
      diff = std::max(diff, double(std::abs(x[i] - y[i])));
      scale = std::max(scale, double(std::abs(y[i])));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

struct Case {
  std::string model;
  Shape image;
  int64_t batch;  // per rank
  int steps;
  OptimizerConfig optimizer;
  float lr;
};

ArrayHyperparameters hyper(const Case& c) {
  ArrayHyperparameters h = one_model(c.optimizer, 42);
  h.lr = {c.lr};
  return h;
}

void expect_matches_one_process(const Case& c) {
  const std::shared_ptr<Communicator> comm = world();
  ASSERT_EQ(comm->size(), 2) << "run under mpirun -np 2";
  const int ranks = comm->size();
  const ModelOptions mo = options_for(c.image);
  // Small buckets, so that a step has several in flight.
  TrainingSession parallel(c.model, mo, c.image, c.batch, c.optimizer, hyper(c),
                           default_cpu_backend(), {}, ConvLayout::blocked, {comm, 64 << 10});
  TrainingSession single(c.model, mo, c.image, c.batch * ranks, c.optimizer, 42,
                         default_cpu_backend());
  TrainingSession control(c.model, mo, c.image, c.batch * ranks, c.optimizer, 42,
                          default_cpu_backend());
  testing::perturb_parameters(control.variables());
  EXPECT_EQ(weight_distance(parallel.variables(), single.variables()), 0.0);

  const auto data = data_for(c.image, c.batch * ranks * c.steps);
  DataLoader whole(data, {.batch_size = c.batch * ranks, .shuffle = false, .drop_last = true});
  DataLoader shard(data, my_shard(c.batch, *comm));
  ASSERT_EQ(whole.batches_per_epoch(), shard.batches_per_epoch());
  whole.start_epoch(0);
  shard.start_epoch(0);
  Batch global, mine;
  double envelope = 0;
  int step = 0;
  while (whole.next(global)) {
    ASSERT_TRUE(shard.next(mine));
    const double loss = parallel.train_step(mine, c.lr);
    const double one = single.train_step(global, c.lr);
    const double ctl = control.train_step(global, c.lr);
    envelope = std::max(envelope, std::abs(ctl - one) / std::abs(one));
    EXPECT_LE(std::abs(loss - one) / std::abs(one), 3 * envelope + 1e-4)
        << c.model << " step " << step << ": 2 ranks " << loss << ", one process " << one;
    ++step;
  }
  EXPECT_EQ(step, c.steps);
  const double control_distance = weight_distance(control.variables(), single.variables());
  EXPECT_LE(weight_distance(parallel.variables(), single.variables()), 3 * control_distance + 1e-4)
      << c.model << ": the weights after " << step << " steps";
  EXPECT_TRUE(replicas_identical(*comm, parallel.variables()));
}

OptimizerConfig sgd() {
  OptimizerConfig o;
  o.momentum = 0.9f;
  o.weight_decay = 1e-4f;
  return o;
}

OptimizerConfig adam() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::adam;
  return o;
}

TEST_F(MpiDataParallelTest, LeNetSgdMatchesOneProcessOfTheGlobalBatch) {
  expect_matches_one_process({"lenet", {1, 28, 28}, 8, 20, sgd(), 0.05f});
}

TEST_F(MpiDataParallelTest, LeNetAdamMatchesOneProcessOfTheGlobalBatch) {
  expect_matches_one_process({"lenet", {1, 28, 28}, 8, 20, adam(), 1e-3f});
}

TEST_F(MpiDataParallelTest, MlpMatchesOneProcessOfTheGlobalBatch) {
  expect_matches_one_process({"mlp", {1, 28, 28}, 16, 20, sgd(), 0.05f});
}

TEST_F(MpiDataParallelTest, ResNet18ReplicasStayIdenticalAndTrain) {
  const std::shared_ptr<Communicator> comm = world();
  const Shape image = {3, 32, 32};
  const int64_t batch = 4;
  TrainingSession parallel("resnet18", options_for(image), image, batch, sgd(),
                           hyper({"resnet18", image, batch, 20, sgd(), 0.01f}),
                           default_cpu_backend(), {}, ConvLayout::blocked, {comm});
  const auto data = data_for(image, batch * comm->size() * 20);
  DataLoader shard(data, my_shard(batch, *comm));
  shard.start_epoch(0);
  Batch b;
  std::vector<float> losses;
  while (shard.next(b)) losses.push_back(parallel.train_step(b, 0.01f));
  ASSERT_EQ(losses.size(), 20u);
  EXPECT_TRUE(replicas_identical(*comm, parallel.variables()));
  // Every rank reports the same (averaged) loss, and it falls.
  float first = losses.front();
  comm->broadcast(&first, sizeof first, 0);
  EXPECT_EQ(first, losses.front());
  EXPECT_LT(losses.back(), losses.front());
}

// fp16 with dynamic loss scaling: an overflow on one rank (an inf in its batch) skips the
// update on every rank, and they stay identical.
TEST_F(MpiDataParallelTest, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  const std::shared_ptr<Communicator> comm = world();
  const Shape image = {1, 28, 28};
  const PrecisionConfig p =
      precision_config(Precision::amp, {.low_precision = "fp16"}, Device::cpu);
  ASSERT_TRUE(p.scaler.enabled);
  const Case c{"lenet", image, 8, 4, sgd(), 0.05f};
  TrainingSession parallel("lenet", options_for(image), image, 8, sgd(), hyper(c),
                           default_cpu_backend(), p, ConvLayout::blocked, {comm});
  const auto data = data_for(image, 8 * comm->size() * 4);
  DataLoader shard(data, my_shard(8, *comm));
  shard.start_epoch(0);
  Batch b;
  for (int step = 0; shard.next(b); ++step) {
    const bool poisoned = step == 2 && comm->rank() == 1;
    if (poisoned) b.images.data_as<float>()[0] = INFINITY;
    const Tensor before = parallel.variables().read("conv1.weight");
    parallel.train_step(b, 0.05f);
    const Tensor after = parallel.variables().read("conv1.weight");
    const bool moved = std::memcmp(before.data(), after.data(), before.nbytes()) != 0;
    EXPECT_EQ(moved, step != 2) << "rank " << comm->rank() << " step " << step;
  }
  EXPECT_EQ(parallel.scaler().skipped_steps(), 1);
  EXPECT_TRUE(replicas_identical(*comm, parallel.variables()));
}

// Cost-aware: the ranks measure their own costs, yet run rank 0's plan.
TEST_F(MpiDataParallelTest, CostAwareRanksRunRankZerosPlan) {
  const std::shared_ptr<Communicator> comm = world();
  const Shape image = {1, 28, 28};
  PrecisionConfig p = precision_config(Precision::cost_aware, {}, Device::cpu);
  p.profile_warmup = 1;
  p.profile_steps = 2;
  const Case c{"lenet", image, 8, 1, sgd(), 0.05f};
  TrainingSession parallel("lenet", options_for(image), image, 8, sgd(), hyper(c),
                           default_cpu_backend(), p, ConvLayout::blocked, {comm});
  EXPECT_NO_THROW(check_ranks_agree(*comm, parallel.train_graph().to_text()));
  EXPECT_GT(parallel.train_graph().nodes_of_kind(OpKind::AllReduceStart).size(), 0u);
}

TEST_F(MpiDataParallelTest, DifferentRunsAreRefused) {
  const std::shared_ptr<Communicator> comm = world();
  EXPECT_NO_THROW(check_ranks_agree(*comm, "the same"));
  try {
    check_ranks_agree(*comm, "rank " + std::to_string(comm->rank()));
    FAIL() << "ranks that differ were not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 build a different"), std::string::npos)
        << e.what();
  }
}

// Without mpirun (the ordinary suites): the graph of a data-parallel step and the shards.

TEST(DataParallelGraphTest, BucketsFollowTheBackwardPassAndAverage) {
  const Shape image = {1, 28, 28};
  Graph g;
  VariableStore vars(1, default_cpu_backend());
  TrainingGraphSpec spec{"lenet", options_for(image), image, 8, sgd(), {}};
  spec.data_parallel = {.ranks = 4, .bucket_bytes = 16 << 10};
  const TrainingGraphInfo info = build_training_graph(g, vars, spec);
  const std::vector<NodeId> starts = g.nodes_of_kind(OpKind::AllReduceStart);
  EXPECT_EQ(starts.size(), info.gradient_bucket_bytes.size());
  ASSERT_GE(starts.size(), 2u);
  // Every parameter's update reads a reduced gradient, scaled by 1 / 4.
  for (NodeId w : g.nodes_of_kind(OpKind::AllReduceWait))
    EXPECT_EQ(attrs_as<AllReduceAttrs>(g.node(w).attrs).scale, 0.25f);
  for (const std::string& name : vars.names_of_kind(VariableKind::parameter)) {
    const ValueId grad = update_gradient_of(g, g.node(g.find_node(name)).outputs[0]);
    ASSERT_NE(grad, kNoValue) << name;
    EXPECT_EQ(g.node(g.value(grad).producer).kind, OpKind::AllReduceWait) << name;
  }
  // Each bucket starts as soon as its gradients exist: between its last input's producer
  // and it, the schedule runs only casts and other buckets' starts; and the first starts
  // before the backward pass ends.
  const std::vector<NodeId> order = g.topological_order();
  std::vector<int> at(size_t(g.num_nodes()));
  for (size_t i = 0; i < order.size(); ++i) at[size_t(order[i])] = int(i);
  int last_backward = 0;
  for (NodeId id : order)
    if (g.node(id).phase == Phase::backward && g.node(id).kind != OpKind::AllReduceWait &&
        g.node(id).kind != OpKind::AllReduceStart)
      last_backward = std::max(last_backward, at[size_t(id)]);
  EXPECT_LT(at[size_t(starts.front())], last_backward) << "the first bucket waits for the end";
  for (NodeId s : starts) {
    int ready = 0;
    for (ValueId in : g.node(s).inputs) ready = std::max(ready, at[size_t(g.value(in).producer)]);
    for (int k = ready + 1; k < at[size_t(s)]; ++k) {
      const OpKind kind = g.node(order[size_t(k)]).kind;
      EXPECT_TRUE(kind == OpKind::Cast || kind == OpKind::AllReduceStart)
          << g.node(s).name << " waits behind " << g.node(order[size_t(k)]).name;
    }
  }
}

// One process with the single communicator: the data-parallel step is the plain step.
TEST(DataParallelGraphTest, OneRankTrainsAsWithout) {
  const Shape image = {1, 28, 28};
  const Case c{"lenet", image, 8, 5, sgd(), 0.05f};
  TrainingSession parallel("lenet", options_for(image), image, 8, sgd(), hyper(c),
                           default_cpu_backend(), {}, ConvLayout::blocked,
                           {make_single_communicator(), 16 << 10});
  TrainingSession plain("lenet", options_for(image), image, 8, sgd(), 42, default_cpu_backend());
  DataLoader loader(data_for(image, 40), {.batch_size = 8, .shuffle = false});
  loader.start_epoch(0);
  Batch b;
  while (loader.next(b)) EXPECT_EQ(parallel.train_step(b, 0.05f), plain.train_step(b, 0.05f));
  EXPECT_EQ(weight_distance(parallel.variables(), plain.variables()), 0.0);
}

TEST(DataParallelGraphTest, ShardsSplitEachGlobalBatch) {
  const auto data = data_for({1, 4, 4}, 50);
  DataLoader whole(data, {.batch_size = 12, .shuffle = true, .drop_last = true, .seed = 5});
  DataLoader a(
      data,
      {.batch_size = 4, .shuffle = true, .drop_last = true, .seed = 5, .shard = 0, .shards = 3});
  DataLoader c(
      data,
      {.batch_size = 4, .shuffle = true, .drop_last = true, .seed = 5, .shard = 2, .shards = 3});
  ASSERT_EQ(whole.batches_per_epoch(), 4);
  ASSERT_EQ(a.batches_per_epoch(), 4);
  whole.start_epoch(1);
  a.start_epoch(1);
  c.start_epoch(1);
  Batch w, x, z;
  while (whole.next(w)) {
    ASSERT_TRUE(a.next(x) && c.next(z));
    EXPECT_EQ(x.first_index, w.first_index);
    EXPECT_EQ(z.first_index, w.first_index + 8);
    const float* pw = w.images.data_as<float>();
    EXPECT_EQ(0, std::memcmp(x.images.data(), pw, x.images.nbytes()));
    EXPECT_EQ(0, std::memcmp(z.images.data(), pw + 8 * 16, z.images.nbytes()));
  }
  // Evaluation (no drop_last): every batch once over the shards, the last partial one too.
  int64_t total = 0;
  for (int s = 0; s < 3; ++s) {
    DataLoader e(data, {.batch_size = 8, .shuffle = false, .shard = s, .shards = 3});
    e.start_epoch(0);
    Batch eb;
    while (e.next(eb)) total += eb.size();
  }
  EXPECT_EQ(total, 50);
}

}  // namespace
}  // namespace campo
