"""campo against PyTorch 2 and TensorFlow 2 on the same training jobs, interleaved.

The peers run as a knowledgeable user would run them, each configuration its own worker
(PEER_CONFIGS): PyTorch eager fp32 and bf16 autocast, each in NCHW and in channels_last;
torch.compile in NCHW, in channels_last and with bf16 autocast in channels_last; fp16
autocast with GradScaler("cpu") in channels_last (refused with the reason where the CPU
build of torch cannot run it); TensorFlow fp32, the grappler auto_mixed_precision rewrite and
Keras mixed_bfloat16. Per model, the table and the JSON name the strongest peer
configuration (highest median samples/s) and campo's best against it as a paired ratio; a
configuration that did not run has a row saying why.

Every configuration (campo's fp32 / amp / cost-aware share one process) runs as one
long-lived worker speaking the lockstep protocol:
it builds its model, warms up, prints a JSON "ready" line, then runs one repetition of
--steps steps each time it reads "run" and answers with its samples/s. All workers of a
model are started first, then told to run in turn, A B C ... A B C ..., so the load of a
shared machine hits every configuration alike; warm-up and compilation are never timed.

Writes OUT/results.json, OUT/results.md (the table) and OUT/*.png (charts), and each
worker's standard error under OUT/logs/. Run through bench/run, which finds the peers'
virtual environment.
"""
import argparse
import difflib
import json
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS_DIR = HERE / "peers"  # the workers' scripts (tests put stand-ins elsewhere)

# (key, campo model, image size, channels, batch, timed steps per repetition)
SHAPES = {
    "lenet": ("lenet", 28, 1, 64, 100),
    "resnet50": ("resnet50", 32, 3, 32, 2),
    "resnet50-224": ("resnet50", 224, 3, 16, 1),
    "vgg16": ("vgg16", 32, 3, 32, 3),
    "dcgan": ("dcgan", 64, 3, 32, 2),
}
CAMPO_POLICIES = ["fp32", "amp", "cost-aware"]
# framework -> (its worker in PEERS_DIR, {configuration: the precision its math runs in}).
# A configuration's name in the table is "framework configuration", on the command line
# "framework:configuration" (or the table's name); the worker takes it as --config.
PEER_CONFIGS = {
    "pytorch": ("torch_bench.py", {
        "fp32": "fp32",
        "fp32 channels_last": "fp32",
        "autocast": "bf16",
        "autocast channels_last": "bf16",
        "compile": "fp32",
        "compile channels_last": "fp32",
        "compile+autocast channels_last": "bf16",
        "autocast fp16 channels_last": "fp16",
    }),
    "tensorflow": ("tf_bench.py", {
        "fp32": "fp32",
        "grappler-amp": "bf16",
        "mixed-bfloat16": "bf16",
    }),
}


def fail(msg):
    print(f"bench/run: error: {msg}", file=sys.stderr)
    sys.exit(1)


def peer_config_keys():
    """Every peer configuration as framework:configuration, in PEER_CONFIGS's order."""
    return [f"{fw}:{c}" for fw, (_, configs) in PEER_CONFIGS.items() for c in configs]


def parse_configs(text, option="--configs"):
    """The configurations a comma-separated selection names: "campo" (its three policies), a
    framework's name (all its configurations), framework:configuration, or the name the
    table shows ("pytorch fp32 channels_last"). Returns "campo" and framework:configuration
    keys in PEER_CONFIGS's order; raises ValueError, one line, on an unknown entry or an
    empty selection."""
    known = ["campo"] + peer_config_keys()
    chosen = set()
    for entry in text.split(","):
        entry = " ".join(entry.split())
        if not entry:
            continue
        if entry == "campo":
            chosen.add(entry)
            continue
        if entry in PEER_CONFIGS:
            chosen.update(f"{entry}:{c}" for c in PEER_CONFIGS[entry][1])
            continue
        fw, _, config = entry.partition(":" if ":" in entry else " ")
        fw, config = fw.strip(), config.strip()
        key = f"{fw}:{config}"
        if key not in known:
            # A near miss of one of the framework's names ("channel_last") gets a hint.
            close = difflib.get_close_matches(config, PEER_CONFIGS.get(fw, ("", {}))[1], n=1,
                                              cutoff=0.8)
            hint = f"; did you mean '{fw}:{close[0]}'?" if close else ""
            raise ValueError(f"unknown configuration '{entry}' in {option}{hint} (known: campo, "
                             f"{', '.join(PEER_CONFIGS)}, {', '.join(known[1:])})")
        chosen.add(key)
    if not chosen:
        raise ValueError(f"{option} selects no configuration")
    return [k for k in known if k in chosen]


