// The input prefetch of a training session on a device whose copies overlap its compute
// (Backend::overlaps_uploads: CUDA, and cpu:strict to test the path): during step t the
// session uploads step t+1's inputs into staged device tensors of their own (the backend's
// upload queue: on CUDA a second stream), and step t+1 lands them in the executable's
// placeholders (a stream wait and device copies) instead of copying from the host then.
// Keyed by the batches they came from: a step whose batches are not the ones uploaded (the
// first step, bench, a caller that does not read ahead) is fed from the host as before.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace campo {

class Backend;
class Executable;
struct Batch;

class InputPrefetch {
 public:
  explicit InputPrefetch(Backend& backend) : backend_(backend) {}
  // An upload still under way when the session goes is waited for (its staged tensor dies).
  ~InputPrefetch();
  InputPrefetch(const InputPrefetch&) = delete;
  InputPrefetch& operator=(const InputPrefetch&) = delete;

  // Starts uploading each (placeholder, host tensor) of `exe` (same dtype and shape as the
  // placeholder) into its staged tensor, remembering `key`, the batches they came from.
  void upload(Executable& exe, const std::vector<std::pair<std::string, Tensor>>& inputs,
              const std::vector<const Batch*>& key);
  // Lands the uploaded inputs in exe's placeholders when `key` is what was uploaded and
  // returns true; false (nothing done) otherwise. Either way nothing is pending afterwards.
  bool land(Executable& exe, const std::vector<const Batch*>& key);
  // Steps fed from an upload (tests, --profile's notes).
  int64_t landed() const { return landed_; }

 private:
  Backend& backend_;
  std::map<std::string, Tensor> staged_;  // by placeholder
  std::vector<std::string> pending_;      // placeholders uploaded since the last landing
  std::vector<const Batch*> key_;
  int64_t landed_ = 0;
};

}  // namespace campo
