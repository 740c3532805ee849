// The cuDNN algorithm cache's host logic (runtime/conv_algo_cache.h): a problem is searched
// once and then answered from the cache, any differing field is a new problem, a failed
// search keeps nothing, and concurrent askers of one problem search once.
#include "runtime/conv_algo_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace campo {
namespace {

// ResNet-50's first convolution at batch 32.
ConvProblem resnet_stem() {
  ConvProblem p;
  p.direction = ConvDirection::forward;
  p.dtype = DType::f16;
  p.math_type = 1;
  p.n = 32, p.c = 3, p.h = 224, p.w = 224;
  p.k = 64, p.r = 7, p.s = 7;
  p.out_h = 112, p.out_w = 112;
  p.pad_h = p.pad_w = 3;
  p.stride_h = p.stride_w = 2;
  p.workspace_limit = size_t(256) << 20;
  return p;
}

TEST(ConvAlgoCacheTest, SearchesOnceThenHits) {
  ConvAlgoCache cache;
  int searches = 0;
  auto search = [&] {
    ++searches;
    return ConvAlgoChoice{.algo = 6, .math_type = 1, .workspace_bytes = 4096, .time_ms = 0.5f};
  };
  const ConvAlgoChoice first = cache.find_or_search(resnet_stem(), search);
  const ConvAlgoChoice second = cache.find_or_search(resnet_stem(), search);
  EXPECT_EQ(searches, 1);
  EXPECT_EQ(second.algo, 6);
  EXPECT_EQ(second.math_type, first.math_type);
  EXPECT_EQ(second.workspace_bytes, 4096u);
  EXPECT_EQ(cache.counts().searches, 1);
  EXPECT_EQ(cache.counts().hits, 1);
  EXPECT_EQ(cache.size(), 1u);
  cache.reset_counts();
  EXPECT_EQ(cache.counts().searches + cache.counts().hits, 0);
  EXPECT_EQ(cache.size(), 1u);  // the choices stay
}

// Every field of the key separates problems: changing any one of them searches again.
TEST(ConvAlgoCacheTest, EveryFieldIsPartOfTheKey) {
  std::vector<void (*)(ConvProblem&)> changes = {
      [](ConvProblem& p) { p.direction = ConvDirection::backward_data; },
      [](ConvProblem& p) { p.direction = ConvDirection::backward_filter; },
      [](ConvProblem& p) { p.dtype = DType::bf16; },
      [](ConvProblem& p) { p.math_type = 2; },
      [](ConvProblem& p) { p.n = 16; },
      [](ConvProblem& p) { p.c = 4; },
      [](ConvProblem& p) { p.h = 225; },
      [](ConvProblem& p) { p.w = 225; },
      [](ConvProblem& p) { p.k = 128; },
      [](ConvProblem& p) { p.r = 5; },
      [](ConvProblem& p) { p.s = 5; },
      [](ConvProblem& p) { p.out_h = 113; },
      [](ConvProblem& p) { p.out_w = 113; },
      [](ConvProblem& p) { p.pad_h = 2; },
      [](ConvProblem& p) { p.pad_w = 2; },
      [](ConvProblem& p) { p.stride_h = 1; },
      [](ConvProblem& p) { p.stride_w = 1; },
      [](ConvProblem& p) { p.dilation_h = 2; },
      [](ConvProblem& p) { p.dilation_w = 2; },
      [](ConvProblem& p) { p.groups = 3; },
      [](ConvProblem& p) { p.layout = 1; },
      [](ConvProblem& p) { p.workspace_limit = size_t(128) << 20; },
      [](ConvProblem& p) { p.device = 1; },
      [](ConvProblem& p) { p.deterministic = true; },
  };
  ConvAlgoCache cache;
  int searches = 0;
  auto search = [&] { return ConvAlgoChoice{.algo = searches++}; };
  cache.find_or_search(resnet_stem(), search);
  for (size_t i = 0; i < changes.size(); ++i) {
    ConvProblem p = resnet_stem();
    changes[i](p);
    EXPECT_NE(p, resnet_stem()) << "change " << i;
    EXPECT_EQ(cache.find_or_search(p, search).algo, int(i) + 1) << conv_problem_str(p);
  }
  EXPECT_EQ(cache.counts().searches, int64_t(changes.size()) + 1);
  EXPECT_EQ(cache.counts().hits, 0);
  // And each is found again as itself.
  for (size_t i = 0; i < changes.size(); ++i) {
    ConvProblem p = resnet_stem();
    changes[i](p);
    EXPECT_EQ(cache.find_or_search(p, search).algo, int(i) + 1) << conv_problem_str(p);
  }
  EXPECT_EQ(cache.counts().hits, int64_t(changes.size()));
}

// The searches' wall-clock time is summed (what `campo bench` prints per policy); a lookup
// answered from the cache adds nothing, a search that throws adds its time.
TEST(ConvAlgoCacheTest, SearchTimeIsSummed) {
  ConvAlgoCache cache;
  auto slow = [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return ConvAlgoChoice{.algo = 1};
  };
  cache.find_or_search(resnet_stem(), slow);
  const double one = cache.counts().search_seconds;
  EXPECT_GE(one, 0.019);
  cache.find_or_search(resnet_stem(), slow);  // a hit: no time
  EXPECT_EQ(cache.counts().search_seconds, one);
  ConvProblem other = resnet_stem();
  other.n = 64;
  EXPECT_THROW(cache.find_or_search(other,
                                    []() -> ConvAlgoChoice {
                                      std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                      throw std::runtime_error("no algo");
                                    }),
               std::runtime_error);
  EXPECT_GE(cache.counts().search_seconds, one + 0.019);
  cache.reset_counts();
  EXPECT_EQ(cache.counts().search_seconds, 0.0);
}

TEST(ConvAlgoCacheTest, FailedSearchKeepsNothing) {
  ConvAlgoCache cache;
  EXPECT_THROW(cache.find_or_search(
                   resnet_stem(), []() -> ConvAlgoChoice { throw std::runtime_error("no algo"); }),
               std::runtime_error);
  EXPECT_EQ(cache.size(), 0u);
  const ConvAlgoChoice c = cache.find_or_search(resnet_stem(), [] { return ConvAlgoChoice{3}; });
  EXPECT_EQ(c.algo, 3);
  EXPECT_EQ(cache.counts().searches, 2);
}

TEST(ConvAlgoCacheTest, ConcurrentAskersSearchOnce) {
  ConvAlgoCache cache;
  std::atomic<int> searches{0};
  std::vector<std::thread> threads;
  std::vector<int> algos(8, -1);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      algos[size_t(t)] = cache
                             .find_or_search(resnet_stem(),
                                             [&] {
                                               ++searches;
                                               std::this_thread::yield();
                                               return ConvAlgoChoice{5};
                                             })
                             .algo;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(searches.load(), 1);
  for (int a : algos) EXPECT_EQ(a, 5);
  EXPECT_EQ(cache.counts().searches, 1);
  EXPECT_EQ(cache.counts().hits, 7);
}

TEST(ConvAlgoCacheTest, ProblemTextNamesTheFields) {
  const std::string text = conv_problem_str(resnet_stem());
  EXPECT_EQ(text,
            "forward f16 math 1 x [32, 3, 224, 224] w [64, 3, 7, 7] y [32, 64, 112, 112] pad 3x3 "
            "stride 2x2 dilation 1x1 groups 1 layout 0 workspace 268435456 B device 0");
}

}  // namespace
}  // namespace campo
