#!/usr/bin/env python3
"""Narrow formats side by side: final loss and test accuracy of campo train per format.

Trains each model in FP32, BF16 (amp), every GEMM in FP8 (hybrid E4M3/E5M2) with delayed and
with current scaling, MXFP8, MXFP4, and BF16 without f32 master weights rounded to nearest and
stochastically, over several seeds, through `campo train` as a user runs it, and prints the
markdown table of docs/results.md ("Narrow formats: what they cost in accuracy"). The FP8/MX
rows are `--precision amp` with a precision policy whose one rule puts every GEMM in that
format (the other nodes keep amp's bf16 lists). ResNet-18 also gets the policy of
examples/fp8-resnet18-first-last-bf16.json. Accuracy, not speed: runs may share the machine
(--jobs).

  python3 bench/formats_table.py --models lenet --seeds 1,2,3 --jobs 2
  python3 bench/formats_table.py --models resnet18 --seeds 1,2 --jobs 2 --json out.json
"""

import argparse
import concurrent.futures
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    "lenet": ["--model", "lenet", "--dataset", "fashion-mnist", "--epochs", "1"],
    "resnet18": ["--model", "resnet18", "--dataset", "fashion-mnist", "--image-size", "32",
                 "--limit-train", "3200", "--limit-test", "2000", "--batch", "32"],
    "bert": ["--model", "bert", "--dataset", "fortunes", "--steps", "150", "--batch", "16",
             "--seq-len", "64"],
}
# --speed: short runs on synthetic data, the same shapes (samples/s only).
SPEED = {
    "lenet": ["--model", "lenet", "--dataset", "synthetic", "--batch", "64", "--steps", "150",
              "--limit-train", "9600", "--limit-test", "64"],
    "resnet18": ["--model", "resnet18", "--dataset", "synthetic", "--image-size", "32",
                 "--channels", "1", "--batch", "32", "--steps", "12", "--limit-train", "384",
                 "--limit-test", "32"],
    "bert": ["--model", "bert", "--dataset", "fortunes", "--steps", "12", "--batch", "16",
             "--seq-len", "64", "--limit-train", "192", "--limit-test", "16"],
}
MODEL_NAMES = {"lenet": "LeNet, 1 epoch", "resnet18": "ResNet-18 32 px, 3,200 samples",
               "bert": "BERT-mini, 150 steps"}


def gemm_policy(fmt, recipe=None):
    rule = {"name": "*", "format": fmt, "note": "every GEMM " + fmt}
    if recipe:
        rule["recipe"] = recipe
    return {"description": "every GEMM in " + fmt, "rules": [rule]}


AMP = ["--precision", "amp", "--low-precision", "bf16"]

# (row name, campo train options, policy object or a file under ROOT or None, models or None)
CONFIGS = [
    ("FP32", ["--precision", "fp32"], None, None),
    ("BF16 (amp)", AMP, None, None),
    ("FP8 hybrid, delayed", AMP, gemm_policy("fp8", {"scaling": "delayed"}), None),
    ("FP8 hybrid, current", AMP, gemm_policy("fp8", {"scaling": "current"}), None),
    ("MXFP8 (E4M3)", AMP, gemm_policy("mxfp8"), None),
    ("MXFP4 (E2M1)", AMP, gemm_policy("mxfp4"), None),
    ("BF16, no master weights, nearest",
     [*AMP, "--master-weights", "none", "--weight-rounding", "nearest"], None, None),
    ("BF16, no master weights, stochastic",
     [*AMP, "--master-weights", "none", "--weight-rounding", "stochastic"], None, None),
    ("FP8 delayed, first and last layers BF16", AMP,
     "examples/fp8-resnet18-first-last-bf16.json", ["resnet18"]),
]


def model_configs(model, wanted=()):
    """The CONFIGS rows that apply to `model`, those whose name starts with one of `wanted`
    (all when empty)."""
    return [c for c in CONFIGS if (c[3] is None or model in c[3]) and
            (not wanted or any(c[0].startswith(w) for w in wanted))]


def run(campo, model, config, seed, threads, tmp, speed=False):
    name, opts, policy, _ = config
    cmd = [campo, "train", *(SPEED if speed else MODELS)[model], *opts, "--seed", str(seed),
           "--progress", "none",
           "--threads", str(threads)]
    if isinstance(policy, dict):
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower())
        path = os.path.join(tmp, f"{model}-{seed}-{slug}.json")  # one file per run
        with open(path, "w") as f:
            json.dump(policy, f)
        cmd += ["--precision-policy", path]
    elif policy:
        cmd += ["--precision-policy", os.path.join(ROOT, policy)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"formats_table: {' '.join(cmd)} failed:\n{done.stderr.strip()}")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{") and '"event":"result"' in line:
            r = json.loads(line)
            return {"model": model, "config": name, "seed": seed, "loss": r["final_loss"],
                    "accuracy": r["test_accuracy"], "samples_per_sec": r["samples_per_sec"],
                    "command": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
                                        for c in cmd)}
    sys.exit("formats_table: no result line from: " + " ".join(cmd))


