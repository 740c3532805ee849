// DataLoader: coverage of every index once per epoch, seeded per-epoch shuffles, drop_last,
// partial batches, resuming, prefetch equivalence, errors from the worker, and shutdown
// mid-epoch without hanging.
#include "datasets/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tests/datasets/idx_file_util.h"

namespace campo {
namespace {

using testing::contains;
using testing::error_message;

// Sample i: every pixel equals i, label i % classes; optionally slow or failing.
class IndexDataset final : public Dataset {
 public:
  explicit IndexDataset(int64_t n, Shape shape = {1, 2, 3}, int classes = 7)
      : n_(n), shape_(std::move(shape)), classes_(classes) {}
  int64_t size() const override { return n_; }
  Shape image_shape() const override { return shape_; }
  int num_classes() const override { return classes_; }
  std::string name() const override { return "index"; }
  void get(int64_t index, float* image, int32_t* label) const override {
    check_index(index);
    if (index == fail_at) CAMPO_FAIL("index: sample ", index, " is unreadable");
    if (delay.count()) std::this_thread::sleep_for(delay);
    std::fill(image, image + image_numel(), float(index));
    *label = int32_t(index % classes_);
  }
  int64_t fail_at = -1;
  std::chrono::microseconds delay{0};

 private:
  int64_t n_;
  Shape shape_;
  int classes_;
};

// The sample indices of one whole epoch, checking each batch's layout on the way.
std::vector<int64_t> run_epoch(DataLoader& loader, int epoch, int64_t start_batch = 0) {
  loader.start_epoch(epoch, start_batch);
  std::vector<int64_t> seen;
  Batch batch;
  const int64_t bs = loader.options().batch_size;
  int64_t b = start_batch;
  while (loader.next(batch)) {
    EXPECT_EQ(batch.first_index, b * bs);
    EXPECT_EQ(batch.epoch, epoch);
    EXPECT_EQ(batch.images.dtype(), DType::f32);
    EXPECT_EQ(batch.labels.dtype(), DType::i32);
    EXPECT_EQ(batch.images.dim(0), batch.size());
    const int64_t numel = loader.dataset().image_numel();
    const float* images = batch.images.data_as<float>();
    const int32_t* labels = batch.labels.data_as<int32_t>();
    for (int64_t i = 0; i < batch.size(); ++i) {
      const int64_t index = int64_t(images[i * numel]);
      EXPECT_EQ(images[i * numel + numel - 1], float(index));
      EXPECT_EQ(labels[i], int32_t(index % loader.dataset().num_classes()));
      seen.push_back(index);
    }
    ++b;
  }
  EXPECT_EQ(b, loader.batches_per_epoch());
  EXPECT_FALSE(loader.next(batch));  // stays at the end
  return seen;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  if (int64_t(v.size()) != n) return false;
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i)
    if (v[size_t(i)] != i) return false;
  return true;
}

class LoaderPrefetch : public ::testing::TestWithParam<int> {};

TEST_P(LoaderPrefetch, EveryIndexOncePerEpoch) {
  auto ds = std::make_shared<IndexDataset>(103);
  for (int64_t bs : {1, 10, 64, 103, 200}) {
    DataLoader loader(ds, {.batch_size = bs, .shuffle = true, .seed = 5, .prefetch = GetParam()});
    EXPECT_EQ(loader.batches_per_epoch(), (103 + bs - 1) / bs);
    for (int epoch = 0; epoch < 3; ++epoch)
      EXPECT_TRUE(is_permutation_of_range(run_epoch(loader, epoch), 103)) << "bs " << bs;
  }
}

TEST_P(LoaderPrefetch, ShufflesDifferPerEpochAndRepeatPerSeed) {
  auto ds = std::make_shared<IndexDataset>(500);
  LoaderOptions o{.batch_size = 32, .shuffle = true, .seed = 11, .prefetch = GetParam()};
  DataLoader a(ds, o), b(ds, o);
  std::vector<int64_t> a0 = run_epoch(a, 0), a1 = run_epoch(a, 1);
  EXPECT_NE(a0, a1);
  EXPECT_EQ(run_epoch(b, 1), a1);  // any epoch, in any order, reproduces
  EXPECT_EQ(run_epoch(b, 0), a0);
  EXPECT_EQ(a0, a.epoch_order(0));
  o.seed = 12;
  DataLoader c(ds, o);
  EXPECT_NE(run_epoch(c, 0), a0);
  // Not the identity, either.
  std::vector<int64_t> identity(500);
  for (int64_t i = 0; i < 500; ++i) identity[size_t(i)] = i;
  EXPECT_NE(a0, identity);
}

TEST_P(LoaderPrefetch, WithoutShuffleTheOrderIsSequential) {
  auto ds = std::make_shared<IndexDataset>(37);
  DataLoader loader(ds, {.batch_size = 8, .shuffle = false, .prefetch = GetParam()});
  std::vector<int64_t> seen = run_epoch(loader, 4);
  for (int64_t i = 0; i < 37; ++i) EXPECT_EQ(seen[size_t(i)], i);
}

TEST_P(LoaderPrefetch, PartialLastBatchAndDropLast) {
  auto ds = std::make_shared<IndexDataset>(10);
  Batch batch;
  {
    DataLoader loader(ds, {.batch_size = 4, .prefetch = GetParam()});
    EXPECT_EQ(loader.batches_per_epoch(), 3);
    loader.start_epoch(0);
    std::vector<int64_t> sizes;
    while (loader.next(batch)) sizes.push_back(batch.size());
    EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 2}));
    EXPECT_EQ(batch.images.shape(), (Shape{2, 1, 2, 3}));
    EXPECT_EQ(batch.first_index, 8);
  }
  {
    DataLoader loader(ds, {.batch_size = 4, .drop_last = true, .prefetch = GetParam()});
    EXPECT_EQ(loader.batches_per_epoch(), 2);
    std::vector<int64_t> seen = run_epoch(loader, 0);
    EXPECT_EQ(seen.size(), 8u);
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
    // Fewer samples than one batch: nothing at all.
    DataLoader tiny(std::make_shared<IndexDataset>(3),
                    {.batch_size = 4, .drop_last = true, .prefetch = GetParam()});
    EXPECT_EQ(tiny.batches_per_epoch(), 0);
    tiny.start_epoch(0);
    EXPECT_FALSE(tiny.next(batch));
  }
}

