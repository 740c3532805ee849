#!/usr/bin/env bash
# Builds the library, the CLI, the tests and the libFuzzer targets with clang, AddressSanitizer
# + UndefinedBehaviorSanitizer in build-asan/ (one build serves this script and
# scripts/fuzz.sh) and runs the tests there; any sanitizer report fails the run.
#   bash scripts/sanitize.sh          the tests that find memory errors (CI): tests/ folders
#                                     $SANITIZE_TEST_DIRS, below
#   bash scripts/sanitize.sh all      every test, the end-to-end trainings too (by hand)
#   bash scripts/sanitize.sh build    configure and build only (the memory tests' binary)
# Environment: BUILD_DIR (default build-asan), CTEST_ARGS (extra ctest arguments),
# SANITIZE_TEST_DIRS (the folders of tests/ built for CI's run).
# Dependencies: those of scripts/quickstart.sh, and clang with its sanitizer and libFuzzer
# runtimes (libclang-rt-14-dev) and OpenMP (libomp-14-dev), installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/packages.sh
source scripts/packages.sh
install_missing_packages "${campo_build_packages[@]}" "${campo_data_packages[@]}" \
  "${campo_sanitizer_packages[@]}"
install_onednn

mode="${1:-test}"
build_dir="${BUILD_DIR:-build-asan}"
root="$(pwd)"

# What CI sanitizes: the code that handles memory directly and outside input. The kernels
# (tests/ops: every op and dtype, odd shapes, views), the runtime (tensors, allocators,
# backends, files), the graph (executor, memory plan, checkpoints), the parsers of data
# sets, calibration files and AMP lists (tests/datasets, tests/amp, the fuzz replays), and
# the command line on bad input and short runs of every model kind (tests/tools). Left to
# `sanitize.sh all`: tests/models, tests/train and tests/e2e, whole training runs through the
# same kernels and executor, which take most of the sanitized time (docs/testing.md).
test_dirs="${SANITIZE_TEST_DIRS-runtime;ops;graph;datasets;amp;fuzz;tools}"
case "$mode" in
  test | build) ;;
  all) test_dirs="" ;;
  *)
    echo "usage: bash scripts/sanitize.sh [test|all|build]" >&2
    exit 2
    ;;
esac

mkdir -p "$build_dir"
# CAMPO_FUZZ: ASan + UBSan + libFuzzer's coverage hooks for everything, and the fuzz targets.
# CAMPO_MPI=OFF: Open MPI leaves memory allocated at exit, which LeakSanitizer reports in every
# process that starts it (the communicator's own code is tested in the Release build, under
# mpirun; here make_mpi_communicator's no-MPI error line is).
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCAMPO_CUDA=OFF -DCAMPO_MPI=OFF -DCAMPO_FUZZ=ON -DCAMPO_BUILD_BENCH=OFF \
  -DCAMPO_TEST_DIRS="$test_dirs" \
  > "$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log"; exit 1; }
cmake --build "$build_dir" -j"$(nproc)"
[ "$mode" = build ] && exit 0

# Every report is fatal: halt_on_error with -fno-sanitize-recover=all; abort_on_error so a
# report cannot be mistaken for an ordinary failing exit code.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
status=0
# shellcheck disable=SC2086  # CTEST_ARGS is a list of arguments
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-} || status=$?
bash scripts/report-skips "$build_dir"
exit "$status"