def spread(values, fmt):
    if len(values) == 1:
        return fmt.format(values[0])
    return (fmt.format(statistics.mean(values)) + " (" + fmt.format(min(values)) + "-" +
            fmt.format(max(values)) + ")")


def table(results, models, seeds):
    lines = [f"| model | format | final loss, mean (min-max) of {len(seeds)} seeds "
             "| test accuracy, mean (min-max) | accuracy against FP32 |",
             "|---|---|---|---|---|"]
    for model in models:
        rows = model_configs(model)
        fp32 = [r["accuracy"] for r in results if r["model"] == model and r["config"] == "FP32"]
        base = statistics.mean(fp32) if fp32 else None  # --configs without FP32
        for i, c in enumerate(rows):
            rs = [r for r in results if r["model"] == model and r["config"] == c[0]]
            if not rs:
                continue
            acc = [r["accuracy"] for r in rs]
            versus = "-" if base is None or c[0] == "FP32" else \
                f"{(statistics.mean(acc) - base) * 100:+.2f} points"
            lines.append(f"| {MODEL_NAMES[model] if i == 0 else ''} | {c[0]} | "
                         f"{spread([r['loss'] for r in rs], '{:.3f}')} | "
                         f"{spread(acc, '{:.4f}')} | "
                         f"{versus} |")
    return "\n".join(lines) + "\n"


def speed(args, models, seeds, wanted):
    lines = ["| model | format | samples/s, median | over BF16 (amp), median of rounds |",
             "|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            # BF16 (amp) always: the ratios are over it.
            configs = [c for c in model_configs(model)
                       if c in model_configs(model, wanted) or c[0] == "BF16 (amp)"]
            rate = {c[0]: {} for c in configs}
            for i, seed in enumerate(seeds):
                for c in configs[i % len(configs):] + configs[:i % len(configs)]:
                    r = run(args.campo, model, c, seed, os.cpu_count() or 1, tmp, speed=True)
                    rate[c[0]][seed] = r["samples_per_sec"]
                    print(f"{model:9} {c[0]:40} round {i + 1}: {r['samples_per_sec']:.1f} "
                          "samples/s", flush=True)
            for j, c in enumerate(configs):
                ratio = statistics.median(rate[c[0]][s] / rate["BF16 (amp)"][s] for s in seeds)
                lines.append(f"| {model if j == 0 else ''} | {c[0]} | "
                             f"{statistics.median(rate[c[0]].values()):.1f} | {ratio:.3f} |")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--campo", default=os.path.join(ROOT, "build", "campo"))
    p.add_argument("--models", default="lenet,resnet18,bert")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--configs", default="",
                   help="comma-separated prefixes of the row names to run (default: all), "
                   "e.g. 'FP8 hybrid,MXFP4'")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (accuracy only)")
    p.add_argument("--json", help="write every run's result here")
    p.add_argument("--speed", action="store_true",
                   help="time instead: short runs on synthetic data, one per seed and format, "
                   "interleaved (each seed runs every format once, the order rotated), one at "
                   "a time; prints each format's median samples/s over BF16 (amp)'s of the same "
                   "round. Run it on a quiet machine")
    args = p.parse_args()
    models = args.models.split(",")
    for m in models:
        if m not in MODELS:
            sys.exit(f"formats_table: unknown model {m} (one of {', '.join(MODELS)})")
    seeds = [int(s) for s in args.seeds.split(",")]
    wanted = [w for w in args.configs.split(",") if w]
    if args.speed:
        if args.jobs != 1 or args.json:
            sys.exit("formats_table: --speed runs one at a time and prints its table only "
                     "(no --jobs, no --json)")
        return speed(args, models, seeds, wanted)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    work = [(m, c, s) for m in models for c in model_configs(m, wanted) for s in seeds]
    results = []
    with tempfile.TemporaryDirectory() as tmp, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run, args.campo, m, c, s, threads, tmp) for m, c, s in work]
        for f in concurrent.futures.as_completed(futures):
            r = f.result()
            results.append(r)
            print(f"{r['model']:9} {r['config']:40} seed {r['seed']}: loss {r['loss']:.4f} "
                  f"accuracy {r['accuracy']:.4f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(table(results, models, seeds), end="")


if __name__ == "__main__":
    main()
