// campo_bench_kernels: kernel benchmarks, each a GoogleTest test that prints a table and
// asserts nothing about a time (docs/kernels.md: how to run them, what they print).
// GoogleTest's flags select them (--gtest_filter, --gtest_list_tests); the one flag of our
// own is --quick. The binary is not registered with ctest.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "bench/kernels/bench_util.h"

namespace campo::testing {
namespace {
bool quick = false;
}  // namespace
bool quick_mode() { return quick; }
void set_quick_mode(bool q) { quick = q; }
}  // namespace campo::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // removes the --gtest_* flags it knows
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      campo::testing::set_quick_mode(true);
    } else if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: campo_bench_kernels [--quick] [--gtest_filter=PATTERN] [--gtest_list_tests]\n"
          "  --quick  the smallest rows of each benchmark, once (checks that they run)\n"
          "Run with OMP_NUM_THREADS=1 for per-kernel times on a shared machine.\n\n");
      return RUN_ALL_TESTS();  // GoogleTest saw --help too: prints its flags, runs nothing
    } else {
      std::fprintf(stderr,
                   "campo_bench_kernels: error: unknown option '%s'; the options are --quick "
                   "and GoogleTest's --gtest_* flags (--help)\n",
                   arg.c_str());
      return 2;
    }
  }
  return RUN_ALL_TESTS();
}
