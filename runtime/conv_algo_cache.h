// The cuDNN convolution algorithm cache (host code, no CUDA: tested on any machine). A
// convolution kernel (ops/cuda/conv.cc) measures the algorithms of its problem once
// (cudnnFind*AlgorithmEx); the choice is kept here under the full problem, so a second
// kernel of the same problem (another executable on the same backend: another policy in
// `campo bench`, the profiling step's fp32 graph, an evaluation graph) reuses it without
// measuring again. One cache per CUDA backend (runtime/cuda/cuda_backend.h), shared by the
// executables built on it; thread-safe.
//
// Invariant: a key holds everything the choice depends on. The algorithm index, the math
// type and the workspace are cuDNN's numbers for that problem; a problem that differs in any
// field (a dtype, a stride, a smaller workspace that could be had) is searched on its own.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include "runtime/dtype.h"

namespace campo {

enum class ConvDirection : uint8_t { forward, backward_data, backward_filter };
const char* conv_direction_name(ConvDirection d);  // "forward", "backward-data", ...

// A convolution x [n, c, h, w] * w [k, c / groups, r, s] -> y [n, k, out_h, out_w] as cuDNN
// sees it (for backward data x is dx, for backward filter w is dw). y's size is in the key
// too: a transposed convolution's output_shape may pick one of several sizes.
struct ConvProblem {
  ConvDirection direction = ConvDirection::forward;
  DType dtype = DType::f32;
  int math_type = 0;  // the cudnnMathType_t the search starts from
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t k = 0, r = 0, s = 0;
  int64_t out_h = 0, out_w = 0;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int groups = 1;
  int layout = 0;              // the cudnnTensorFormat_t of x, y and w (NCHW)
  size_t workspace_limit = 0;  // bytes the search could use
  int device = 0;              // CUDA device ordinal
  bool deterministic = false;  // only algorithms cuDNN reports deterministic (--deterministic)
  auto operator<=>(const ConvProblem&) const = default;
};
// One line naming every field, for messages and logs.
std::string conv_problem_str(const ConvProblem& p);

// What a search chose: cuDNN's algorithm (the cudnnConvolution*Algo_t as int), the math type
// it ran with, its workspace, and its measured time.
struct ConvAlgoChoice {
  int algo = 0;
  int math_type = 0;
  size_t workspace_bytes = 0;
  float time_ms = 0.0f;
};

class ConvAlgoCache {
 public:
  // The cached choice for `p`, or search()'s, which is then kept. Searches run one at a time
  // (a second thread asking for the same problem waits and reuses the first's choice); a
  // search that throws keeps nothing and counts as a search.
  ConvAlgoChoice find_or_search(const ConvProblem& p,
                                const std::function<ConvAlgoChoice()>& search);

  // Searches run and lookups answered from the cache since construction (or reset_counts),
  // and the wall-clock seconds the searches took (measuring every algorithm of a problem:
  // what a bench or a test pays once per problem).
  struct Counts {
    int64_t searches = 0, hits = 0;
    double search_seconds = 0;
  };
  Counts counts() const;
  void reset_counts();
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::map<ConvProblem, ConvAlgoChoice> choices_;
  Counts counts_;
};

}  // namespace campo