TEST_P(LoaderPrefetch, ResumesMidEpoch) {
  auto ds = std::make_shared<IndexDataset>(50);
  LoaderOptions o{.batch_size = 7, .seed = 2, .prefetch = GetParam()};
  DataLoader full(ds, o), resumed(ds, o);
  std::vector<int64_t> all = run_epoch(full, 3);
  std::vector<int64_t> tail = run_epoch(resumed, 3, 4);
  EXPECT_EQ(resumed.position(), 8);
  ASSERT_EQ(tail.size(), all.size() - 28);
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), all.begin() + 28));
  // Resuming at the end is an empty epoch; beyond it is an error.
  resumed.start_epoch(3, 8);
  Batch batch;
  EXPECT_FALSE(resumed.next(batch));
  EXPECT_TRUE(contains(error_message([&] { resumed.start_epoch(3, 9); }),
                       "cannot resume index at batch 9 of an epoch of 8 batches"));
}

TEST_P(LoaderPrefetch, RestartingAnEpochMidwayDiscardsPrefetchedBatches) {
  auto ds = std::make_shared<IndexDataset>(200);
  DataLoader loader(ds, {.batch_size = 10, .seed = 9, .prefetch = GetParam()});
  loader.start_epoch(0);
  Batch batch;
  ASSERT_TRUE(loader.next(batch));
  ASSERT_TRUE(loader.next(batch));
  std::vector<int64_t> expected = loader.epoch_order(1);
  EXPECT_EQ(run_epoch(loader, 1), expected);
}

TEST_P(LoaderPrefetch, WorkerErrorsReachTheConsumer) {
  auto ds = std::make_shared<IndexDataset>(40);
  ds->fail_at = 25;
  DataLoader loader(ds, {.batch_size = 10, .shuffle = false, .prefetch = GetParam()});
  loader.start_epoch(0);
  Batch batch;
  ASSERT_TRUE(loader.next(batch));
  ASSERT_TRUE(loader.next(batch));
  EXPECT_TRUE(contains(error_message([&] { loader.next(batch); }), "sample 25 is unreadable"));
  // Sticky until the next epoch starts.
  EXPECT_TRUE(contains(error_message([&] { loader.next(batch); }), "sample 25 is unreadable"));
  loader.start_epoch(1, 3);
  ASSERT_TRUE(loader.next(batch));
  EXPECT_EQ(batch.first_index, 30);
  EXPECT_FALSE(loader.next(batch));
}

