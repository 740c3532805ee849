#!/usr/bin/env bash
# ctest's gpu_check_rehearse (a build with the CUDA backend): the GPU check's rehearsal
# (scripts/gpu-check --rehearse --no-debs) against a carry folder made by scripts/gpu-prebuild
# from this build's binaries (--no-build: no CUDA build inside the test; they must be up to
# date with the tree). It passes only where the real run would find every path, file, test
# suite and option it needs (the .debs aside: CI cannot fetch them), and its plan fits the
# budget. Then three ways it must fail: a carried binary missing, binaries of other sources,
# caps over the budget.
#   tests/scripts/gpu_check_rehearse_test.sh BUILD_DIR
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/campo-gpu-rehearse.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$root/scripts/gpu-prebuild" --build "$build" --no-build --no-debs --carry "$tmp/carry" ||
  fail "gpu-prebuild could not make the carry folder from $build"

rehearse() {  # OUT_NAME [ENV...]: the rehearsal's output in $tmp/OUT_NAME.log, its status
  local name=$1
  shift
  env GPU_CARRY="$tmp/carry" OUT="$tmp/$name" GPU_CHECK_WORK="$tmp/work-$name" "$@" \
    "$root/scripts/gpu-check" --rehearse --no-debs >"$tmp/$name.log" 2>&1
}

rehearse good
status=$?
cat "$tmp/good.log"
[ "$status" = 0 ] || fail "the rehearsal failed (exit status $status)"
log=$tmp/good.log
grep -q '^=== \[preflight\] ok' "$log" || fail "preflight did not pass"
grep -q '^=== \[loader\] ok' "$log" || fail "the carried binaries did not load"
grep -q '^=== \[version\] ok' "$log" || fail "campo --version did not run"
for s in smoke-lenet smoke-resnet50 smoke-vgg16 smoke-lenet-array smoke-dcgan bench-resnet50 \
    torch-resnet50 bench-vgg16 bench-dcgan graph-on graph-off cuda-tests smoke-nccl \
    profile-cupti calibrate; do
  grep -q "^=== \[$s\] would run" "$log" || fail "stage $s was not rehearsed as 'would run'"
done
grep -q 'would run: ConvCudaTest' "$log" || fail "the CUDA test suites were not listed"
grep -q 'would run: CudaTrainingTest' "$log" || fail "CudaTrainingTest was not listed"
total=$(sed -n 's/.*total of the caps \([0-9]*\)s + \([0-9]*\)s for the summary = \([0-9]*\)s.*/\3/p' "$log")
[ -n "$total" ] && [ "$total" -le 540 ] || fail "the plan's total is '$total', not <= 540 s"
grep -q 'MiB of 64.0 MiB' "$log" || fail "the carried size was not checked against 64 MiB"
n=$(find "$tmp/good" -maxdepth 1 -type f | wc -l)
[ "$n" -le 8 ] || fail "$n files in \$OUT, more than the 8 that come back"
[ -s "$tmp/good/stages.tsv" ] || fail "no stages.tsv in \$OUT"

# A carried binary missing: the rehearsal fails.
mv "$tmp/carry/bin/campo_tests" "$tmp/campo_tests.away"
rehearse missing
[ $? -ne 0 ] || fail "the rehearsal passed without bin/campo_tests"
grep -q 'campo_tests is missing' "$tmp/missing.log" || fail "no line names the missing binary"
mv "$tmp/campo_tests.away" "$tmp/carry/bin/campo_tests"

# Binaries of other sources (the manifest's hash differs from the tree's): it fails.
sed -i 's/^source_hash=.*/source_hash=0000000000000000/' "$tmp/carry/manifest.txt"
rehearse stale
[ $? -ne 0 ] || fail "the rehearsal passed with binaries of other sources"
grep -q 'were built from sources 0000000000000000' "$tmp/stale.log" || fail "no line says the binaries are stale"

# Caps over the budget: the plan fails (the dry run checks nothing else).
if GPU_CHECK_BUDGET=300 GPU_CHECK_WORK="$tmp/work-dry" "$root/scripts/gpu-check" --dry-run >"$tmp/dry.log" 2>&1; then
  fail "a 300 s budget passed the plan"
fi
grep -q 'the caps add up to more than the 300s budget' "$tmp/dry.log" || fail "no line says the caps are over the budget"
echo "PASS: rehearsal plan total ${total}s"
