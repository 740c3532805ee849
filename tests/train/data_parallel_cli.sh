#!/usr/bin/env bash
# `mpirun -np 2 campo train ... --data-parallel` as a user runs it (ctest: data_parallel_cli,
# where this build has Open MPI): a run, its checkpoint resumed by one process, mismatched
# ranks refused, campo bench on two ranks, and a rank that dies or hangs ending the job
# within a bound.
#   bash tests/train/data_parallel_cli.sh CAMPO_BINARY
set -uo pipefail
campo="$1"
tmp="$(mktemp -d)"
trap 'pkill -KILL -P $$ 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
mpirun_args=(--oversubscribe --bind-to none --mca btl self,vader -x OMP_NUM_THREADS=1
             -x OMP_WAIT_POLICY=PASSIVE)
[ "$(id -u)" -eq 0 ] && mpirun_args+=(--allow-run-as-root)
run=(train --model lenet --dataset synthetic --precision fp32 --progress lines)

# 1. Two ranks: one banner and one JSON line (rank 0's), the global batch, a checkpoint.
mpirun "${mpirun_args[@]}" -np 2 "$campo" "${run[@]}" --steps 12 --batch 16 --data-parallel \
  --save "$tmp/dp.safetensors" > "$tmp/out" 2> "$tmp/err"
status=$?
[ "$status" -eq 0 ] || fail "two ranks exited $status: $(cat "$tmp/err")"
[ "$(grep -c '"event":"result"' "$tmp/out")" -eq 1 ] || fail "not one JSON line: $(cat "$tmp/out")"
grep -q '"world_size":2' "$tmp/out" || fail "no world_size 2 in $(cat "$tmp/out")"
grep -q '"global_batch":32' "$tmp/out" || fail "no global_batch 32 in $(cat "$tmp/out")"
grep -q '"communication":{"buckets":[1-9][0-9.]*,"bytes_per_step":[1-9][0-9.]*,"reduce_ms_per_step":[0-9.e-]*[1-9]' "$tmp/out" \
  || fail "no communication figures in $(cat "$tmp/out")"
grep -q '"gradient_bucket_bytes":\[[1-9]' "$tmp/out" || fail "no bucket sizes in $(cat "$tmp/out")"
grep -q 'batch 16 per rank x 2 ranks (mpi)' "$tmp/out" || fail "banner: $(head -3 "$tmp/out")"
[ -s "$tmp/dp.safetensors" ] || fail "no checkpoint written"

# 2. Resumed by one process whose batch is the global one; another batch is refused.
"$campo" "${run[@]}" --steps 16 --batch 32 --resume "$tmp/dp.safetensors" > "$tmp/out" 2> "$tmp/err" \
  || fail "one process could not resume two ranks' checkpoint: $(cat "$tmp/err")"
grep -q 'resumed from .* at step 12' "$tmp/out" || fail "not resumed at step 12: $(cat "$tmp/out")"
if "$campo" "${run[@]}" --steps 16 --batch 16 --resume "$tmp/dp.safetensors" > "$tmp/out" 2> "$tmp/err"; then
  fail "a resume at another global batch was accepted"
fi
grep -q 'resume it with ranks x --batch = 32' "$tmp/err" || fail "resume error: $(cat "$tmp/err")"

# 3. Ranks that differ (another --lr) are refused before training.
mpirun "${mpirun_args[@]}" -np 1 "$campo" "${run[@]}" --steps 5 --data-parallel --lr 0.1 : \
  -np 1 "$campo" "${run[@]}" --steps 5 --data-parallel --lr 0.2 > "$tmp/out" 2> "$tmp/err"
[ $? -ne 0 ] || fail "mismatched ranks exited 0"
grep -q 'rank(s) 1 build a different training step' "$tmp/err" || fail "mismatch: $(cat "$tmp/err")"

# 4. campo bench on two ranks: rank 0 alone reports, per rank and against one process.
mpirun "${mpirun_args[@]}" -np 2 "$campo" bench --model lenet --precision fp32 --batch 16 \
  --steps 3 --repeats 2 --warmup 1 --no-peak --data-parallel --json "$tmp/bench.json" \
  > "$tmp/out" 2> "$tmp/err" || fail "bench on two ranks: $(cat "$tmp/err")"
[ "$(grep -c '^lenet    fp32' "$tmp/out")" -eq 1 ] || fail "bench: not one table: $(cat "$tmp/out")"
grep -q 'samples/s per rank, one process [0-9.]*: scaling efficiency [0-9.]* (median of 2' \
  "$tmp/out" || fail "bench: no scaling line in $(cat "$tmp/out")"
python3 - "$tmp/bench.json" << 'PY' || fail "bench JSON: $(cat "$tmp/bench.json")"
import json, sys
e = json.load(open(sys.argv[1]))[0]
assert e["world_size"] == 2 and e["transport"] == "mpi", e
assert len(e["one_process_samples_per_sec"]) == 2 and len(e["scaling_efficiency"]["ratios"]) == 2
assert abs(e["samples_per_sec_per_rank"] * 2 - e["median_samples_per_sec"]) < 1e-6 * e["median_samples_per_sec"]
assert 0 < e["scaling_efficiency"]["median"] < 2
c = e["communication"]
assert c["buckets"] == 1 and c["bytes_per_step"] > 100000 and c["reduce_ms_per_step"] > 0, c
PY
for bad in "--model dcgan" "--lockstep" ; do
  if "$campo" bench $bad --data-parallel < /dev/null > "$tmp/out" 2> "$tmp/err"; then
    fail "bench $bad --data-parallel was accepted"
  fi
  [ "$(wc -l < "$tmp/err")" -eq 1 ] || fail "bench $bad --data-parallel: $(cat "$tmp/err")"
done

# The pid of rank $1 of the job started by mpirun pid $2.
rank_pid() {
  for pid in $(pgrep -P "$2"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
      return
    fi
  done
}

# 5 and 6. A rank killed, then a rank stopped (a hang): the job ends within the bound (the
# hang: --comm-timeout 5 s on the rank left waiting).
for fault in KILL STOP; do
  mpirun "${mpirun_args[@]}" -np 2 "$campo" "${run[@]}" --epochs 1000 --batch 16 --data-parallel \
    --comm-timeout 5 > "$tmp/out" 2> "$tmp/err" &
  job=$!
  for _ in $(seq 200); do
    grep -q '^epoch 1/1000 step' "$tmp/out" && break
    sleep 0.1
  done
  victim="$(rank_pid 1 "$job")"
  if [ -z "$victim" ]; then
    fail "$fault: rank 1 not found"
    kill -KILL "$job"
    continue
  fi
  start=$SECONDS
  kill "-$fault" "$victim"
  ended=0
  for _ in $(seq 300); do
    if ! kill -0 "$job" 2> /dev/null; then
      ended=1
      break
    fi
    sleep 0.1
  done
  wait "$job"
  status=$?
  [ "$ended" -eq 1 ] || fail "$fault: the job still ran 30 s after rank 1 was sent SIG$fault"
  [ "$status" -ne 0 ] || fail "$fault: the job exited 0"
  if [ "$fault" = STOP ]; then
    grep -q 'waited more than 5 s for the other ranks' "$tmp/err" \
      || fail "hang: no timeout line in $(cat "$tmp/err")"
  fi
  echo "SIG$fault of rank 1: the job ended in $((SECONDS - start)) s (exit $status)"
  kill -KILL "$victim" 2> /dev/null  # a stopped rank outlives its job
done

[ "$failures" -eq 0 ] && echo "data_parallel_cli: all passed"
exit $((failures > 0))
