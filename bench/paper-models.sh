#!/usr/bin/env bash
# campo bench of fp32, amp and cost-aware on the Campo paper's six models, at shapes a
# 2-core CPU runs in minutes: each model's policies interleaved (A B C A B C ...), so the
# ratios hold under a shared machine's noise. Writes OUT/<model>.txt (the table, with
# casts) and OUT/<model>.json.
# Usage: bench/paper-models.sh [OUT_DIR] [REPEATS]   (from the repository root, after a build)
set -euo pipefail
out=${1:-bench/results/paper-models}
repeats=${2:-3}
campo=${CAMPO:-build/campo}
mkdir -p "$out"
run() {
  local name=$1
  shift
  echo "== $name: $campo bench $*" | tee "$out/$name.txt"
  "$campo" bench "$@" --steps 3 --warmup 1 --repeats "$repeats" --json "$out/$name.json" \
    2>&1 | tee -a "$out/$name.txt"
}
run resnet50 --model resnet50 --image-size 32 --channels 3 --batch 16
run vgg16 --model vgg16 --image-size 32 --channels 3 --batch 32
run dcgan --model dcgan --image-size 64 --channels 3 --batch 32
run alexnet --model alexnet --image-size 32 --channels 3 --batch 32
run inception_v3 --model inception_v3 --image-size 75 --channels 3 --batch 8
run bert --model bert --bert-config mini --seq-len 64 --batch 32 --classes 8000