TEST_P(LoaderPrefetch, BadLabelsFromADatasetAreCaught) {
  // A data set whose labels exceed its class count.
  class Liar final : public Dataset {
   public:
    int64_t size() const override { return 4; }
    Shape image_shape() const override { return {1, 1, 1}; }
    int num_classes() const override { return 2; }
    std::string name() const override { return "liar"; }
    void get(int64_t index, float* image, int32_t* label) const override {
      *image = 0;
      *label = int32_t(index);
    }
  };
  DataLoader loader(std::make_shared<Liar>(),
                    {.batch_size = 4, .shuffle = false, .prefetch = GetParam()});
  loader.start_epoch(0);
  Batch batch;
  EXPECT_TRUE(contains(error_message([&] { loader.next(batch); }),
                       "liar: sample 2 has label 2, outside [0, 2)"));
}

INSTANTIATE_TEST_SUITE_P(Loader, LoaderPrefetch, ::testing::Values(0, 1, 3),
                         [](const auto& info) { return "prefetch" + std::to_string(info.param); });

TEST(Loader, PrefetchedBatchesEqualSynchronousOnes) {
  auto ds = std::make_shared<IndexDataset>(77, Shape{2, 3, 3});
  DataLoader sync(ds, {.batch_size = 16, .seed = 4, .prefetch = 0});
  DataLoader async(ds, {.batch_size = 16, .seed = 4, .prefetch = 4});
  sync.start_epoch(2);
  async.start_epoch(2);
  Batch a, b;
  while (sync.next(a)) {
    ASSERT_TRUE(async.next(b));
    EXPECT_EQ(a.images.to_float_vector(), b.images.to_float_vector());
    EXPECT_EQ(a.labels.to_float_vector(), b.labels.to_float_vector());
    EXPECT_EQ(a.first_index, b.first_index);
  }
  EXPECT_FALSE(async.next(b));
}

TEST(Loader, DestroyingMidEpochDoesNotHang) {
  auto ds = std::make_shared<IndexDataset>(100000);
  ds->delay = std::chrono::microseconds(200);  // one batch of 256 takes ~50 ms
  auto start = std::chrono::steady_clock::now();
  {
    DataLoader loader(ds, {.batch_size = 256, .prefetch = 3});
    loader.start_epoch(0);
    Batch batch;
    ASSERT_TRUE(loader.next(batch));
    // The worker is now filling batches ahead (or waiting on the full queue).
  }
  {
    DataLoader loader(ds, {.batch_size = 256, .prefetch = 2});
    loader.start_epoch(0);  // destroyed before the first batch is done
  }
  { DataLoader never_started(ds, {.batch_size = 256, .prefetch = 2}); }
  {
    // Queue full, consumer gone.
    auto fast = std::make_shared<IndexDataset>(1000);
    DataLoader loader(fast, {.batch_size = 10, .prefetch = 2});
    loader.start_epoch(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
}

TEST(Loader, BadOptionsAndMisuse) {
  auto ds = std::make_shared<IndexDataset>(10);
  EXPECT_TRUE(contains(error_message([&] { DataLoader(ds, {.batch_size = 0}); }),
                       "batch size must be positive, got 0"));
  EXPECT_TRUE(contains(error_message([&] { DataLoader(ds, {.prefetch = 17}); }),
                       "prefetch depth must be in [0, 16], got 17"));
  EXPECT_TRUE(contains(error_message([&] { DataLoader(nullptr, {}); }), "no data set"));
  DataLoader loader(ds, {});
  Batch batch;
  EXPECT_TRUE(contains(error_message([&] { loader.next(batch); }), "before start_epoch"));
  EXPECT_TRUE(contains(error_message([&] { loader.start_epoch(-1); }), "epoch must be >= 0"));
}

}  // namespace
}  // namespace campo
