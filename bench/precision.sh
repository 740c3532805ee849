#!/usr/bin/env bash
# Precision policies side by side (campo bench), one line per (model, policy), with the
# ratio to fp32 measured in the same process with interleaved repetitions.
#   bash bench/precision.sh [policies=fp32,amp,cost-aware] [low=bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
policies="${1:-fp32,amp,cost-aware}"; low="${2:-bf16}"
campo="${CAMPO:-build/campo}"
mkdir -p bench/results
"$campo" bench --model lenet    --precision "$policies" --low-precision "$low" --batch 64 --steps 30 --repeats 5 --json bench/results/lenet.json
"$campo" bench --model resnet50 --precision "$policies" --low-precision "$low" --batch 16 --image-size 32 --channels 3 --steps 3 --repeats 5 --warmup 1 --json bench/results/resnet50.json
"$campo" bench --model vgg16    --precision "$policies" --low-precision "$low" --batch 32 --image-size 32 --channels 3 --steps 3 --repeats 5 --warmup 1 --json bench/results/vgg16.json

"$campo" bench --model dcgan --precision "$policies" --low-precision "$low" --batch 32 --image-size 64 --channels 3 --steps 2 --repeats 5 --warmup 1 --json bench/results/dcgan.json
