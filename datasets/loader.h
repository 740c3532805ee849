// DataLoader: batches of a Dataset in a per-epoch order, prefetched on a background thread.
//
// Order: epoch e visits the permutation shuffle(seed, e) (Fisher-Yates with an Rng seeded
// by a hash of (seed, e)), or 0..N-1 without shuffling. The order depends only on
// (seed, epoch), so a run resumes exactly with start_epoch(epoch, batch_position).
// Batch b of an epoch holds order[b * batch_size, min((b + 1) * batch_size, N)); with
// drop_last the final partial batch is skipped. A shard of several (LoaderOptions::shard)
// takes every shards-th of those batches. Samples are read with
// Dataset::get_for_epoch(index, epoch), so random augmentation varies by epoch and is
// reproduced exactly on resume.
//
// Threading: one worker thread fills up to `prefetch` batches ahead into a bounded queue
// while the consumer trains. start_epoch() discards whatever was prefetched for the
// previous epoch; the destructor stops and joins the worker at any point (the worker
// checks for cancellation between samples). An exception thrown by Dataset::get() on the
// worker is re-thrown by the consumer's next(), and again by every later next() until
// the next start_epoch(). prefetch = 0 fills batches synchronously inside next().
// A DataLoader is used from one consumer thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "datasets/dataset.h"

namespace campo {

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  int prefetch = 2;  // queue depth, 0..16; 0: no thread
  // Data-parallel ranks (train/data_parallel.h): shard `shard` of `shards` takes batch b of
  // the epoch as order[(b * shards + shard) * batch_size, ...): for training (drop_last)
  // piece `shard` of global batch b of shards x batch_size samples, every shard the same
  // number of batches; for evaluation every shards-th batch from its own.
  int shard = 0, shards = 1;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins (or restarts) epoch `epoch` at batch `start_batch` (for resuming).
  void start_epoch(int epoch, int64_t start_batch = 0);
  // Fills `batch` with the next batch of the current epoch; false at the end of it.
  bool next(Batch& batch);

  int64_t batches_per_epoch() const;
  // The sample order of an epoch (a permutation of 0..size-1).
  std::vector<int64_t> epoch_order(int epoch) const;

  int epoch() const { return epoch_; }
  // Index of the batch the next call to next() returns.
  int64_t position() const { return position_; }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }

 private:
  struct Job {
    uint64_t generation = 0;
    int epoch = 0;
    std::shared_ptr<const std::vector<int64_t>> order;
    int64_t begin = 0, end = 0;  // batch range
  };
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  // Builds batch b of the job; returns false when cancelled midway.
  bool fill_batch(const Job& job, int64_t b, Batch& batch) const;
  bool cancelled(uint64_t generation) const {
    return stop_.load(std::memory_order_relaxed) ||
           generation_.load(std::memory_order_relaxed) != generation;
  }
  void worker_loop();

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  Shape image_shape_;
  int64_t image_numel_ = 0;

  // Consumer state.
  Job current_;
  bool started_ = false;
  int epoch_ = 0;
  int64_t position_ = 0;
  std::exception_ptr error_;

  // Shared with the worker, under mutex_.
  std::mutex mutex_;
  std::condition_variable worker_cv_, consumer_cv_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0};
  bool has_job_ = false;
  Job job_;
  std::deque<Slot> queue_;  // batches of the current generation only, in order
  std::thread worker_;
};

}  // namespace campo
