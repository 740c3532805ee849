"""campo against PyTorch 2 and TensorFlow 2 on the same training jobs, interleaved.

Every configuration (campo's fp32 / amp / cost-aware in one process; PyTorch eager fp32,
autocast bf16 and torch.compile; TensorFlow fp32, the grappler auto_mixed_precision rewrite
and Keras mixed_bfloat16) runs as one long-lived worker speaking the lockstep protocol:
it builds its model, warms up, prints a JSON "ready" line, then runs one repetition of
--steps steps each time it reads "run" and answers with its samples/s. All workers of a
model are started first, then told to run in turn, A B C ... A B C ..., so the load of a
shared machine hits every configuration alike; warm-up and compilation are never timed.

Writes OUT/results.json, OUT/results.md (the table) and OUT/*.png (charts), and each
worker's standard error under OUT/logs/. Run through bench/run, which finds the peers'
virtual environment.
"""
import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (key, campo model, image size, channels, batch, timed steps per repetition)
SHAPES = {
    "lenet": ("lenet", 28, 1, 64, 100),
    "resnet50": ("resnet50", 32, 3, 32, 2),
    "resnet50-224": ("resnet50", 224, 3, 16, 1),
    "vgg16": ("vgg16", 32, 3, 32, 3),
    "dcgan": ("dcgan", 64, 3, 32, 2),
}
CAMPO_POLICIES = ["fp32", "amp", "cost-aware"]
PEER_CONFIGS = {
    "pytorch": ("torch_bench.py", ["fp32", "autocast", "compile"]),
    "tensorflow": ("tf_bench.py", ["fp32", "grappler-amp", "mixed-bfloat16"]),
}


def fail(msg):
    print(f"bench/run: error: {msg}", file=sys.stderr)
    sys.exit(1)


