#!/usr/bin/env python3
"""How well `campo predict` holds on this machine, where two "devices" can be measured: the
same CPU restricted (one thread, oneDNN capped at AVX2, bf16 emulated: no native BF16) and
unrestricted (two threads, every ISA it has). docs/results.md, "Predicting another device".

  python3 bench/predict_check.py [--campo build/campo] [--models lenet,resnet50,...] [--steps 20]
      [--precision amp] [--low-precision fp16] [--by-op] [--calibrations RESTRICTED,NATIVE]

Per model, each configuration trains --steps steps with --profile-out (its profile holds the
configuration's own measured device model: GEMM peaks and triad bandwidth); then
`campo predict` scales each profile to the other configuration (a device table holding the
other's measured model) and the prediction is set beside what the other measured. The step
time compared is the sum of the nodes' median times (what predict predicts); the error is
(predicted - measured) / measured. Per op kind too (--by-op). Uses only the Python standard
library.

--calibrations RESTRICTED,NATIVE gives `campo predict` each configuration's calibration (made
with `campo calibrate` under that configuration's environment, e.g. `OMP_NUM_THREADS=1
ONEDNN_MAX_CPU_ISA=AVX2 CAMPO_CPU_BF16=emulate build/campo calibrate --out R.json`): low-precision nodes whose ops the calibrations fit by shape are then scaled by
their shapes' low/f32 ratios on each side and casts by the cast fits (perf/predict.h).
--low-precision fp16 trains amp in fp16 (emulated on a CPU without AVX-512 FP16: convert,
compute in f32, round).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# model: its options (small shapes: a few seconds a run on one thread).
MODELS = {
    "lenet": ["--dataset", "synthetic", "--batch", "64"],
    "resnet50": ["--dataset", "synthetic", "--batch", "8", "--image-size", "32", "--channels", "3"],
    "vgg16": ["--dataset", "synthetic", "--batch", "8", "--image-size", "32", "--channels", "3"],
    "dcgan": ["--dataset", "synthetic", "--batch", "16"],
    "bert": ["--bert-config", "mini", "--dataset", "fortunes", "--batch", "8", "--seq-len", "64"],
}
CONFIGS = {
    "1 thread, AVX2": {"OMP_NUM_THREADS": "1", "ONEDNN_MAX_CPU_ISA": "AVX2",
                       "CAMPO_CPU_BF16": "emulate"},
    "2 threads, native": {"OMP_NUM_THREADS": "2"},
}


def profile(args, model, env, path):
    cmd = [args.campo, "train", "--model", model, "--steps", str(args.steps), "--progress",
           "none", "--precision", args.precision, "--profile-out", path] + MODELS[model]
    if args.low_precision:
        cmd += ["--low-precision", args.low_precision]
    if args.low_precision == "fp16" and args.precision != "fp32" and model == "dcgan":
        # DCGAN has no dynamic loss scaling yet; a timing needs none (same graph both sides).
        cmd += ["--loss-scale", "none"]
    if model != "dcgan":  # it has no evaluation
        cmd += ["--limit-test", "16"]
    p = subprocess.run(cmd, env=dict(os.environ, **env), capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + p.stderr)
    return json.load(open(path))


def predict(args, profile_path, target_model, tmp, calibrations=None):
    table = os.path.join(tmp, "target.json")
    target = dict(target_model, name="target")
    json.dump({"devices": [target]}, open(table, "w"))
    out = os.path.join(tmp, "prediction.json")
    cmd = [args.campo, "predict", "--profile", profile_path, "--device", "target",
           "--devices", table, "--json", out]
    if calibrations:
        cmd += ["--origin-calibration", calibrations[0], "--target-calibration", calibrations[1]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + p.stderr)
    return json.load(open(out))


def by_op(profile):
    ops = {}
    for n in profile["nodes"]:
        ops[n["op"]] = ops.get(n["op"], 0.0) + n["ms_per_step"]
    return ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--campo", default="build/campo")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--by-op", action="store_true", help="also the error per op kind")
    ap.add_argument("--low-precision", default="", help="bf16 (default) or fp16, for amp")
    ap.add_argument("--calibrations", default="",
                    help="RESTRICTED,NATIVE: each configuration's calibration file, for predict")
    args = ap.parse_args()
    names = list(CONFIGS)
    calibration_of = {}
    if args.calibrations:
        files = args.calibrations.split(",")
        if len(files) != len(names):
            ap.error("--calibrations takes one file per configuration: " + ", ".join(names))
        calibration_of = dict(zip(names, files))
    # The predictions compared, each from the same profiles: the roofline alone, and with the
    # calibrations when given (before / after).
    variants = ["roofline"] + (["calibrated"] if calibration_of else [])
    rows = {v: [] for v in variants}
    op_errors = {v: {} for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            paths = {c: os.path.join(tmp, f"{model}-{i}.json") for i, c in enumerate(names)}
            profiles = {c: profile(args, model, CONFIGS[c], paths[c]) for c in names}
            for origin, target in ((names[0], names[1]), (names[1], names[0])):
                for v in variants:
                    pred = predict(args, paths[origin], profiles[target]["device_model"], tmp,
                                   (calibration_of[origin], calibration_of[target])
                                   if v == "calibrated" else None)
                    measured = profiles[target]["total_ms_per_step"]
                    err = (pred["ms_per_step_predicted"] - measured) / measured
                    rows[v].append((model, origin, target, profiles[origin]["total_ms_per_step"],
                                    pred["ms_per_step_predicted"], measured, err))
                    print(f"{model}: {origin} -> {target} ({v}): {err:+.1%}", file=sys.stderr)
                    measured_ops = by_op(profiles[target])
                    for op, p in pred["by_op"].items():
                        m = measured_ops.get(op, 0.0)
                        if m > 0.01 * measured:  # ops worth 1% of the step or more
                            op_errors[v].setdefault((origin, op), []).append(
                                (p["ms_predicted"] - m) / m)
        devices = {c: profiles[c]["device_model"] for c in names}
    print(f"precision {args.precision}"
          + (f" ({args.low_precision})" if args.low_precision else "")
          + f", {args.steps} steps per profile"
          + (f", calibrations {args.calibrations}" if args.calibrations else "")
          + "; the devices as measured:")
    for c in names:
        d = devices[c]
        print(f"- {c}: f32 {d['peak_gflops']['f32']:.0f} GFLOP/s, bf16 "
              f"{d['peak_gflops'].get('bf16', 0):.0f} GFLOP/s, f16 "
              f"{d['peak_gflops'].get('f16', 0):.0f} GFLOP/s, {d['memory_gbs']:.1f} GB/s")
    for v in variants:
        if len(variants) > 1:
            print(f"\n### {'before: the roofline alone' if v == 'roofline' else 'after: with the calibrations'}")
        print()
        print("| model | from | to | measured there, ms | predicted, ms | measured, ms | error |")
        print("|---|---|---|---:|---:|---:|---:|")
        for model, origin, target, there, predicted, measured, err in rows[v]:
            print(f"| {model} | {origin} | {target} | {there:.2f} | {predicted:.2f} | "
                  f"{measured:.2f} | {err:+.1%} |")
        for origin in names:
            errs = [abs(r[6]) for r in rows[v] if r[1] == origin]
            print(f"\nmean |error| from {origin}: {statistics.mean(errs):.1%}")
        if args.by_op:
            print("\n| from | op | models | mean error |")
            print("|---|---|---:|---:|")
            for (origin, op), errs in sorted(op_errors[v].items()):
                print(f"| {origin} | {op} | {len(errs)} | {statistics.mean(errs):+.1%} |")

if __name__ == "__main__":
    main()
