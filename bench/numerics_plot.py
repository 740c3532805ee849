#!/usr/bin/env python3
"""Plots a run's numerics telemetry: underflow and saturation over steps.

Reads the --metrics file of `campo train --numerics` and draws, per step, the fraction of the
quantized operands' elements that flushed to zero and that saturated, summed over the step's
records (every operand weighted by its elements), one line per pass (forward, backward) and
element format (e4m3, e5m2, ...), plus the worst single operand. Needs matplotlib (bash bench/setup-peers
installs it into the peers' environment).

  build/campo train --model lenet --precision amp --precision-policy examples/fp8-policy.json \\
      --metrics fp8.jsonl --numerics --numerics-every 20
  ~/.cache/campo/peers/bin/python bench/numerics_plot.py fp8.jsonl docs/numerics-fp8.png
"""

import argparse
import collections
import json
import sys


def read(path):
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"numerics_plot: {path}:{n}: not JSON ({e.msg})")
            if r.get("event") == "numerics":
                records.append(r)
    if not records:
        sys.exit(f"numerics_plot: {path} has no numerics records (train with --numerics)")
    return records


def series(records, key):
    """{"PASS pass, FORMAT": [(step, fraction)]} weighted by elements, and the worst operand
    per step."""
    total = collections.defaultdict(lambda: collections.defaultdict(float))
    count = collections.defaultdict(lambda: collections.defaultdict(float))
    worst = collections.defaultdict(float)
    for r in records:
        group = f'{r["pass"]} pass, {r["format"]}'
        total[group][r["step"]] += r[key] * r["elements"]
        count[group][r["step"]] += r["elements"]
        worst[r["step"]] = max(worst[r["step"]], r[key])
    lines = {p: sorted((s, total[p][s] / count[p][s]) for s in total[p]) for p in total}
    return lines, sorted(worst.items())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("metrics")
    p.add_argument("out")
    p.add_argument("--title", default="")
    args = p.parse_args()
    records = read(args.metrics)
    try:
        import matplotlib
    except ImportError:
        sys.exit("numerics_plot: this python has no matplotlib (bash bench/setup-peers "
                 "installs it; run with ~/.cache/campo/peers/bin/python)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "underflow", "flushed to zero"),
                           (axes[1], "saturated", "saturated")):
        lines, worst = series(records, key)
        for name in sorted(lines):
            xs, ys = zip(*lines[name])
            ax.plot(xs, [100 * y for y in ys], marker=".", label=f"{name} operands")
        xs, ys = zip(*worst)
        ax.plot(xs, [100 * y for y in ys], linestyle="--", color="grey",
                label="worst single operand")
        ax.set_xlabel("step")
        ax.set_ylabel(f"% of elements {label}")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"numerics_plot: wrote {args.out} ({len(records)} records)")


if __name__ == "__main__":
    main()
