#!/usr/bin/env python3
"""Throughput of two campo builds side by side: the same `campo bench` jobs, run by the
old and the new binary alternately (A B, B A, A B, ...), so that load from elsewhere on a
shared machine falls on both alike; the comparison is the median over repetitions of the
paired ratio new / old, with a sign-test 95% confidence interval.

  python3 bench/versions.py OLD_CAMPO NEW_CAMPO [--repeats 9] [--models resnet50,vgg16,dcgan]

Each repetition of a model is one `campo bench --repeats 1` per binary with fp32, amp and
cost-aware (bf16). Uses only the Python standard library.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

# (model, extra bench options): the shapes of bench/paired.sh.
JOBS = {
    "resnet50": ["--batch", "16", "--image-size", "32", "--channels", "3", "--steps", "2"],
    "vgg16": ["--batch", "32", "--image-size", "32", "--channels", "3", "--steps", "2"],
    "dcgan": ["--batch", "32", "--image-size", "64", "--channels", "3", "--steps", "2"],
    "lenet": ["--batch", "64", "--steps", "20"],
}


def run_bench(binary, model, json_path):
    cmd = [binary, "bench", "--model", model, "--precision", "fp32,amp,cost-aware",
           "--repeats", "1", "--warmup", "2", "--json", json_path] + JOBS[model]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(json_path) as f:
        return {r["precision"]: r["median_samples_per_sec"] for r in json.load(f)}


def sign_test_ci(sorted_ratios):
    """Order statistics giving a distribution-free 95% CI for the median (None below 6)."""
    n = len(sorted_ratios)
    if n < 6:
        return None
    # Largest k with P(Binomial(n, 1/2) < k) <= 0.025.
    cdf, k = 0.0, 0
    while True:
        p = math.comb(n, k) / 2 ** n
        if cdf + p > 0.025:
            break
        cdf += p
        k += 1
    return sorted_ratios[k - 1] if k > 0 else None, sorted_ratios[n - k] if k > 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--models", default="resnet50,vgg16,dcgan")
    args = ap.parse_args()
    for b in (args.old, args.new):
        if not (os.path.isfile(b) and os.access(b, os.X_OK)):
            sys.exit(f"versions.py: error: {b} is not an executable file")
    models = args.models.split(",")
    for m in models:
        if m not in JOBS:
            sys.exit(f"versions.py: error: unknown model '{m}' (one of {', '.join(JOBS)})")
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        for r in range(args.repeats):
            for m in models:
                order = [("old", args.old), ("new", args.new)]
                if r % 2:
                    order.reverse()
                got = {name: run_bench(binary, m, path) for name, binary in order}
                for policy, new in got["new"].items():
                    ratios.setdefault((m, policy), []).append(new / got["old"][policy])
            print(f"repetition {r + 1}/{args.repeats} done", file=sys.stderr)
            if r + 1 < args.repeats:
                print_table(ratios, r + 1, sys.stderr)  # so far, for a run cut short
    print_table(ratios, args.repeats, sys.stdout)


def print_table(ratios, repeats, out):
    print(f"new / old samples/s, paired by repetition ({repeats} repetitions)", file=out)
    print(f"{'model':<10} {'policy':<11} {'median':>7}  95% CI         faster", file=out)
    for (m, policy), rs in ratios.items():
        s = sorted(rs)
        median = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
        ci = sign_test_ci(s)
        ci_text = f"{ci[0]:.3f}-{ci[1]:.3f}" if ci and ci[0] is not None else "n/a"
        faster = sum(1 for x in rs if x > 1)
        print(f"{m:<10} {policy:<11} {median:7.3f}  {ci_text:<13}  {faster}/{len(rs)}", file=out)


if __name__ == "__main__":
    main()