class Worker:
    """One lockstep process: started, waited for until ready, then run repetition by repetition."""

    def __init__(self, name, argv, log_path, env):
        self.name, self.argv = name, argv
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, bufsize=1, env=env)
        self.ready = None
        self.error = None

    def read_json(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise TimeoutError(f"no answer within {timeout:.0f} s")
        line = self.proc.stdout.readline()
        if not line:
            raise EOFError(f"exited with status {self.proc.wait()}")
        return json.loads(line)

    def wait_ready(self, timeout):
        try:
            self.ready = self.read_json(timeout)
            if not self.ready.get("ready"):
                raise ValueError(f"unexpected first line {self.ready}")
        except (TimeoutError, EOFError, ValueError) as e:
            self.error = f"{e}; {self.last_error_line()}"
            self.stop()

    def run(self, timeout):
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self.read_json(timeout)

    def last_error_line(self):
        self.log.flush()
        lines = [l.strip() for l in open(self.log.name) if l.strip()]
        errors = [l for l in lines if "error" in l.lower()]
        return (errors or lines or ["(no output)"])[-1][:300]

    def peak_rss_mib(self):
        """The process's peak resident memory (VmHWM), while it is alive."""
        try:
            for line in open(f"/proc/{self.proc.pid}/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def stop(self):
        self.peak_mib = self.peak_rss_mib()
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=120)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def available_mib():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def worker_argvs(args, key, out):
    model, size, channels, batch, steps = SHAPES[key]
    steps = args.steps or steps
    common = ["--model", model, "--image-size", str(size), "--channels", str(channels),
              "--batch", str(batch), "--steps", str(steps), "--warmup", str(args.warmup)]
    argvs = []
    if "campo" in args.configs:
        argvs.append(("campo", [args.campo, "bench", *common, "--precision",
                                ",".join(CAMPO_POLICIES), "--lockstep",
                                "--json", str(out / f"campo-{key}.json")]))
    for fw, (script, configs) in PEER_CONFIGS.items():
        for c in configs:
            if f"{fw}:{c}" not in args.configs:
                continue
            argvs.append((f"{fw} {c}", [sys.executable, str(HERE / "peers" / script), *common,
                                        "--classes", "10", "--threads", str(args.threads),
                                        "--config", c]))
    return argvs, batch, steps


def bench_model(args, key, out):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TF_CPP_MIN_LOG_LEVEL="2")
    argvs, batch, steps = worker_argvs(args, key, out)
    load_before = os.getloadavg()
    workers, skipped = [], {}
    # Started one at a time: a worker's set-up (torch.compile, campo's cost profiling) is
    # not timed, but it would slow the others' warm-up.
    for name, argv in argvs:
        free = available_mib()
        if free < args.min_free_mib:
            print(f"  {key}: {name}: not started: {free:.0f} MiB of memory available, "
                  f"--min-free-mib is {args.min_free_mib}", flush=True)
            skipped[name] = f"not started: {free:.0f} MiB of memory left with the others running"
            continue
        w = Worker(name, argv, out / "logs" / f"{key}-{name.replace(' ', '-')}.log", env)
        w.wait_ready(args.setup_timeout)
        print(f"  {key}: {name}: " + ("ready" if w.error is None else f"FAILED: {w.error}"),
              flush=True)
        workers.append(w)
    live = [w for w in workers if w.error is None]
    samples = {}  # configuration -> samples/s per repetition
    for r in range(-args.warmup_repeats, args.repeats):
        for w in live:
            if w.error:
                continue
            try:
                ans = w.run(args.run_timeout)
            except (TimeoutError, EOFError, ValueError) as e:
                w.error = f"repetition {r + 1}: {e}; {w.last_error_line()}"
                print(f"  {key}: {w.name}: FAILED: {w.error}", flush=True)
                continue
            sps = ans["samples_per_sec"]
            if r < 0:
                continue  # a warm-up round: every worker once more, after all have started
            if isinstance(sps, dict):  # campo: one figure per policy
                for policy, v in sps.items():
                    samples.setdefault(f"campo {policy}", []).append(v)
            else:
                samples.setdefault(w.name, []).append(sps)
        print(f"  {key}: " + (f"repetition {r + 1}/{args.repeats}" if r >= 0 else
                              "warm-up round") + " done", flush=True)
    for w in workers:
        w.stop()
    result = {"model": key, "campo_model": SHAPES[key][0], "image_size": SHAPES[key][1],
              "channels": SHAPES[key][2], "batch": batch, "steps": steps,
              "repeats": args.repeats, "load_before": load_before,
              "load_after": os.getloadavg(), "configs": {}, "failed": {}}
    result["failed"].update(skipped)
    for w in workers:
        if w.error:
            result["failed"][w.name] = w.error
        elif w.ready:
            result.setdefault("ready", {})[w.name] = dict(w.ready, peak_rss_mib=w.peak_mib)
    for name, v in samples.items():
        if len(v) != args.repeats:
            result["failed"][name] = f"only {len(v)} of {args.repeats} repetitions"
            continue
        result["configs"][name] = {"samples_per_sec": v, "median": statistics.median(v),
                                   "min": min(v), "max": max(v)}
    campo_json = out / f"campo-{key}.json"
    if campo_json.exists():
        for entry in json.loads(campo_json.read_text()):
            cfg = result["configs"].get(f"campo {entry['precision']}")
            if cfg is not None:
                cfg["campo"] = entry
    add_ratios(result)
    return result


def add_ratios(result):
    """Paired ratios: each configuration against the best peer and campo's best, by repetition."""
    cfgs = result["configs"]
    peers = {k: v for k, v in cfgs.items() if not k.startswith("campo")}
    ours = {k: v for k, v in cfgs.items() if k.startswith("campo")}
    if not peers or not ours:
        return
    best_peer = max(peers, key=lambda k: peers[k]["median"])
    best_ours = max(ours, key=lambda k: ours[k]["median"])
    result["best_peer"], result["best_campo"] = best_peer, best_ours
    ref = peers[best_peer]["samples_per_sec"]
    for v in cfgs.values():
        v["x_best_peer"] = statistics.median(a / b for a, b in zip(v["samples_per_sec"], ref))
    peer_fp32 = [k for k in peers if k.endswith(" fp32")]
    if peer_fp32 and "campo fp32" in cfgs:
        best_fp32 = max(peer_fp32, key=lambda k: peers[k]["median"])
        result["campo_fp32_x_best_peer_fp32"] = statistics.median(
            a / b for a, b in zip(cfgs["campo fp32"]["samples_per_sec"],
                                  peers[best_fp32]["samples_per_sec"]))
        result["best_peer_fp32"] = best_fp32
    if "tensorflow grappler-amp" in cfgs and "campo cost-aware" in cfgs:
        result["cost_aware_x_tf_amp"] = statistics.median(
            a / b for a, b in zip(cfgs["campo cost-aware"]["samples_per_sec"],
                                  cfgs["tensorflow grappler-amp"]["samples_per_sec"]))


