// Data sets: random access to labelled samples, and the host batches a loader hands out.
// Invariants: an image is f32, CHW, dense, already normalised (what the model consumes);
// a label is an int in [0, num_classes()); get() and get_for_epoch() are const and
// thread-safe, since the loader calls them from its prefetch thread.
// Text data sets (masked-language-model samples) differ in three virtuals: their input is
// i32 token ids [T] (input_dtype), they have a label per token (label_shape [T], with
// kIgnoreLabel where there is nothing to predict) and num_classes() is the vocabulary
// size; the loader reads every data set through get_sample.
//
// Random augmentation: a data set that augments (random crops, flips) draws sample `index`
// of epoch `epoch` from an Rng seeded by a hash of (its seed, epoch, index), so a sample is
// a pure function of the three: independent of batch order, prefetching and threads, and
// the same again when a run resumes. The loader passes the epoch (get_for_epoch).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/tensor.h"

namespace campo {

// A label that has nothing to predict (a token that is not masked): PyTorch's ignore_index.
inline constexpr int32_t kIgnoreLabel = -100;

class Dataset {
 public:
  virtual ~Dataset() = default;

  // Number of samples.
  virtual int64_t size() const = 0;
  // Shape of one image, [C, H, W].
  virtual Shape image_shape() const = 0;
  virtual int num_classes() const = 0;
  // A short name for logs ("fashion-mnist/train", "synthetic/test").
  virtual std::string name() const = 0;

  // Writes image_numel() floats (CHW) to `image` and the label to `*label`.
  // index must lie in [0, size()).
  // A data set that augments returns the draw of epoch 0.
  virtual void get(int64_t index, float* image, int32_t* label) const = 0;

  // The sample as epoch `epoch` (>= 0) sees it. Data sets without random augmentation
  // need not override this: it is get(). A wrapper around another data set (a subset, a
  // concatenation) should forward this call too, or its samples stop varying by epoch.
  virtual void get_for_epoch(int64_t index, int epoch, float* image, int32_t* label) const {
    get(index, image, label);
  }

  // The input's element type: f32 images, or i32 token ids (text).
  virtual DType input_dtype() const { return DType::f32; }
  // Shape of one sample's labels: [] (a class per image) or [T] (a target per token).
  virtual Shape label_shape() const { return {}; }
  // The sample as epoch `epoch` sees it, for any input type: image_numel() elements of
  // input_dtype() to `input`, label_numel() labels. Image data sets need not override it.
  virtual void get_sample(int64_t index, int epoch, void* input, int32_t* labels) const {
    get_for_epoch(index, epoch, static_cast<float*>(input), labels);
  }

  int64_t image_numel() const { return shape_numel(image_shape()); }
  int64_t label_numel() const { return shape_numel(label_shape()); }

 protected:
  // Throws a campo::Error naming the data set when index is out of range.
  void check_index(int64_t index) const;
};

// A view of `base`: its first `limit` samples (0, or at least its size: all of them; the
// name says "[:limit]" when it cuts), with every image pixel x mapped to tanh(x) when
// `tanh_pixels` (f32 images only: DCGAN's synthetic data, ~N(0, 1) pixels, into (-1, 1)).
// Forwards every read, the epoch's augmentation included.
std::shared_ptr<const Dataset> dataset_view(std::shared_ptr<const Dataset> base, int64_t limit,
                                            bool tanh_pixels = false);

// One batch of samples on the host.
struct Batch {
  Tensor images;            // [N, C, H, W] f32, or [N, T] i32 token ids (text)
  Tensor labels;            // [N] i32, or [N, T] (text)
  int64_t first_index = 0;  // position in the epoch's order of the first sample
  int epoch = 0;            // the epoch this batch belongs to

  int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
};

}  // namespace campo
