#!/usr/bin/env bash
# Training parity of the precision policies: LeNet on Fashion-MNIST for one epoch with the
# same seed in fp32, amp/bf16, amp/fp16 and cost-aware/bf16; prints each test accuracy and its difference
# to fp32 in points.
#   bash bench/parity.sh [model=lenet] [epochs=1] [extra campo train options...]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-lenet}"; epochs="${2:-1}"; shift 2 || true
campo="${CAMPO:-build/campo}"
run() {
  "$campo" train --model "$model" --epochs "$epochs" --progress none "$@" | tail -1 |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["test_accuracy"])'
}
base=$(run --precision fp32 "$@")
echo "fp32       accuracy $base"
for low in bf16 fp16; do
  acc=$(run --precision amp --low-precision "$low" "$@")
  python3 -c "print(f'amp/$low   accuracy $acc  ({100 * ($acc - $base):+.2f} points vs fp32)')"
done
acc=$(run --precision cost-aware --low-precision bf16 "$@")
python3 -c "print(f'cost-aware/bf16 accuracy $acc  ({100 * ($acc - $base):+.2f} points vs fp32)')"