def describe_shape(r):
    return f"{r['channels']}x{r['image_size']}x{r['image_size']}, batch {r['batch']}"


def markdown(results, header):
    lines = [header, "",
             "| model | configuration | samples/s (median, min-max) | x best peer | campo casts "
             "| GFLOP/s | % of GEMM peak |",
             "|---|---|---:|---:|---|---:|---:|"]
    for r in results:
        name = f"{r['model']} ({describe_shape(r)})"
        for cfg, v in sorted(r["configs"].items(), key=lambda kv: -kv[1]["median"]):
            c = v.get("campo", {})
            casts = f"{c['casts']} (+{c.get('folded_casts', 0)} folded)" if "casts" in c else ""
            gflops = f"{c['achieved_gflops']:.1f}" if "achieved_gflops" in c else ""
            pct = f"{c['pct_of_peak']:.0f}%" if "pct_of_peak" in c else ""
            best = " (best peer)" if cfg == r.get("best_peer") else ""
            ratio = f"x{v['x_best_peer']:.2f}" if "x_best_peer" in v else "n/a"
            lines.append(f"| {name} | {cfg}{best} | {v['median']:.1f} ({v['min']:.1f}-{v['max']:.1f})"
                         f" | {ratio} | {casts} | {gflops} | {pct} |")
            name = ""
        for cfg, why in r["failed"].items():
            lines.append(f"| {name} | {cfg} | failed: {why} | | | | |")
            name = ""
    lines += ["", "Peak resident memory of each worker process (MiB; campo's holds its three "
              "policies' executables):", ""]
    for r in results:
        mem = ", ".join(f"{k} {v['peak_rss_mib']:.0f}" for k, v in r.get("ready", {}).items()
                        if v.get("peak_rss_mib"))
        lines.append(f"- {r['model']}: {mem}")
    lines += ["", "| model | campo best / best peer | campo fp32 / best peer fp32 "
              "| cost-aware / TF AMP | load (1-min, before-after) |", "|---|---:|---:|---:|---|"]
    for r in results:
        def fmt(k):
            return f"x{r[k]:.2f}" if k in r else "n/a"
        best = (f"x{r['configs'][r['best_campo']]['x_best_peer']:.2f} ({r['best_campo']} vs "
                f"{r['best_peer']})") if "best_peer" in r else "n/a"
        lines.append(f"| {r['model']} | {best} | {fmt('campo_fp32_x_best_peer_fp32')} | "
                     f"{fmt('cost_aware_x_tf_amp')} | {r['load_before'][0]:.1f}-"
                     f"{r['load_after'][0]:.1f} |")
    return "\n".join(lines) + "\n"


