#!/usr/bin/env python3
"""`campo plan --for` checked on this machine's CPU pair: the cost-aware plan predicted for the
unrestricted CPU (two threads, every ISA it has: native bf16) from a profile measured on the
restricted one (one thread, oneDNN capped at AVX2, bf16 emulated), against the plan the
unrestricted CPU's own calibration gives, and the throughput of both plans measured there.
docs/results.md, "Planning for another device".

  python3 bench/plan_for_check.py [--campo build/campo] [--models lenet,resnet50,vgg16,bert]
                                  [--pairs 5] [--steps 10]

Per model: the restricted configuration trains --profile-steps fp32 steps with --profile-out
(the origin profile); the unrestricted one trains 2 steps with --profile-out only for its own
measured device model (GEMM peaks, stream rates), which becomes the device table's "target".
Then, under the unrestricted configuration:
- `campo plan --for target --profile ORIGIN` and `campo plan --precision cost-aware` (this
  machine's calibration) are compared node by node;
- `campo bench --precision amp,cost-aware --for target ...` and `campo bench --precision
  amp,cost-aware` run alternately, --pairs times each (one repetition of --steps steps per
  process); each process's cost-aware samples/s over its own amp's cancels the load the two
  processes saw differently, and the median over the pairs of (predicted plan / own plan) is
  reported with the raw samples/s ratio beside it.
Uses only the Python standard library.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# model: (shape options for train, plan and bench; train's data options).
MODELS = {
    "lenet": (["--batch", "64"], ["--dataset", "synthetic", "--limit-test", "16"]),
    "resnet50": (["--batch", "8", "--image-size", "32", "--channels", "3"],
                 ["--dataset", "synthetic", "--limit-test", "16"]),
    "vgg16": (["--batch", "8", "--image-size", "32", "--channels", "3"],
              ["--dataset", "synthetic", "--limit-test", "16"]),
    # --dropout 0: plan and bench build BERT without dropout, and a profile's nodes must be
    # the plan's.
    "bert": (["--bert-config", "mini", "--batch", "8", "--seq-len", "64"],
             ["--dataset", "fortunes", "--limit-test", "16", "--dropout", "0"]),
}
ORIGIN = {"OMP_NUM_THREADS": "1", "ONEDNN_MAX_CPU_ISA": "AVX2", "CAMPO_CPU_BF16": "emulate"}
TARGET = {"OMP_NUM_THREADS": "2"}


def run(cmd, env):
    p = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + p.stderr)
    return p.stdout


def profile(args, model, env, steps, path):
    shape, data = MODELS[model]
    run([args.campo, "train", "--model", model, "--steps", str(steps), "--progress", "none",
         "--precision", "fp32", "--profile-out", path] + shape + data, env)
    return json.load(open(path))


def plan_nodes(path):
    """name -> dtype of every node the plan decides (no casts or weight copies)."""
    plan = json.load(open(path))
    nodes = {n["name"]: n["dtype"] for n in plan["graphs"][0]["nodes"]
             if n["list"] not in ("cast", "copy") and "fp32_ms" in n}
    return plan, nodes


def bench(args, model, extra, path):
    shape, _ = MODELS[model]
    run([args.campo, "bench", "--model", model, "--precision", "amp,cost-aware", "--repeats", "1",
         "--steps", str(args.steps), "--warmup", "2", "--no-peak", "--json", path] + shape + extra,
        TARGET)
    r = {e["precision"]: e["median_samples_per_sec"] for e in json.load(open(path))}
    return r["cost-aware"], r["cost-aware"] / r["amp"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--campo", default="build/campo")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile-steps", type=int, default=20)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            shape, _ = MODELS[model]
            origin = os.path.join(tmp, model + "-origin.json")
            profile(args, model, ORIGIN, args.profile_steps, origin)
            here = profile(args, model, TARGET, 2, os.path.join(tmp, model + "-target.json"))
            table = os.path.join(tmp, model + "-devices.json")
            json.dump({"devices": [dict(here["device_model"], name="target")]}, open(table, "w"))
            plan_for = ["--for", "target", "--devices", table, "--profile", origin]
            predicted_path = os.path.join(tmp, model + "-plan-for.json")
            own_path = os.path.join(tmp, model + "-plan-own.json")
            run([args.campo, "plan", "--model", model, "--json", predicted_path] + shape + plan_for,
                TARGET)
            run([args.campo, "plan", "--model", model, "--precision", "cost-aware", "--json",
                 own_path] + shape, TARGET)
            predicted_plan, predicted = plan_nodes(predicted_path)
            own_plan, own = plan_nodes(own_path)
            same = sum(1 for n, d in own.items() if predicted.get(n) == d)
            ratios, raw = [], []
            for i in range(args.pairs):
                json_path = os.path.join(tmp, "bench.json")
                a_sps, a_rel = bench(args, model, plan_for, json_path)
                b_sps, b_rel = bench(args, model, [], json_path)
                ratios.append(a_rel / b_rel)
                raw.append(a_sps / b_sps)
                print(f"{model}: pair {i + 1}: predicted plan / own plan {a_rel / b_rel:.3f} "
                      f"(raw {a_sps / b_sps:.3f})", file=sys.stderr)
            rows.append((model, len(own), same, predicted_plan["low_nodes"], own_plan["low_nodes"],
                         predicted_plan["casts"], own_plan["casts"],
                         statistics.median(ratios), min(ratios), max(ratios),
                         statistics.median(raw)))
    print(f"{args.pairs} pairs of bench processes, {args.steps} steps each; origin profile "
          f"{args.profile_steps} fp32 steps on 1 thread, AVX2, bf16 emulated; target 2 threads, "
          "native bf16")
    print()
    print("| model | nodes decided | same precision | low nodes: predicted / own | "
          "casts: predicted / own | cost-aware throughput, predicted plan / own plan "
          "(each over its amp) | raw samples/s ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (model, nodes, same, low_p, low_o, casts_p, casts_o, med, lo, hi, raw) in rows:
        print(f"| {model} | {nodes} | {same} ({same / nodes:.0%}) | {low_p} / {low_o} | "
              f"{casts_p} / {casts_o} | {med:.3f} ({lo:.3f}-{hi:.3f}) | {raw:.3f} |")


if __name__ == "__main__":
    main()
