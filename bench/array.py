"""Model arrays (campo bench --array N) against N sequential single runs and N concurrent processes.

For each model and array size N three ways of training N copies of the model are measured:

  array       one process, `campo bench --array N`: the N models as one fused step;
  sequential  the N models one after another, each a single run with every core: the
              single model's samples/s (one figure per repetition, the same for every N);
  concurrent  N single-model processes at once, each with OMP_NUM_THREADS = max(1, cores / N)
              and, when N <= cores, pinned with taskset to its own share of the cores; the
              aggregate samples/s is every process's samples over the wall time from the
              common start to the last finish.

Every process is a `campo bench --lockstep` worker (bench/run.py's protocol): it builds,
compiles and warms up, says "ready", then runs one repetition each time it reads "run". All
workers of a model are started first; then the repetitions are interleaved (single, array 2,
concurrent 2, array 4, ...) so a noisy machine's load hits every configuration alike, and the
report gives medians and per-repetition (paired) ratios. A concurrent group is told "run" all
at once, so its processes run their timed steps at the same moment.

Also: each array's and the single model's time per (op, compute type) from campo bench's
profiled steps (--json op_ms), and, from one run per (model, N) with ONEDNN_VERBOSE=1, which
oneDNN implementation every convolution gets (jit, gemm or ref).

Writes OUT/results.json, OUT/results.md and OUT/speedup.png (the chart needs matplotlib: the
peers' environment, bench/setup-peers; the rest needs only python3). Workers' standard error
goes to OUT/logs/.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import Worker  # noqa: E402  (bench/run.py's lockstep worker)

# key -> (campo model, image size, channels, batch, timed steps per repetition).
# LeNet at Fashion-MNIST's shape and the batch campo train uses; ResNet-18 at CIFAR's 32 px
# (the small stem: 3x3/1 conv, no max-pool) and DCGAN at 32 px, both at batch 32, a usual
# batch for 32 px images that keeps an array of 8 (256 samples a step) within a few GiB.
SHAPES = {
    "lenet": ("lenet", 28, 1, 64, 20),
    "resnet18": ("resnet18", 32, 3, 32, 2),
    "dcgan": ("dcgan", 32, 1, 32, 5),
}


def fail(msg):
    print(f"bench/array: error: {msg}", file=sys.stderr)
    sys.exit(1)


def cores():
    return sorted(os.sched_getaffinity(0))


def campo_argv(args, key, n, json_path=None, lockstep=True):
    model, size, channels, batch, steps = SHAPES[key]
    argv = [args.campo, "bench", "--model", model, "--image-size", str(size), "--channels",
            str(channels), "--batch", str(batch), "--steps", str(args.steps or steps),
            "--warmup", str(args.warmup), "--precision", args.precision, "--no-peak"]
    if n > 1:
        argv += ["--array", str(n)]
    if json_path:
        argv += ["--json", str(json_path)]
    if lockstep:
        argv.append("--lockstep")
    return argv


class Group:
    """One configuration: its workers (one, or N concurrent ones) and its figures."""

    def __init__(self, name, workers, samples_per_step, precision):
        self.name, self.workers, self.samples_per_step = name, workers, samples_per_step
        self.precision = precision
        self.samples = []  # samples/s, one per repetition
        self.error = next((w.error for w in workers if w.error), None)

    def run(self, steps, timeout):
        """One repetition; every worker is told to run at once (lockstep)."""
        if len(self.workers) == 1:
            return self.workers[0].run(timeout)["samples_per_sec"][self.precision]
        start = time.perf_counter()
        for w in self.workers:
            w.proc.stdin.write("run\n")
            w.proc.stdin.flush()
        for w in self.workers:
            w.read_json(timeout)
        wall = time.perf_counter() - start
        return steps * self.samples_per_step * len(self.workers) / wall


def start_worker(args, key, label, argv, out, env):
    w = Worker(label, argv, out / "logs" / f"{key}-{label}.log", env)
    w.wait_ready(args.setup_timeout)
    print(f"  {key}: {label}: " + ("ready" if w.error is None else f"FAILED: {w.error}"),
          flush=True)
    return w


def bench_model(args, key, out):
    model, size, channels, batch, default_steps = SHAPES[key]
    steps = args.steps or default_steps
    cpus = cores()
    full_env = dict(os.environ, OMP_NUM_THREADS=str(len(cpus)))
    groups = {}
    jsons = {}
    # The single model: the sequential baseline (and the array and concurrent figures of N 1).
    jsons[1] = out / f"{key}-single.json"
    groups["single"] = Group("single", [start_worker(args, key, "single",
                                                     campo_argv(args, key, 1, jsons[1]), out,
                                                     full_env)], batch, args.precision)
    for n in args.sizes:
        if n == 1:
            continue
        jsons[n] = out / f"{key}-array{n}.json"
        groups[f"array {n}"] = Group(f"array {n}", [start_worker(
            args, key, f"array{n}", campo_argv(args, key, n, jsons[n]), out, full_env)],
            batch * n, args.precision)
        threads = max(1, len(cpus) // n)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        workers = []
        for i in range(n):
            argv = campo_argv(args, key, 1)
            if n <= len(cpus):  # pinned to its own share of the cores
                share = cpus[i * threads:(i + 1) * threads]
                argv = ["taskset", "-c", ",".join(map(str, share))] + argv
            workers.append(start_worker(args, key, f"concurrent{n}-{i}", argv, out, env))
        groups[f"concurrent {n}"] = Group(f"concurrent {n}", workers, batch, args.precision)
    live = [g for g in groups.values() if g.error is None]
    load_before = os.getloadavg()
    for r in range(-args.warmup_repeats, args.repeats):
        for g in live:
            if g.error:
                continue
            try:
                v = g.run(steps, args.run_timeout)
            except (TimeoutError, EOFError, ValueError, KeyError) as e:
                g.error = f"repetition {r + 1}: {e}; {g.workers[0].last_error_line()}"
                print(f"  {key}: {g.name}: FAILED: {g.error}", flush=True)
                continue
            if r >= 0:
                g.samples.append(v)
        print(f"  {key}: " + (f"repetition {r + 1}/{args.repeats}" if r >= 0 else
                              "warm-up round") + " done", flush=True)
    # A worker profiles a few steps as it quits (its op times): the concurrent ones are told
    # to quit all at once (their op times are not used), then the single model and the arrays
    # one at a time, so that their profiled steps run alone.
    concurrent = [w for name, g in groups.items() if name.startswith("concurrent")
                  for w in g.workers]
    for w in concurrent:
        if w.proc.poll() is None:
            try:
                w.proc.stdin.write("quit\n")
                w.proc.stdin.flush()
            except BrokenPipeError:
                pass
    for w in concurrent:
        w.stop()
    for name, g in groups.items():
        if not name.startswith("concurrent"):
            g.workers[0].stop()
    result = {"model": key, "campo_model": model, "image_size": size, "channels": channels,
              "batch": batch, "steps": steps, "repeats": args.repeats,
              "load_before": load_before, "load_after": os.getloadavg(), "rows": []}
    op_ms = {}
    for n, path in jsons.items():
        if path.exists():
            entries = json.loads(path.read_text())
            if entries and "op_ms" in entries[0]:
                op_ms[n] = {f"{e['op']} {e['dtype']}": e["ms"] for e in entries[0]["op_ms"]}
    result["op_ms"] = {str(n): v for n, v in op_ms.items()}

    def figures(g):
        if g.error:
            return {"failed": g.error}
        if len(g.samples) != args.repeats:
            return {"failed": f"only {len(g.samples)} of {args.repeats} repetitions"}
        return {"samples_per_sec": g.samples, "median": statistics.median(g.samples),
                "min": min(g.samples), "max": max(g.samples)}

    single = figures(groups["single"])
    for n in args.sizes:
        row = {"n": n, "sequential": single}
        row["array"] = single if n == 1 else figures(groups[f"array {n}"])
        row["concurrent"] = single if n == 1 else figures(groups[f"concurrent {n}"])
        for method, ref in (("array", "sequential"), ("array", "concurrent"),
                            ("concurrent", "sequential")):
            a, b = row[method], row[ref]
            if "median" in a and "median" in b:
                row[f"{method}_x_{ref}"] = statistics.median(
                    x / y for x, y in zip(a["samples_per_sec"], b["samples_per_sec"]))
        result["rows"].append(row)
    return result


CONV = re.compile(r"^onednn_verbose,(?:[^,]*,)*?exec,cpu,((?:de)?convolution),([^,]+),([^,]+),"
                  r"([^,]*),.*,(\S*mb\d+\S*),[\d.]+$")


def onednn_implementations(args, key, n, out):
    """Which oneDNN implementation each convolution of one --array n step gets."""
    argv = campo_argv(args, key, n, lockstep=False)
    i = argv.index("--steps")
    argv[i + 1] = "1"
    argv[argv.index("--warmup") + 1] = "0"
    argv += ["--repeats", "1"]
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.run_timeout)
    (out / "logs" / f"{key}-onednn-{n}.log").write_text(p.stdout + p.stderr)
    if p.returncode != 0:
        lines = [l for l in (p.stderr or p.stdout).splitlines() if l.strip()]
        return {"failed": (lines or ["(no output)"])[-1][:300]}
    problems = defaultdict(set)  # (prop kind, impl) -> distinct convolution problems
    for line in p.stdout.splitlines():
        m = CONV.match(line)
        if m:
            primitive, impl, prop, formats, problem = m.groups()
            if primitive == "deconvolution":
                prop = "deconv " + prop
            src = re.search(r"src_\w+::blocked:(\w+)", formats)
            problems[(prop, impl)].add((problem, src.group(1) if src else "?"))
    summary = Counter()
    kinds = {}
    for (prop, impl), ps in problems.items():
        summary[f"{prop} {impl}"] = len(ps)
        for problem, src in ps:
            kinds.setdefault(f"{prop} {impl}", []).append(f"{problem} (src {src})")
    return {"problems": dict(summary), "examples": {k: sorted(v)[:3] for k, v in kinds.items()}}


def fmt(fig):
    if "failed" in fig:
        return "failed"
    return f"{fig['median']:.1f} ({fig['min']:.1f}-{fig['max']:.1f})"


def ratio(row, key):
    return f"x{row[key]:.2f}" if key in row else "n/a"


def markdown(results, onednn, header):
    lines = [header, "",
             "| model | N | array samples/s | sequential | concurrent | array / sequential "
             "| array / concurrent |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        name = f"{r['model']} ({r['channels']}x{r['image_size']}x{r['image_size']}, batch {r['batch']})"
        for row in r["rows"]:
            lines.append(f"| {name} | {row['n']} | {fmt(row['array'])} | {fmt(row['sequential'])} "
                         f"| {fmt(row['concurrent'])} | {ratio(row, 'array_x_sequential')} "
                         f"| {ratio(row, 'array_x_concurrent')} |")
            name = ""
    failures = [(r["model"], row["n"], m, row[m]["failed"]) for r in results for row in r["rows"]
                for m in ("array", "concurrent") if "failed" in row[m]]
    if failures:
        lines += ["", "Failed configurations:", ""]
        lines += [f"- {m} N={n} {method}: {why}" for m, n, method, why in failures]
    # Where the time goes: the array's ms per step by op against N single steps.
    for r in results:
        ops = r.get("op_ms", {})
        if "1" not in ops or len(ops) < 2:
            continue
        sizes = sorted(int(n) for n in ops if n != "1")
        single = ops["1"]
        # The ops that take the most time single or in the largest array (an array's linear
        # layers are BatchMatMulV2 where the single model's are MatMul).
        largest = ops[str(sizes[-1])]
        weight = {k: sizes[-1] * single.get(k, 0.0) + largest.get(k, 0.0)
                  for k in set(single) | set(largest)}
        top = sorted(weight, key=lambda k: -weight[k])[:10]
        lines += ["", f"{r['model']}: ms per step by op (profiled steps): the single model, and "
                  "each array's time over N single steps' (x1.00: fusion saves nothing on the op)", "",
                  "| op | single ms | " + " | ".join(f"array {n} ms (/ {n} x single)" for n in sizes)
                  + " |", "|---|---:|" + "---:|" * len(sizes)]
        for op in top + ["total"]:
            s = sum(single.values()) if op == "total" else single.get(op, 0.0)
            cells = []
            for n in sizes:
                a = sum(ops[str(n)].values()) if op == "total" else ops[str(n)].get(op, 0.0)
                cells.append(f"{a:.2f} (x{a / (n * s):.2f})" if s > 0 else f"{a:.2f} (-)")
            lines.append(f"| {op} | {s:.2f} | " + " | ".join(cells) + " |")
    if onednn:
        lines += ["", "oneDNN implementations of the convolutions (ONEDNN_VERBOSE=1, one step; "
                  "distinct convolution problems per propagation kind and implementation):", "",
                  "| model | N | implementations |", "|---|---:|---|"]
        for key, per_n in onednn.items():
            name = key
            for n, info in per_n.items():
                text = info["failed"] if "failed" in info else ", ".join(
                    f"{k} x{v}" for k, v in sorted(info["problems"].items()))
                lines.append(f"| {name} | {n} | {text} |")
                name = ""
    lines += ["", "| model | load (1-min, before-after) |", "|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['load_before'][0]:.1f}-{r['load_after'][0]:.1f} |")
    return "\n".join(lines) + "\n"


def chart(results, path):
    try:
        import matplotlib
    except ImportError:
        return ("no chart: matplotlib is missing from this Python (run bench/array through "
                "bench/setup-peers' environment, or install matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    cmap = plt.get_cmap("tab10")
    for i, r in enumerate(results):
        for method, style in (("array", "-o"), ("concurrent", "--s")):
            pts = [(row["n"], row[f"{method}_x_sequential"]) for row in r["rows"]
                   if f"{method}_x_sequential" in row]
            if pts:
                ax.plot(*zip(*pts), style, color=cmap(i), label=f"{r['model']} {method}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    sizes = sorted({row["n"] for r in results for row in r["rows"]})
    ax.set_xticks(sizes, [str(n) for n in sizes])
    ax.set_xlabel("models trained at once (N)")
    ax.set_ylabel("samples/s over N sequential single runs")
    ax.set_title("Model arrays: speed-up over sequential runs", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main():
    p = argparse.ArgumentParser(prog="bench/array", description=__doc__.split("\n")[0])
    p.add_argument("--models", default="lenet,resnet18,dcgan",
                   help="comma-separated, of: " + ", ".join(SHAPES))
    p.add_argument("--sizes", default="1,2,4,8", help="array sizes N (comma-separated, 1..64)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repetitions")
    p.add_argument("--steps", type=int, default=0,
                   help="timed steps per repetition (0: per model: lenet 20, resnet18 2, dcgan 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps at start-up")
    p.add_argument("--warmup-repeats", type=int, default=1,
                   help="untimed interleaved rounds after every worker has started")
    p.add_argument("--precision", default="fp32", help="campo bench's policy (one)")
    p.add_argument("--no-onednn", action="store_true",
                   help="skip the ONEDNN_VERBOSE runs (which implementation convolutions get)")
    p.add_argument("--campo", default=str(HERE.parent / "build" / "campo"))
    p.add_argument("--out", default=str(HERE / "results" / "array"))
    p.add_argument("--setup-timeout", type=float, default=900, help="seconds for a worker to get ready")
    p.add_argument("--run-timeout", type=float, default=900, help="seconds for one repetition")
    args = p.parse_args()
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in SHAPES:
            fail(f"unknown model '{m}' in --models (known: {', '.join(SHAPES)})")
    try:
        args.sizes = sorted({int(n) for n in args.sizes.split(",") if n})
    except ValueError:
        fail(f"--sizes must be comma-separated numbers, got '{args.sizes}'")
    if not args.sizes or not all(1 <= n <= 64 for n in args.sizes):
        fail(f"--sizes must list array sizes in 1..64, got {args.sizes}")
    if args.repeats < 1 or args.warmup < 0 or args.steps < 0 or args.warmup_repeats < 0:
        fail("--repeats must be at least 1; --warmup, --steps and --warmup-repeats at least 0")
    if "," in args.precision:
        fail("--precision takes one policy (fp32, amp or cost-aware)")
    if not os.access(args.campo, os.X_OK):
        fail(f"{args.campo} is not an executable campo: build it first (see the README) or give --campo")
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    started = time.time()
    results, onednn = [], {}
    for m in models:
        print(f"bench/array: {m}", flush=True)
        results.append(bench_model(args, m, out))
        (out / "results.json").write_text(json.dumps({"results": results, "onednn": onednn},
                                                     indent=1))
    if not args.no_onednn:
        for m in models:
            for n in args.sizes:
                print(f"bench/array: {m}: ONEDNN_VERBOSE run, N={n}", flush=True)
                onednn.setdefault(m, {})[str(n)] = onednn_implementations(args, m, n, out)
    (out / "results.json").write_text(json.dumps({"results": results, "onednn": onednn}, indent=1))
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown CPU")
    n_cores = len(cores())
    header = (f"bench/array on {cpu}, {n_cores} cores; precision {args.precision}; "
              f"{args.repeats} interleaved repetitions after {args.warmup} warm-up steps and "
              f"{args.warmup_repeats} untimed round(s); concurrent: N processes of "
              f"max(1, {n_cores} / N) threads{', pinned when N <= ' + str(n_cores)}; "
              f"{time.time() - started:.0f} s in all")
    (out / "results.md").write_text(markdown(results, onednn, header))
    print((out / "results.md").read_text())
    why = chart(results, out / "speedup.png")
    if why:
        print(f"bench/array: {why}", file=sys.stderr)
        print(f"bench/array: wrote {out}/results.json, results.md")
        sys.exit(1)
    print(f"bench/array: wrote {out}/results.json, results.md, speedup.png")


if __name__ == "__main__":
    main()
