#!/usr/bin/env bash
# A rank that waits past its communicator's timeout ends the whole job (ctest:
# mpi_timeout_ends_the_job, where this build has MPI): MpiCommunicatorTest.
# DISABLED_TimeoutEndsTheJob as two ranks, where rank 1 joins the gradient all-reduce 60 s
# late and rank 0's timeout is 1 s. Rank 0 must write the one timeout line, and mpirun must
# exit non-zero well before rank 1 would have joined.
#   bash tests/runtime/mpi_timeout_test.sh CAMPO_TESTS MPIRUN [MPIRUN OPTIONS...]
set -uo pipefail
binary=$1
shift
bound=30  # seconds: the 1 s timeout, MPI's start and abort, on a loaded machine
start=$SECONDS
output=$(timeout --kill-after=5 60 "$@" "$binary" --gtest_also_run_disabled_tests \
  --gtest_filter=MpiCommunicatorTest.DISABLED_TimeoutEndsTheJob 2>&1)
status=$?
elapsed=$((SECONDS - start))
echo "$output"
echo "== mpirun exited $status after ${elapsed}s"
line="campo: rank 0 of 2: the gradient all-reduce waited more than 1 s for the other ranks (one of them died or hangs); ending the job"
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
[ "$status" -ne 0 ] || fail "mpirun exited 0: the job was not ended"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then fail "mpirun did not end within 60 s"; fi
[ "$elapsed" -le "$bound" ] || fail "the job took ${elapsed}s to end (bound ${bound}s)"
count=$(grep -cxF "$line" <<<"$output")
[ "$count" -eq 1 ] || fail "the timeout line appears $count times, not once: '$line'"
if grep -q "rank 1 of 2: the .* waited more than" <<<"$output"; then
  fail "rank 1, which was not waiting, wrote a timeout line"
fi
[ "$failures" -eq 0 ] || exit 1
echo "PASS: rank 0 ended the job in ${elapsed}s with the timeout line"
