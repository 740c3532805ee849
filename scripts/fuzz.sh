#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/<name>_fuzz.cc) with clang, ASan and UBSan in
# build-asan/ (scripts/sanitize.sh's build) and runs each for a while on a copy of its seed
# corpus (fuzz/corpus/<name>, plus fuzz/regressions/<name> read-only), one process per target,
# as many at once as there are cores. Any crash, timeout (10 s per input), out-of-memory
# (2 GB) or leak fails the run and prints the reproducer.
#   bash scripts/fuzz.sh [seconds-per-target] [name...]    default 30 s, every target
# Environment: BUILD_DIR (default build-asan); FUZZ_JOBS, targets run at once (default: the
# number of cores); FUZZ_WORK, where corpora, logs and
# reproducers go (default a new directory under $TMPDIR or /tmp, never the repository;
# kept after a finding or when given, removed after a clean run); FUZZ_SEED, libFuzzer's
# random seed (default: a new one each run; CI fixes it, so that a CI run finds the same
# inputs each time up to the time limit and a change cannot fail CI by chance); FUZZ_ARGS,
# extra libFuzzer flags.
# Reproduce a finding: build-asan/<name>_fuzz <reproducer>   (see docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

seconds="${1:-30}"
shift || true
build_dir="${BUILD_DIR:-build-asan}"

# The sanitized build of scripts/sanitize.sh (clang, ASan + UBSan, libFuzzer's coverage
# hooks), which builds the fuzz targets too; it installs what it needs.
BUILD_DIR="$build_dir" bash scripts/sanitize.sh build

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do
    n="$(basename "$f" .cc)"
    targets+=("${n%_fuzz}")
  done
fi

work="${FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/campo-fuzz.XXXXXX")}"
mkdir -p "$work"
# Each target runs single-threaded, so FUZZ_JOBS of them (default: one per core) run at once;
# each still gets its full time. The summaries are printed in the targets' order.
jobs_max="${FUZZ_JOBS:-$(nproc)}"
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, $jobs_max at a time; corpora, logs and reproducers in $work"

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"

run_target() {
  local name="$1" binary="$build_dir/${1}_fuzz" dir="$work/$1"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  if [ -d "fuzz/corpus/$name" ]; then cp -R "fuzz/corpus/$name/." "$dir/corpus/"; fi
  local inputs=("$dir/corpus")
  if [ -d "fuzz/regressions/$name" ]; then inputs+=("fuzz/regressions/$name"); fi
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$dir/artifacts/")
  if [ -n "${FUZZ_SEED:-}" ]; then args+=(-seed="$FUZZ_SEED"); fi
  if [ -f "fuzz/$name.dict" ]; then args+=(-dict="fuzz/$name.dict"); fi
  local status=0
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  "$binary" "${args[@]}" ${FUZZ_ARGS:-} "${inputs[@]}" > "$dir/log" 2>&1 || status=$?
  echo "$status" > "$dir/status"
}
for name in "${targets[@]}"; do
  [ -x "$build_dir/${name}_fuzz" ] || { echo "fuzz: no target '$name' ($build_dir/${name}_fuzz)" >&2; exit 2; }
done
for name in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_target "$name" &
done
wait

failed=()
for name in "${targets[@]}"; do
  binary="$build_dir/${name}_fuzz"
  dir="$work/$name"
  status="$(cat "$dir/status" 2>/dev/null || echo "?")"
  summary="$(grep -E '^#[0-9]+' "$dir/log" | tail -1 || true)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log")"
  echo "fuzz: $name: exit $status, ${execs:-?} runs; last: ${summary:-none}"
  reproducers=("$dir"/artifacts/*)
  if [ "$status" != 0 ] || [ -e "${reproducers[0]}" ]; then
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
