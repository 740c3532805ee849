#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/<name>_fuzz.cc) with clang, ASan and UBSan in
# build-fuzz/ and runs each for a while on a copy of its seed corpus (fuzz/corpus/<name>,
# plus fuzz/regressions/<name> read-only), one target at a time. Any crash, timeout (10 s
# per input), out-of-memory (2 GB) or leak fails the run and prints the reproducer.
#   bash scripts/fuzz.sh [seconds-per-target] [name...]    default 30 s, every target
# Environment: BUILD_DIR (default build-fuzz); FUZZ_WORK, where corpora, logs and
# reproducers go (default a new directory under $TMPDIR or /tmp, never the repository;
# kept after a finding or when given, removed after a clean run); FUZZ_SEED, libFuzzer's
# random seed (default: a new one each run; CI fixes it, so that a CI run finds the same
# inputs each time up to the time limit and a change cannot fail CI by chance); FUZZ_ARGS,
# extra libFuzzer flags.
# Reproduce a finding: build-fuzz/<name>_fuzz <reproducer>   (see docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

seconds="${1:-30}"
shift || true
build_dir="${BUILD_DIR:-build-fuzz}"

# shellcheck source=scripts/packages.sh
source scripts/packages.sh
# clang + libclang-rt-14-dev: libFuzzer and clang's sanitizer runtimes
# (libclang_rt.fuzzer-x86_64.a); libomp-14-dev: OpenMP for clang.
install_missing_packages "${campo_build_packages[@]}" clang libclang-rt-14-dev libomp-14-dev

mkdir -p "$build_dir"
CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCAMPO_CUDA=OFF -DCAMPO_FUZZ=ON -DCAMPO_BUILD_TESTS=OFF > "$build_dir/configure.log" 2>&1 \
  || { cat "$build_dir/configure.log"; exit 1; }
cmake --build "$build_dir" -j"$(nproc)" --target campo_fuzzers

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do
    n="$(basename "$f" .cc)"
    targets+=("${n%_fuzz}")
  done
fi

work="${FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/campo-fuzz.XXXXXX")}"
mkdir -p "$work"
echo "fuzz: ${#targets[@]} targets, ${seconds} s each; corpora, logs and reproducers in $work"

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"

failed=()
for name in "${targets[@]}"; do
  binary="$build_dir/${name}_fuzz"
  [ -x "$binary" ] || { echo "fuzz: no target '$name' ($binary)" >&2; exit 2; }
  dir="$work/$name"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  if [ -d "fuzz/corpus/$name" ]; then cp -R "fuzz/corpus/$name/." "$dir/corpus/"; fi
  inputs=("$dir/corpus")
  if [ -d "fuzz/regressions/$name" ]; then inputs+=("fuzz/regressions/$name"); fi
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$dir/artifacts/")
  if [ -n "${FUZZ_SEED:-}" ]; then args+=(-seed="$FUZZ_SEED"); fi
  if [ -f "fuzz/$name.dict" ]; then args+=(-dict="fuzz/$name.dict"); fi
  status=0
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  "$binary" "${args[@]}" ${FUZZ_ARGS:-} "${inputs[@]}" > "$dir/log" 2>&1 || status=$?
  summary="$(grep -E '^#[0-9]+' "$dir/log" | tail -1 || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log")"
  echo "fuzz: $name: exit $status, ${execs:-?} runs; last: ${summary:-none}"
  reproducers=("$dir"/artifacts/*)
  if [ "$status" -ne 0 ] || [ -e "${reproducers[0]}" ]; then
    failed+=("$name")
    tail -n 60 "$dir/log"
    for r in "${reproducers[@]}"; do
      [ -e "$r" ] && echo "fuzz: $name: reproducer $r (run: $binary $r)"
    done
  fi
done

if [ "${#failed[@]}" -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (logs and reproducers in $work)" >&2
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds} s without a finding"
if [ -z "${FUZZ_WORK:-}" ]; then rm -rf "$work"; fi
