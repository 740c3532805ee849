#include "runtime/conv_algo_cache.h"

#include <chrono>
#include <sstream>

namespace campo {

const char* conv_direction_name(ConvDirection d) {
  switch (d) {
    case ConvDirection::forward:
      return "forward";
    case ConvDirection::backward_data:
      return "backward-data";
    case ConvDirection::backward_filter:
      return "backward-filter";
  }
  return "?";
}

std::string conv_problem_str(const ConvProblem& p) {
  std::ostringstream s;
  s << conv_direction_name(p.direction) << " " << dtype_name(p.dtype) << " math " << p.math_type
    << " x [" << p.n << ", " << p.c << ", " << p.h << ", " << p.w << "] w [" << p.k << ", "
    << (p.groups > 0 ? p.c / p.groups : p.c) << ", " << p.r << ", " << p.s << "] y [" << p.n << ", "
    << p.k << ", " << p.out_h << ", " << p.out_w << "] pad " << p.pad_h << "x" << p.pad_w
    << " stride " << p.stride_h << "x" << p.stride_w << " dilation " << p.dilation_h << "x"
    << p.dilation_w << " groups " << p.groups << " layout " << p.layout << " workspace "
    << p.workspace_limit << " B device " << p.device << (p.deterministic ? " deterministic" : "");
  return s.str();
}

ConvAlgoChoice ConvAlgoCache::find_or_search(const ConvProblem& p,
                                             const std::function<ConvAlgoChoice()>& search) {
  // Held through the search: a measurement wants the device to itself anyway, and a second
  // asker of the same problem then finds the first one's choice.
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = choices_.find(p); it != choices_.end()) {
    ++counts_.hits;
    return it->second;
  }
  ++counts_.searches;
  const auto start = std::chrono::steady_clock::now();
  struct AddTime {  // also when the search throws: it took the time all the same
    std::chrono::steady_clock::time_point start;
    double& seconds;
    ~AddTime() {
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  } add_time{start, counts_.search_seconds};
  const ConvAlgoChoice choice = search();
  choices_.emplace(p, choice);
  return choice;
}

ConvAlgoCache::Counts ConvAlgoCache::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

void ConvAlgoCache::reset_counts() {
  std::lock_guard<std::mutex> lock(mutex_);
  counts_ = {};
}

size_t ConvAlgoCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return choices_.size();
}

}  // namespace campo
