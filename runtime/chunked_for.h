// One loop over [0, n) in fixed chunks, split over the OpenMP team once n is large enough:
// the chunk bounds never depend on the team's size, so work whose every element is a pure
// function of its input and index (runtime/minifloat.h's encodings, runtime/mx.h's blocks)
// gives the same bits on any thread count.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace campo {

// body(begin, end) over consecutive chunks of `chunk` (the last one shorter) covering
// [0, n): in parallel when n >= threshold, else once over the whole range.
template <typename Body>
void for_each_chunk(size_t n, size_t threshold, size_t chunk, const Body& body) {
  if (n < threshold) return body(size_t(0), n);
  const int64_t chunks = int64_t((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = size_t(c) * chunk;
    body(begin, std::min(n, begin + chunk));
  }
}

}  // namespace campo
