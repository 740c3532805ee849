#include "datasets/loader.h"

#include "datasets/synthetic.h"
#include "runtime/rng.h"

namespace campo {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  CAMPO_CHECK(dataset_ != nullptr, "DataLoader: no data set");
  CAMPO_CHECK(options_.batch_size > 0, "DataLoader: batch size must be positive, got ",
              options_.batch_size);
  CAMPO_CHECK(options_.prefetch >= 0 && options_.prefetch <= 16,
              "DataLoader: prefetch depth must be in [0, 16], got ", options_.prefetch);
  CAMPO_CHECK(options_.shards >= 1 && options_.shard >= 0 && options_.shard < options_.shards,
              "DataLoader: shard ", options_.shard, " of ", options_.shards);
  image_shape_ = dataset_->image_shape();
  image_numel_ = shape_numel(image_shape_);
  if (options_.prefetch > 0) worker_ = std::thread([this] { worker_loop(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = dataset_->size(), bs = options_.batch_size, shards = options_.shards;
  if (options_.drop_last) return n / (bs * shards);
  const int64_t chunks = (n + bs - 1) / bs;  // every shard's batches together
  return (chunks - options_.shard + shards - 1) / shards;
}

std::vector<int64_t> DataLoader::epoch_order(int epoch) const {
  const int64_t n = dataset_->size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  if (options_.shuffle) {
    Rng rng(mix_seed(options_.seed, uint64_t(int64_t(epoch))));
    for (int64_t i = n - 1; i > 0; --i)
      std::swap(order[size_t(i)], order[size_t(rng.below(uint64_t(i + 1)))]);
  }
  return order;
}

void DataLoader::start_epoch(int epoch, int64_t start_batch) {
  const int64_t total = batches_per_epoch();
  CAMPO_CHECK(epoch >= 0, "DataLoader: epoch must be >= 0, got ", epoch);
  CAMPO_CHECK(start_batch >= 0 && start_batch <= total, "DataLoader: cannot resume ",
              dataset_->name(), " at batch ", start_batch, " of an epoch of ", total, " batches");
  Job job;
  job.epoch = epoch;
  job.order = std::make_shared<const std::vector<int64_t>>(epoch_order(epoch));
  job.begin = start_batch;
  job.end = total;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job.generation = generation_.load() + 1;
    generation_ = job.generation;
    queue_.clear();
    job_ = job;
    has_job_ = true;
  }
  worker_cv_.notify_all();
  current_ = job;
  started_ = true;
  epoch_ = epoch;
  position_ = start_batch;
  error_ = nullptr;
}

bool DataLoader::next(Batch& batch) {
  CAMPO_CHECK(started_, "DataLoader::next on ", dataset_->name(), " before start_epoch");
  if (error_) std::rethrow_exception(error_);
  if (position_ >= current_.end) return false;

  if (options_.prefetch == 0) {
    try {
      fill_batch(current_, position_, batch);
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
    ++position_;
    return true;
  }

  Slot slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    consumer_cv_.wait(lock, [&] { return !queue_.empty(); });
    slot = std::move(queue_.front());
    queue_.pop_front();
  }
  worker_cv_.notify_all();
  if (slot.error) {
    error_ = slot.error;
    std::rethrow_exception(error_);
  }
  batch = std::move(slot.batch);
  ++position_;
  return true;
}

bool DataLoader::fill_batch(const Job& job, int64_t b, Batch& batch) const {
  const int64_t n_total = int64_t(job.order->size());
  const int64_t first = (b * options_.shards + options_.shard) * options_.batch_size;
  const int64_t n = std::min(options_.batch_size, n_total - first);
  Shape shape = {n};
  shape.insert(shape.end(), image_shape_.begin(), image_shape_.end());
  batch.images = Tensor::empty(shape, dataset_->input_dtype());
  Shape label_shape = {n};
  for (int64_t d : dataset_->label_shape()) label_shape.push_back(d);
  batch.labels = Tensor::empty(label_shape, DType::i32);
  batch.first_index = first;
  batch.epoch = job.epoch;
  char* inputs = static_cast<char*>(batch.images.data());
  const int64_t input_bytes = image_numel_ * int64_t(dtype_size(dataset_->input_dtype()));
  int32_t* labels = batch.labels.data_as<int32_t>();
  const int64_t per_sample = dataset_->label_numel();
  // Per-token labels may be kIgnoreLabel; a class label may not.
  const bool may_ignore = !dataset_->label_shape().empty();
  const int num_classes = dataset_->num_classes();
  for (int64_t i = 0; i < n; ++i) {
    if (cancelled(job.generation) && options_.prefetch > 0) return false;
    const int64_t index = (*job.order)[size_t(first + i)];
    int32_t* y = labels + i * per_sample;
    dataset_->get_sample(index, job.epoch, inputs + i * input_bytes, y);
    for (int64_t k = 0; k < per_sample; ++k)
      CAMPO_CHECK((y[k] >= 0 && y[k] < num_classes) || (may_ignore && y[k] == kIgnoreLabel),
                  dataset_->name(), ": sample ", index, " has label ", y[k], ", outside [0, ",
                  num_classes, ")");
  }
  return true;
}

void DataLoader::worker_loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      worker_cv_.wait(lock, [&] { return stop_.load() || has_job_; });
      if (stop_) return;
      job = job_;
      has_job_ = false;
    }
    for (int64_t b = job.begin; b < job.end; ++b) {
      Slot slot;
      bool complete = true;
      try {
        complete = fill_batch(job, b, slot.batch);
      } catch (...) {
        slot.error = std::current_exception();
      }
      if (!complete) break;  // cancelled: a new epoch or shutdown
      std::unique_lock<std::mutex> lock(mutex_);
      worker_cv_.wait(lock, [&] {
        return cancelled(job.generation) || int(queue_.size()) < options_.prefetch;
      });
      if (cancelled(job.generation)) break;
      const bool failed = slot.error != nullptr;
      queue_.push_back(std::move(slot));
      lock.unlock();
      consumer_cv_.notify_one();
      if (failed) break;
    }
  }
}

}  // namespace campo