def peer_precision(name):
    """The precision of a peer configuration by its table name ("pytorch compile": fp32)."""
    fw, config = name.split(" ", 1)
    return PEER_CONFIGS[fw][1][config]


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
        with open(self.log.name) as f:
            lines = [l.strip() for l in f if l.strip()]
        errors = [l for l in lines if "error" in l.lower()]
        return (errors or lines or ["(no output)"])[-1][:300]

    def peak_rss_mib(self):
        """The process's peak resident memory (VmHWM), while it is alive."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
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
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except BrokenPipeError:  # "quit" still buffered for a worker that has exited
                pass
        self.log.close()


def available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
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
            argvs.append((f"{fw} {c}", [sys.executable, str(PEERS_DIR / script), *common,
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


def paired_median(a, b):
    """The median of the ratios a[i] / b[i], repetition by repetition (both ran in round i,
    under the same load)."""
    return statistics.median(x / y for x, y in zip(a, b))


def add_ratios(result):
    """The strongest peer configuration (highest median samples/s of those that ran), the
    strongest of each framework, campo's best, and paired ratios: every configuration against
    the strongest peer, campo's best against it, campo fp32 against the strongest fp32 peer
    (eager, channels_last or compiled alike), cost-aware against TensorFlow's grappler AMP."""
    cfgs = result["configs"]
    peers = {k: v for k, v in cfgs.items() if not k.startswith("campo ")}
    ours = {k: v for k, v in cfgs.items() if k.startswith("campo ")}
    result["peers_not_measured"] = [k for k in result["failed"] if not k.startswith("campo")]
    if not peers:
        return
    def strongest(names):
        return max(names, key=lambda k: cfgs[k]["median"])
    best_peer = strongest(peers)
    result["best_peer"] = best_peer
    result["best_peer_median"] = peers[best_peer]["median"]
    result["best_peer_per_framework"] = {
        fw: strongest(names) for fw in PEER_CONFIGS
        if (names := [k for k in peers if k.split(" ", 1)[0] == fw])}
    ref = peers[best_peer]["samples_per_sec"]
    for v in cfgs.values():
        v["x_best_peer"] = paired_median(v["samples_per_sec"], ref)
    if not ours:
        return
    best_ours = strongest(ours)
    result["best_campo"] = best_ours
    result["best_campo_median"] = ours[best_ours]["median"]
    result["campo_best_x_best_peer"] = cfgs[best_ours]["x_best_peer"]
    peer_fp32 = [k for k in peers if peer_precision(k) == "fp32"]
    if peer_fp32 and "campo fp32" in cfgs:
        best_fp32 = strongest(peer_fp32)
        result["best_peer_fp32"] = best_fp32
        result["campo_fp32_x_best_peer_fp32"] = paired_median(
            cfgs["campo fp32"]["samples_per_sec"], peers[best_fp32]["samples_per_sec"])
    if "tensorflow grappler-amp" in cfgs and "campo cost-aware" in cfgs:
        result["cost_aware_x_tf_amp"] = paired_median(
            cfgs["campo cost-aware"]["samples_per_sec"],
            cfgs["tensorflow grappler-amp"]["samples_per_sec"])


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
            mark = (" (best peer)" if cfg == r.get("best_peer") else
                    " (campo best)" if cfg == r.get("best_campo") else "")
            ratio = f"x{v['x_best_peer']:.2f}" if "x_best_peer" in v else "n/a"
            lines.append(f"| {name} | {cfg}{mark} | {v['median']:.1f} "
                         f"({v['min']:.1f}-{v['max']:.1f}) | {ratio} | {casts} | {gflops} "
                         f"| {pct} |")
            name = ""
        for cfg, why in r["failed"].items():
            lines.append(f"| {name} | {cfg} | not measured: {why} | | | | |")
            name = ""
    lines += ["", "Peak resident memory of each worker process (MiB; campo's holds its three "
              "policies' executables):", ""]
    for r in results:
        mem = ", ".join(f"{k} {v['peak_rss_mib']:.0f}" for k, v in r.get("ready", {}).items()
                        if v.get("peak_rss_mib"))
        lines.append(f"- {r['model']}: {mem}")
    lines += ["", "The strongest peer configuration of each model (highest median of those "
              "measured) and campo's best against it, paired by repetition:", "",
              "| model | best peer (samples/s) | campo best (samples/s) | campo best / best peer "
              "| campo fp32 / best peer fp32 | cost-aware / TF AMP | peers not measured "
              "| load (1-min, before-after) |",
              "|---|---|---|---:|---:|---:|---|---|"]
    for r in results:
        def ratio(k):
            return f"x{r[k]:.2f}" if k in r else "n/a"

        def named(k):
            return f"{r[k]} ({r[k + '_median']:.1f})" if k in r else "n/a"
        fp32 = ratio("campo_fp32_x_best_peer_fp32")
        if "best_peer_fp32" in r:
            fp32 += f" ({r['best_peer_fp32']})"
        missing = ", ".join(r.get("peers_not_measured", [])) or "none"
        lines.append(f"| {r['model']} | {named('best_peer')} | {named('best_campo')} | "
                     f"{ratio('campo_best_x_best_peer')} | {fp32} | {ratio('cost_aware_x_tf_amp')} "
                     f"| {missing} | {r['load_before'][0]:.1f}-{r['load_after'][0]:.1f} |")
    return "\n".join(lines) + "\n"


