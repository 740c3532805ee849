#!/usr/bin/env bash
# Side-by-side training throughput, campo vs PyTorch, same job, interleaved repetitions so
# machine noise hits both alike. Prints each run's samples/s and the median ratio.
#   bash bench/compare_pytorch.sh [model=lenet] [steps=300] [repeats=3] [batch=64]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-lenet}"; steps="${2:-300}"; repeats="${3:-3}"; batch="${4:-64}"
campo="${CAMPO:-build/campo}"
ours=(); theirs=()
for r in $(seq "$repeats"); do
  c=$("$campo" train --model "$model" --steps "$steps" --batch "$batch" --limit-test 1000 \
      --progress none | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_sec"])')
  t=$(/usr/bin/python3 bench/peers/pytorch_train.py --model "$model" --steps "$steps" --batch "$batch" \
      | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_sec"])')
  echo "run $r: campo $c samples/s, pytorch $t samples/s"
  ours+=("$c"); theirs+=("$t")
done
python3 - "${ours[*]}" "${theirs[*]}" <<'PY'
import statistics, sys
o = [float(x) for x in sys.argv[1].split()]; t = [float(x) for x in sys.argv[2].split()]
print(f"median: campo {statistics.median(o):.0f} samples/s, pytorch {statistics.median(t):.0f} samples/s, "
      f"ratio campo/pytorch {statistics.median([a / b for a, b in zip(o, t)]):.2f}")
PY
