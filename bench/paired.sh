#!/usr/bin/env bash
# cost-aware against amp, paired by repetition (campo bench): many short interleaved
# repetitions, so that each pair of amp and cost-aware steps runs under the same load; the
# line "xR of amp, paired by repetition (95% CI ...)" is the comparison.
#   bash bench/paired.sh [repeats=41] [low=bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-41}"; low="${2:-bf16}"
campo="${CAMPO:-build/campo}"
mkdir -p bench/results
common=(--precision amp,cost-aware --low-precision "$low" --repeats "$repeats" --warmup 2)
"$campo" bench --model resnet50 "${common[@]}" --batch 16 --image-size 32 --channels 3 --steps 1 --json bench/results/paired-resnet50.json
"$campo" bench --model vgg16    "${common[@]}" --batch 32 --image-size 32 --channels 3 --steps 2 --json bench/results/paired-vgg16.json
"$campo" bench --model dcgan    "${common[@]}" --batch 32 --image-size 64 --channels 3 --steps 1 --json bench/results/paired-dcgan.json