def charts(results, out):
    """Writes OUT/throughput.png and OUT/campo-op-breakdown.png; returns the files written
    (none, and says so, where this python has no matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        print("bench/run: no charts: this python has no matplotlib (bash bench/setup-peers "
              "installs it)", flush=True)
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    n = len(results)
    rows = max(len(r["configs"]) + len(r["failed"]) for r in results)
    fig, axes = plt.subplots(1, n, figsize=(4.6 * n, max(4.2, 1.6 + 0.32 * rows)),
                             squeeze=False)
    for ax, r in zip(axes[0], results):
        names = sorted(r["configs"], key=lambda k: (not k.startswith("campo"), k))
        meds = [r["configs"][k]["median"] for k in names]
        lo = [m - r["configs"][k]["min"] for k, m in zip(names, meds)]
        hi = [r["configs"][k]["max"] - m for k, m in zip(names, meds)]
        colors = ["tab:blue" if k.startswith("campo") else
                  "tab:orange" if k.startswith("pytorch") else "tab:green" for k in names]
        # The strongest peer and campo's best: outlined, and named so in their labels.
        edges = ["black" if k in (r.get("best_peer"), r.get("best_campo")) else "none"
                 for k in names]
        ax.barh(range(len(names)), meds, xerr=[lo, hi], color=colors, edgecolor=edges,
                linewidth=2)
        labels = [k + (" (best peer)" if k == r.get("best_peer") else
                       " (campo best)" if k == r.get("best_campo") else "") for k in names]
        # A configuration that did not run keeps its row, with no bar and the word why.
        for i, (k, why) in enumerate(r["failed"].items(), start=len(names)):
            labels.append(k)
            ax.text(0, i, f" not measured: {why[:60]}", va="center", fontsize=6,
                    color="tab:red")
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlabel("samples/s (median, min-max)")
        title = f"{r['model']}\n{describe_shape(r)}"
        if "campo_best_x_best_peer" in r:
            title += f"\ncampo best / best peer: x{r['campo_best_x_best_peer']:.2f}"
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "throughput.png", dpi=110)
    plt.close(fig)
    written.append("throughput.png")

    # campo's time per step by op kind and precision (from campo bench's profiled steps).
    rows = [(r, p) for r in results for p in CAMPO_POLICIES
            if "op_ms" in r["configs"].get(f"campo {p}", {}).get("campo", {})]
    if not rows:
        return written
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
    written.append("campo-op-breakdown.png")
    return written


def main(argv=None):
    p = argparse.ArgumentParser(prog="bench/run", description=__doc__.split("\n")[0])
    p.add_argument("--models", default="lenet,resnet50,resnet50-224,vgg16,dcgan",
                   help="comma-separated, of: " + ", ".join(SHAPES))
    all_configs = ["campo"] + peer_config_keys()
    p.add_argument("--configs", default=",".join(all_configs),
                   help="comma-separated, of: " + ", ".join(all_configs) +
                   "; a framework's name alone means all of its configurations; a peer "
                   "configuration may also be given by its name in the table "
                   "('pytorch fp32 channels_last')")
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
    args = p.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in SHAPES:
            fail(f"unknown model '{m}' in --models (known: {', '.join(SHAPES)})")
    if not models:
        fail("--models selects no model")
    try:
        args.configs = parse_configs(args.configs)
    except ValueError as e:
        fail(str(e))
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
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                   "unknown CPU")
    header = (f"bench/run on {cpu}, {os.cpu_count()} cores, {args.threads} threads per framework; "
              f"{args.repeats} interleaved repetitions after {args.warmup} warm-up steps and "
              f"{args.warmup_repeats} untimed round(s); "
              f"{time.time() - started:.0f} s in all")
    (out / "results.md").write_text(markdown(results, header))
    written = ["results.json", "results.md"] + charts(results, out)
    print((out / "results.md").read_text())
    print(f"bench/run: wrote {out}/" + ", ".join(written))


if __name__ == "__main__":
    main()