def charts(results, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 4.2), squeeze=False)
    for ax, r in zip(axes[0], results):
        names = sorted(r["configs"], key=lambda k: (not k.startswith("campo"), k))
        meds = [r["configs"][k]["median"] for k in names]
        lo = [m - r["configs"][k]["min"] for k, m in zip(names, meds)]
        hi = [r["configs"][k]["max"] - m for k, m in zip(names, meds)]
        colors = ["tab:blue" if k.startswith("campo") else
                  "tab:orange" if k.startswith("pytorch") else "tab:green" for k in names]
        ax.barh(range(len(names)), meds, xerr=[lo, hi], color=colors)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("samples/s (median, min-max)")
        ax.set_title(f"{r['model']}\n{describe_shape(r)}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)

    # campo's time per step by op kind and precision (from campo bench's profiled steps).
    rows = [(r, p) for r in results for p in CAMPO_POLICIES
            if "op_ms" in r["configs"].get(f"campo {p}", {}).get("campo", {})]
    if not rows:
        return
    profiled = [r for r in results if any(rr is r for rr, _ in rows)]  # dcgan has no op times
    fig, axes = plt.subplots(1, len(profiled), figsize=(4.2 * len(profiled), 6.2), squeeze=False)
    for ax, r in zip(axes[0], profiled):
        mine = [(p, r["configs"][f"campo {p}"]["campo"]["op_ms"]) for rr, p in rows if rr is r]
        kinds = {}
        for _, op_ms in mine:
            for e in op_ms:
                kinds[e["op"]] = kinds.get(e["op"], 0) + e["ms"]
        top = sorted(kinds, key=lambda k: -kinds[k])[:7]
        groups = [(k, d) for k in top for d in ("f32", "bf16", "f16")] + [("other", None)]
        bottom = [0.0] * len(mine)
        cmap = plt.get_cmap("tab10")
        for gi, (kind, dtype) in enumerate(groups):
            vals = []
            for _, op_ms in mine:
                vals.append(sum(e["ms"] for e in op_ms
                                if (kind == "other" and e["op"] not in top) or
                                (e["op"] == kind and e["dtype"] == dtype)))
            if not any(vals):
                continue
            label = kind if dtype is None else f"{kind} {dtype}"
            color = cmap(top.index(kind) % 10) if kind in top else "lightgrey"
            ax.bar(range(len(mine)), vals, bottom=bottom, label=label, color=color,
                   hatch="//" if dtype in ("bf16", "f16") else None, edgecolor="white")
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(range(len(mine)), [p for p, _ in mine])
        ax.set_ylabel("ms per step (profiled)")
        ax.set_title(f"campo {r['model']}", fontsize=9)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2,
                  title="hatched: bf16/f16", title_fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "campo-op-breakdown.png", dpi=110)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n")[0])
    p.add_argument("--models", default="lenet,resnet50,resnet50-224,vgg16,dcgan",
                   help="comma-separated, of: " + ", ".join(SHAPES))
    all_configs = ["campo"] + [f"{fw}:{c}" for fw, (_, cs) in PEER_CONFIGS.items() for c in cs]
    p.add_argument("--configs", default=",".join(all_configs),
                   help="comma-separated, of: " + ", ".join(all_configs) +
                   "; a framework's name alone means all of its configurations")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repetitions")
    p.add_argument("--steps", type=int, default=0, help="timed steps per repetition (0: per model)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps at start-up")
    p.add_argument("--warmup-repeats", type=int, default=1,
                   help="untimed interleaved rounds after every worker has started")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="threads per framework")
    p.add_argument("--campo", default=str(HERE.parent / "build" / "campo"))
    p.add_argument("--out", default=str(HERE / "results" / "peers"))
    p.add_argument("--setup-timeout", type=float, default=900, help="seconds for a worker to get ready")
    p.add_argument("--run-timeout", type=float, default=900, help="seconds for one repetition")
    p.add_argument("--min-free-mib", type=float, default=3072,
                   help="start no further worker of a model below this much available memory")
    args = p.parse_args()
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in SHAPES:
            fail(f"unknown model '{m}' in --models (known: {', '.join(SHAPES)})")
    configs = []
    for c in (c for c in args.configs.split(",") if c):
        if c in PEER_CONFIGS:
            configs += [f"{c}:{x}" for x in PEER_CONFIGS[c][1]]
        elif c in all_configs:
            configs.append(c)
        else:
            fail(f"unknown configuration '{c}' in --configs (known: {', '.join(all_configs)})")
    args.configs = configs
    if (args.repeats < 1 or args.threads < 1 or args.warmup < 1 or args.steps < 0 or
            args.warmup_repeats < 0):
        fail("--repeats, --threads and --warmup must be at least 1 (TensorFlow and torch.compile "
             "compile in the warm-up), --steps and --warmup-repeats at least 0")
    if "campo" in args.configs and not os.access(args.campo, os.X_OK):
        fail(f"{args.campo} is not an executable campo: build it first (see the README) or give --campo")
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    started = time.time()
    results = []
    for m in models:
        print(f"bench/run: {m}", flush=True)
        results.append(bench_model(args, m, out))
        (out / "results.json").write_text(json.dumps(results, indent=1))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown CPU")
    header = (f"bench/run on {cpu}, {os.cpu_count()} cores, {args.threads} threads per framework; "
              f"{args.repeats} interleaved repetitions after {args.warmup} warm-up steps and "
              f"{args.warmup_repeats} untimed round(s); "
              f"{time.time() - started:.0f} s in all")
    (out / "results.md").write_text(markdown(results, header))
    charts(results, out)
    print((out / "results.md").read_text())
    print(f"bench/run: wrote {out}/results.json, results.md, throughput.png, campo-op-breakdown.png")


if __name__ == "__main__":
    main()
