#!/usr/bin/env python3
"""Data-parallel scaling of `campo train --data-parallel` on this machine, and a stated
alpha-beta model of what it would be on many GPUs (docs/results.md, "Data-parallel scaling").

  python3 bench/scaling.py [--campo build/campo] [--models lenet,resnet18] [--repeats 3]

Measured, per model, interleaved repetitions of four ways to use two cores for one model's
training (synthetic data, fp32, the same --batch per process):
  1x1   one process, one thread (OMP_NUM_THREADS=1)
  1x2   one process, two threads
  2x1   two ranks of one thread each: mpirun -np 2 ... --data-parallel
  2 ind two independent single-thread processes at once (their samples/s summed): the most
        two processes could do without exchanging anything
Reported: median samples/s (every rank's samples) and the ratios, paired within a repetition:
scaling efficiency 2x1 / (2 x 1x1), 2x1 / 1x2 and 2x1 / 2 ind. The 2x1 run's result line also
gives the gradient bytes per step, the buckets, the time the reductions took and the time the
step waited for them; from these the alpha-beta model below is fitted to this machine
(fit_alpha_beta) and its prediction of 2x1 / 2 ind set beside the measured one.

Modelled (--model-table): ring all-reduce of the gradients over p GPUs, each reduction
2 (p - 1) alpha + 2 (p - 1) / p * bytes / beta; buckets overlap the backward pass, so the step
pays what does not fit into it plus the last bucket (each bucket's bytes are campo's own, from
two steps of a --data-parallel run at 224 px):
  T_step = T_compute + max(0, T_comm - T_backward) + T_comm(last bucket)
  efficiency = T_compute / T_step
and, as the bound where nothing overlaps (every bucket reduced after the backward pass),
  efficiency = T_compute / (T_compute + T_comm); each cell gives "overlapped / not".
with T_compute from the model's FLOPs per step (campo bench) at --gpu-tflops x --gpu-utilisation,
T_backward = 2/3 T_compute, and buckets of --bucket-mb. All of these are stated in the table's
header: they are assumptions, not measurements (no network or GPU can be measured here).
Uses only the Python standard library (and mpirun from openmpi-bin).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# model: (options, timed steps): small shapes, and steps enough for a few seconds a run.
JOBS = {
    "lenet": (["--batch", "64"], 400),
    "resnet18": (["--batch", "16", "--image-size", "32", "--channels", "3"], 40),
    "resnet50": (["--batch", "8", "--image-size", "32", "--channels", "3"], 40),
    "vgg16": (["--batch", "16", "--image-size", "32", "--channels", "3"], 40),
}
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader",
          "-x", "OMP_NUM_THREADS=1", "-x", "OMP_WAIT_POLICY=PASSIVE"]
if os.geteuid() == 0:
    MPIRUN.append("--allow-run-as-root")


def train_cmd(campo, model, steps):
    options, default_steps = JOBS[model]
    return [campo, "train", "--model", model, "--dataset", "synthetic", "--precision", "fp32",
            "--steps", str(steps or default_steps), "--progress", "none", "--lr", "0.01",
            "--limit-test", "64"] + options


def result_line(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{") and '"event":"result"' in line:
            return json.loads(line)
    raise RuntimeError("no result line in:\n" + text)


def run_cmd(cmd, threads):
    # One thread: nothing spins for work (PASSIVE), leaving a core to the other rank or
    # process; two threads: OpenMP's default, which spins between parallel regions.
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if threads == 1:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(" ".join(cmd) + " failed:\n" + p.stderr)
    return result_line(p.stdout)


def run_independent(cmd):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE")
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    total = 0.0
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise RuntimeError(" ".join(cmd) + " failed:\n" + err)
        total += result_line(out)["samples_per_sec"]
    return total


def measure(args):
    rows = []
    for model in args.models.split(","):
        cmd = train_cmd(args.campo, model, args.steps)
        reps = {"1x1": [], "1x2": [], "2x1": [], "2 ind": []}
        comms = []  # the 2x1 runs' "communication"
        for r in range(args.repeats):
            order = ["1x1", "1x2", "2x1", "2 ind"]
            if r % 2:
                order.reverse()
            for what in order:
                if what == "1x1":
                    reps[what].append(run_cmd(cmd, 1)["samples_per_sec"])
                elif what == "1x2":
                    reps[what].append(run_cmd(cmd, 2)["samples_per_sec"])
                elif what == "2x1":
                    j = run_cmd(MPIRUN + ["-np", "2"] + cmd + ["--data-parallel"], 1)
                    reps[what].append(j["samples_per_sec"])
                    comms.append(j["communication"])
                    bucket_bytes = j["gradient_bucket_bytes"]
                else:
                    reps[what].append(run_independent(cmd))
            print(f"{model} repetition {r + 1}: " +
                  ", ".join(f"{k} {v[-1]:.1f}" for k, v in reps.items()), file=sys.stderr)

        def paired(num, den, factor=1.0):
            return statistics.median(a / (factor * b) for a, b in zip(reps[num], reps[den]))

        comm = {k: statistics.median(c[k] for c in comms) for k in comms[0]}
        options = JOBS[model][0]
        rows.append({
            "model": model, "options": " ".join(options),
            "batch": int(options[options.index("--batch") + 1]),
            **{k: statistics.median(v) for k, v in reps.items()},
            "efficiency": paired("2x1", "1x1", 2.0), "vs_1x2": paired("2x1", "1x2"),
            "vs_2ind": paired("2x1", "2 ind"), "communication": comm,
            "bucket_bytes": bucket_bytes})
    print("| model | options | 1x1 | 1x2 | 2x1 (data-parallel) | 2 independent | efficiency "
          "2x1 / (2 x 1x1) | 2x1 / 1x2 | 2x1 / 2 ind | gradient MB per step | buckets | "
          "wait ms per step |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c = r["communication"]
        print(f"| {r['model']} | {r['options']} | {r['1x1']:.1f} | {r['1x2']:.1f} | "
              f"{r['2x1']:.1f} | {r['2 ind']:.1f} | {r['efficiency']:.2f} | {r['vs_1x2']:.2f} | "
              f"{r['vs_2ind']:.2f} | {c['bytes_per_step'] / 2**20:.2f} | "
              f"{c['buckets']:g} | {c['wait_ms_per_step']:.2f} |")
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump(rows, f, indent=1)
    fit_alpha_beta(rows)
    return rows


def fit_alpha_beta(rows):
    """The alpha-beta model fitted to this machine's measured reductions (2 ranks), and what
    it predicts for the step against what was measured.

    Per step, buckets b_1..b_n took T = sum_i (2 (p - 1) alpha + 2 (p - 1) / p * b_i / beta)
    (p = 2: 2 n alpha + B / beta) from each bucket's start to its end on the communication
    thread (reduce_ms_per_step); alpha and 1 / beta by least squares of the relative error
    over the models (each point weighted 1 / T^2, so that LeNet's 0.2 MiB counts as much as
    ResNet-50's 90). With
    t the step of a rank when the two run without exchanging anything (2 ind), the model
    predicts 2x1 / 2 ind = t / (t + max(0, T - 2/3 t) + T(b_n)) where the buckets overlap the
    backward pass, and t / (t + T) where nothing overlaps."""
    pts = [(2 * r["communication"]["buckets"], r["communication"]["bytes_per_step"],
            r["communication"]["reduce_ms_per_step"] * 1e-3) for r in rows]
    w = [1 / (t * t) for _, _, t in pts]
    sxx = sum(wi * a * a for wi, (a, _, _) in zip(w, pts))
    sxy = sum(wi * a * b for wi, (a, b, _) in zip(w, pts))
    syy = sum(wi * b * b for wi, (_, b, _) in zip(w, pts))
    sxt = sum(wi * a * t for wi, (a, _, t) in zip(w, pts))
    syt = sum(wi * b * t for wi, (_, b, t) in zip(w, pts))
    det = sxx * syy - sxy * sxy
    alpha = max(0.0, (sxt * syy - syt * sxy) / det) if len(pts) > 1 and det else 0.0
    inv_beta = (syt - alpha * sxy) / syy
    print(f"\nfitted on these reductions (2 ranks, one machine): alpha {alpha * 1e6:.0f} us per "
          f"message, beta {1 / inv_beta / 1e9:.2f} GB/s\n")
    print("| model | buckets (MiB) | reductions ms per step: measured | fitted | waited ms per "
          "step | step ms of 2 ind | 2x1 / 2 ind: measured | predicted, overlapped | "
          "predicted, not overlapped |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r, (a, b, t) in zip(rows, pts):
        fitted = a * alpha + b * inv_beta
        step = r["batch"] / (r["2 ind"] / 2)
        last = 2 * alpha + r["bucket_bytes"][-1] * inv_beta
        overlapped = step / (step + max(0.0, fitted - 2 / 3 * step) + last)
        serial = step / (step + fitted)
        sizes = ", ".join(f"{x / 2**20:.1f}" for x in r["bucket_bytes"])
        print(f"| {r['model']} | {sizes} | {t * 1e3:.1f} | {fitted * 1e3:.1f} | "
              f"{r['communication']['wait_ms_per_step']:.1f} | {step * 1e3:.0f} | "
              f"{r['vs_2ind']:.2f} | {overlapped:.2f} | {serial:.2f} |")


def model_table(args):
    """Predicted efficiency on p GPUs (see the file comment): every figure but the FLOPs and
    the gradient bytes is an assumption printed with the table."""
    models = args.gpu_models.split(",")
    print(f"\nefficiency per cell: buckets overlapped with the backward pass / not overlapped; "
          f"assumed: {args.gpu_tflops} TFLOP/s per GPU at {args.gpu_utilisation:.0%} "
          f"utilisation, batch {args.gpu_batch} per GPU at 224 px (299 px inception_v3), "
          f"backward 2/3 of the step, alpha {args.alpha_us} us per message, buckets of "
          f"{args.bucket_mb} MB, ring all-reduce over the GPUs\n")
    links = [float(x) for x in args.links.split(",")]
    gpus = [int(x) for x in args.gpus.split(",")]
    header = "| model | gradient MiB | buckets | compute ms | " + " | ".join(
        f"{p} GPUs @ {g:g} Gb/s" for g in links for p in gpus) + " |"
    print(header)
    print("|---|---:|---:|---:|" + "---:|" * (len(links) * len(gpus)))
    for model in models:
        size = "299" if model == "inception_v3" else "224"
        # Batch 2: the smallest that every model's batch norm trains on (inception_v3's
        # auxiliary head is 1x1).
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            p = subprocess.run([args.campo, "bench", "--model", model, "--precision", "fp32",
                                "--batch", "2", "--image-size", size, "--channels", "3",
                                "--steps", "1", "--repeats", "1", "--warmup", "0", "--no-peak",
                                "--json", f.name], capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"campo bench --model {model} failed:\n{p.stderr}")
            j = json.load(open(f.name))
        run = j[0] if isinstance(j, list) else j
        flops = run["flops_per_step"] / 2 * args.gpu_batch
        # The buckets and their bytes as campo cuts them: two steps of two ranks.
        dp = run_cmd(MPIRUN + ["-np", "2", args.campo, "train", "--model", model, "--dataset",
                               "synthetic", "--precision", "fp32", "--steps", "2", "--batch", "2",
                               "--image-size", size, "--channels", "3", "--progress", "none",
                               "--limit-test", "2", "--eval-batch", "2",
                               "--data-parallel", "--bucket-mb", str(args.bucket_mb)], 1)
        sizes = dp["gradient_bucket_bytes"]
        grad_bytes, buckets = sum(sizes), len(sizes)
        compute = flops / (args.gpu_tflops * 1e12 * args.gpu_utilisation)
        backward = compute * 2 / 3
        cells = []
        for gbps in links:
            beta = gbps * 1e9 / 8
            for p in gpus:
                def ring(n):
                    return 2 * (p - 1) * args.alpha_us * 1e-6 + 2 * (p - 1) / p * n / beta
                # Each bucket is its own ring; the last (the first layers') is always exposed.
                comm = sum(ring(x) for x in sizes)
                last = ring(sizes[-1])
                step = compute + max(0.0, comm - backward) + last
                serial = compute + comm  # no overlap: every bucket after the backward pass
                cells.append(f"{compute / step:.0%} / {compute / serial:.0%}")
        print(f"| {model} | {grad_bytes / 2**20:.0f} | {buckets} | {compute * 1e3:.0f} | " +
              " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--campo", default="build/campo")
    ap.add_argument("--models", default="lenet,resnet18,resnet50,vgg16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="timed steps (0: each model's own)")
    ap.add_argument("--model-table", action="store_true", help="also print the GPU model")
    ap.add_argument("--raw", help="write the measured rows as JSON here")
    ap.add_argument("--refit", help="print the fit of the rows a --raw file holds, measure nothing")
    ap.add_argument("--only-model-table", action="store_true")
    ap.add_argument("--gpu-models", default="resnet50,inception_v3,vgg16")
    ap.add_argument("--gpu-tflops", type=float, default=9.3, help="P100 PCIe fp32 peak")
    ap.add_argument("--gpu-utilisation", type=float, default=0.5)
    ap.add_argument("--gpu-batch", type=int, default=64)
    ap.add_argument("--alpha-us", type=float, default=10.0)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--links", default="25,200", help="Gb/s")
    ap.add_argument("--gpus", default="8,64,512")
    args = ap.parse_args()
    if args.refit:
        fit_alpha_beta(json.load(open(args.refit)))
        return
    if not args.only_model_table:
        measure(args)
    if args.model_table or args.only_model_table:
        model_table(args)


if __name__ == "__main__":
    main()
