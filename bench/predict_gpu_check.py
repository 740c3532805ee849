#!/usr/bin/env python3
"""`campo predict` checked against real GPUs: each kernel's time on one GPU predicted from its
measured time on another, with NeuSight's published fp32 kernel measurements
(bench/data/neusight/README.md) as the test set. docs/results.md, "Predicting another GPU".

  python3 bench/predict_gpu_check.py [--campo build/campo] [--data bench/data/neusight]
                                     [--devices t4,v100-pcie-32gb,...] [--families conv,...]
                                     [--limit N] [--same-device] [--json OUT]

No GPU is needed: the times are NeuSight's. For every origin GPU the script writes one campo
profile (the format `campo train --profile-out` writes and `campo predict` reads) holding
every kernel measured there as a node: its campo op, input and output shapes (f32), its
FLOPs by graph/flops.h's rules and its measured ms. `campo predict --profile P --from ORIGIN
--device TARGET --devices DATA/devices.json --json OUT` then scales every node with campo's
own predictor (perf/predict.cc's scale_node_time, the same call a profiled training step's
nodes go through), and each prediction is set beside the time NeuSight measured on the
target. Nothing is fitted: the device table is NeuSight's configuration of each GPU
(peak f32 FLOP/s and memory bandwidth), and the measurements are only read as a test set.

The error of a kernel is |predicted - measured| / measured; per op family and (origin,
target) pair the mean and the 90th percentile are reported, with the pooled figures per
family over every pair of two different GPUs and their median signed error (above zero:
predicted slower than measured). --same-device adds origin == target pairs, which must predict every kernel exactly
(the script fails otherwise): the fast ctest's sanity check. Uses only the Python standard
library.
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# The op families reported, in order, with the NeuSight ops each holds.
FAMILIES = {
    "conv": ["conv"],
    "bmm": ["bmm"],
    "linear": ["linear"],
    "elementwise": ["add", "mul", "pow", "div", "addu", "mulu", "powu", "divu", "relu", "gelu",
                    "tanh"],
    "softmax": ["softmax"],
    "layernorm": ["ln"],
}
FAMILY_OF = {op: family for family, ops in FAMILIES.items() for op in ops}
# Which extract file holds each family.
SOURCE = {"conv": "conv", "bmm": "bmm", "linear": "linear", "elementwise": "vec",
          "softmax": "vec", "layernorm": "vec"}


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def campo_node(op, dims):
    """The campo op, inputs, outputs (shapes) and FLOPs of one NeuSight kernel. FLOPs follow
    graph/flops.h: a GEMM-like op its multiply-adds times 2, any other op 1 per output
    element."""
    if op == "conv":  # torch.nn.Conv2d(C, O, KS, stride, padding, bias=False) on [B, C, S, S]
        b, c, o, ks, s, stride, pad = dims
        so = (s + 2 * pad - ks) // stride + 1
        y = [b, o, so, so]
        return "Conv2D", [[b, c, s, s], [o, c, ks, ks]], [y], 2 * numel(y) * c * ks * ks
    if op == "bmm":  # torch.bmm([B, M, N], [B, N, K])
        b, m, n, k = dims
        return "BatchMatMulV2", [[b, m, n], [b, n, k]], [[b, m, k]], 2 * b * m * n * k
    if op == "linear":  # torch.nn.Linear(N, K) on [B, M, N]: one GEMM of B M rows (bias aside)
        b, m, n, k = dims
        return "MatMul", [[b * m, n], [n, k]], [[b * m, k]], 2 * b * m * n * k
    b, h = dims
    x = [b, h]
    if op == "ln":  # torch.nn.LayerNorm(H): campo's LayerNorm also writes mean and inv_std
        return "LayerNorm", [x, [h], [h]], [x, [b], [b]], numel(x) + 2 * b
    if op == "softmax":
        return "Softmax", [x], [x], numel(x)
    unary = {"relu": "Relu", "tanh": "Tanh", "gelu": "Gelu"}
    if op in unary:
        return unary[op], [x], [x], numel(x)
    # campo has Add and Mul but no Pow or RealDiv; its predictor scales every element-wise
    # node alike (its bytes at the stream rate, 1 FLOP per element), so pow and div are
    # recorded as the Mul of the same shapes. The "u" ops take a Python scalar.
    kind = "Add" if op.startswith("add") else "Mul"
    inputs = [x, []] if op.endswith("u") else [x, x]
    return kind, inputs, [x], numel(x)


def read_data(data, families, known, devices, limit):
    """Kernels as (name, family, op, dims, {device: ms}) of the chosen families, measured on at
    least two of the chosen devices (or one, where --same-device is all there is to check);
    the first `limit` shapes of each NeuSight op in file order when limit is given."""
    kernels, taken = [], {}
    files = sorted({SOURCE[f] for f in families})
    for source in files:
        with open(os.path.join(data, source + ".csv"), newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            # op, the shape columns, then one column per GPU of DATA/devices.json.
            first_device = next(i for i, h in enumerate(header) if h in known)
            columns = header[first_device:]
            for row in reader:
                op = row[0]
                family = FAMILY_OF[op]
                if family not in families:
                    continue
                if limit is not None and taken.get(op, 0) >= limit:
                    continue
                dims = [int(v) for v in row[1:first_device]]
                ms = {d: float(v) for d, v in zip(columns, row[first_device:])
                      if v and d in devices}
                if len(ms) < min(2, len(devices)):
                    continue
                taken[op] = taken.get(op, 0) + 1
                name = f"{family}/{op}/{'x'.join(map(str, dims))}"
                kernels.append((name, family, op, dims, ms))
    return kernels


def write_profile(path, device, kernels):
    nodes = []
    for name, family, op, dims, ms in kernels:
        if device not in ms:
            continue
        kind, inputs, outputs, flops = campo_node(op, dims)
        nbytes = 4 * (sum(numel(s) for s in inputs) + sum(numel(s) for s in outputs))
        nodes.append({"name": name, "op": kind, "dtype": "float32",
                      "inputs": [{"shape": s, "dtype": "float32"} for s in inputs],
                      "outputs": [{"shape": s, "dtype": "float32"} for s in outputs],
                      "flops": flops, "bytes": nbytes, "calls": 1,
                      "ms_per_call": ms[device], "ms_per_step": ms[device]})
    with open(path, "w") as f:
        json.dump({"format": "campo-profile", "version": 1, "model": f"neusight-{device}",
                   "precision": "fp32", "batch": 1, "steps": 1, "nodes": nodes}, f)
    return len(nodes)


def predict(campo, profile, origin, target, table, out):
    cmd = [campo, "predict", "--profile", profile, "--from", origin, "--device", target,
           "--devices", table, "--json", out]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + p.stderr)
    with open(out) as f:
        return {n["name"]: n["ms_predicted"] for n in json.load(f)["nodes"]}


def p90(values):
    s = sorted(values)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def summary(errors):
    """mean and p90 of |error|, the median signed error, the count."""
    absolute = [abs(e) for e in errors]
    signed = sorted(errors)
    return {"n": len(errors), "mean": sum(absolute) / len(absolute), "p90": p90(absolute),
            "median_signed": signed[len(signed) // 2]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--campo", default="build/campo")
    ap.add_argument("--data", default=os.path.join(HERE, "data", "neusight"))
    ap.add_argument("--devices", help="comma-separated, of DATA/devices.json (default: all)")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--limit", type=int, help="the first N shapes of each op only")
    ap.add_argument("--same-device", action="store_true",
                    help="also origin == target, which must predict every kernel exactly")
    ap.add_argument("--json", help="write the errors per family and pair")
    args = ap.parse_args()

    table = os.path.join(args.data, "devices.json")
    with open(table) as f:
        known = [d["name"] for d in json.load(f)["devices"]]
    devices = args.devices.split(",") if args.devices else known
    for d in devices:
        if d not in known:
            sys.exit(f"unknown device '{d}' (DATA/devices.json has {', '.join(known)})")
    families = args.families.split(",")
    for f in families:
        if f not in FAMILIES:
            sys.exit(f"unknown family '{f}' (known: {', '.join(FAMILIES)})")
    kernels = read_data(args.data, families, known, set(devices), args.limit)
    if not kernels:
        sys.exit("no kernel of those families is measured on those devices")

    errors = {}  # (family, origin, target) -> [signed relative error]
    with tempfile.TemporaryDirectory() as tmp:
        for origin in devices:
            profile = os.path.join(tmp, origin + ".profile.json")
            if write_profile(profile, origin, kernels) == 0:
                continue
            for target in devices:
                if target == origin and not args.same_device:
                    continue
                predicted = predict(args.campo, profile, origin, target, table,
                                    os.path.join(tmp, "prediction.json"))
                for name, family, op, dims, ms in kernels:
                    if origin in ms and target in ms:
                        e = (predicted[name] - ms[target]) / ms[target]
                        errors.setdefault((family, origin, target), []).append(e)

    failed = False
    report, matrices = {}, []
    for family in families:
        pairs = {(o, t): summary(e) for (f, o, t), e in errors.items() if f == family}
        if not pairs:
            continue
        cross = [e for (f, o, t), es in errors.items() if f == family and o != t for e in es]
        pooled = summary(cross) if cross else None
        report[family] = {"shapes": len({k[0] for k in kernels if k[1] == family}),
                          "pooled": pooled,
                          "pairs": [dict(origin=o, target=t, **s) for (o, t), s in pairs.items()]}
        origins = [d for d in devices if any(o == d for o, t in pairs)]
        targets = [d for d in devices if any(t == d for o, t in pairs)]
        lines = [f"### {family}", "",
                 "| measured on \\ predicted for | " + " | ".join(targets) + " |",
                 "|---|" + "---:|" * len(targets)]
        for o in origins:
            cells = []
            for t in targets:
                s = pairs.get((o, t))
                cells.append(f"{100 * s['mean']:.0f} / {100 * s['p90']:.0f}" if s else "")
            lines.append(f"| {o} | " + " | ".join(cells) + " |")
        matrices.append("\n".join(lines))
        for (o, t), s in pairs.items():
            if o == t and s["mean"] > 1e-9:
                print(f"FAIL: {family} {o} -> {o} is not exact: mean |error| {s['mean']:.3g}",
                      file=sys.stderr)
                failed = True

    print(f"campo predict on NeuSight's fp32 kernel measurements ({len(devices)} GPUs: "
          f"{', '.join(devices)}); |predicted - measured| / measured per kernel.\n")
    print("| family | shapes | device pairs | kernels predicted | mean | p90 | median signed |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for family, r in report.items():
        p = r["pooled"]
        if p is None:
            continue
        n_pairs = sum(1 for x in r["pairs"] if x["origin"] != x["target"])
        print(f"| {family} | {r['shapes']} | {n_pairs} | {p['n']} | {p['mean']:.1%} | "
              f"{p['p90']:.1%} | {p['median_signed']:+.1%} |")
    print("\nPer device pair, mean / p90 |error| in %: rows the GPU measured (the origin), "
          "columns the GPU predicted (the target).\n")
    print("\n\n".join(matrices))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
