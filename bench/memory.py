"""Peak resident memory of each training configuration, one process each: campo bench with
one precision policy at a time, and the peers' workers of bench/run (PyTorch 2, TensorFlow 2)
on the same jobs (bench/run.py's SHAPES). A process's peak is the kernel's count of it
(ru_maxrss from wait4), so nothing else the machine runs enters it; the figures are not
timings and need no interleaving. campo's figures come with its own memory report
(graph/memory_report.h: arena, weights, optimizer state, ... per policy).

  bench/memory                                   # every model and configuration
  bench/memory --models resnet50 --configs campo,pytorch:fp32 --out /tmp/mem

Writes OUT/memory.json and OUT/memory.md, prints the table. Run through bench/memory, which
finds the peers' virtual environment.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import CAMPO_POLICIES, PEER_CONFIGS, SHAPES, parse_configs, peer_config_keys  # noqa: E402


def fail(msg):
    print(f"bench/memory: error: {msg}", file=sys.stderr)
    sys.exit(1)


def run_once(argv, stdin_text, env):
    """Runs argv to its end; returns (exit status, peak RSS in MiB, stdout, stderr tail)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True,
                                env=env)
        proc.stdin.write(stdin_text)
        proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        lines = err.read().strip().splitlines()
        return proc.returncode, usage.ru_maxrss / 1024, out.read(), (lines or [""])[-1][:300]


def configurations(args):
    """(name, kind, config) in the order of the table."""
    rows = []
    if "campo" in args.configs:
        rows += [(f"campo {p}", "campo", p) for p in CAMPO_POLICIES]
    for fw, (_, configs) in PEER_CONFIGS.items():
        rows += [(f"{fw} {c}", fw, c) for c in configs if f"{fw}:{c}" in args.configs]
    return rows


def measure(args, key, name, kind, config, tmp):
    model, size, channels, batch, _ = SHAPES[key]
    common = ["--model", model, "--image-size", str(size), "--channels", str(channels),
              "--batch", str(batch), "--steps", str(args.steps), "--warmup", "1"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), TF_CPP_MIN_LOG_LEVEL="2")
    entry = {"model": key, "config": name}
    if kind == "campo":
        json_path = Path(tmp) / f"{key}-{config}.json"
        argv = [args.campo, "bench", *common, "--precision", config, "--repeats", "1",
                "--no-peak", "--json", str(json_path)]  # threads: OMP_NUM_THREADS
        code, peak, _, err = run_once(argv, "", env)
        if code == 0:
            entry["memory"] = json.loads(json_path.read_text())[0]["memory"]
    else:
        script = PEER_CONFIGS[kind][0]
        argv = [sys.executable, str(HERE / "peers" / script), *common, "--classes", "10",
                "--threads", str(args.threads), "--config", config]
        code, peak, _, err = run_once(argv, "run\nquit\n", env)
    if code != 0:
        entry["error"] = err or f"exit status {code}"
    else:
        entry["peak_rss_mib"] = peak
    return entry


def markdown(entries, models, rows):
    lines = ["| model | " + " | ".join(name for name, _, _ in rows) + " |",
             "|---|" + "---:|" * len(rows)]
    for key in models:
        cells = []
        for name, _, _ in rows:
            e = next((x for x in entries if x["model"] == key and x["config"] == name), None)
            cells.append("error" if e is None or "error" in e else f"{e['peak_rss_mib']:,.0f}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "campo's report per policy (MiB): arena (live peak), weights, optimizer state, "
              "weight copies, kernel workspace, total", ""]
    for e in entries:
        m = e.get("memory")
        if m:
            lines.append(f"- {e['model']} {e['config']}: arena {m['arena_mib']:.0f} "
                         f"({m['live_peak_mib']:.0f}), weights {m['weights_mib']:.0f}, optimizer "
                         f"state {m['optimizer_state_mib']:.0f}, weight copies "
                         f"{m['weight_copies_mib']:.0f}, workspace {m['workspace_mib']:.0f}, "
                         f"total {m['total_mib']:.0f}; process peak {e['peak_rss_mib']:.0f}")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="lenet,resnet50,resnet50-224,vgg16,dcgan")
    p.add_argument("--configs", default=",".join(["campo"] + peer_config_keys()),
                   help="campo (its three policies), a framework's name (all its "
                   "configurations) and framework:config entries, as bench/run's")
    p.add_argument("--campo", default=str(HERE.parent / "build" / "campo"))
    p.add_argument("--steps", type=int, default=2, help="steps after one warm-up step")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default="bench-memory")
    args = p.parse_args()
    try:
        args.configs = parse_configs(args.configs)
    except ValueError as e:
        fail(str(e))
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in SHAPES:
            fail(f"unknown model '{m}' (known: {', '.join(SHAPES)})")
    if "campo" in args.configs and not os.access(args.campo, os.X_OK):
        fail(f"no campo binary at {args.campo} (build it, or give --campo)")
    rows = configurations(args)
    if not rows:
        fail("no configuration selected (--configs)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in models:
            for name, kind, config in rows:
                e = measure(args, key, name, kind, config, tmp)
                print(f"{key} {name}: " + (f"error: {e['error']}" if "error" in e
                                           else f"{e['peak_rss_mib']:,.0f} MiB"), flush=True)
                entries.append(e)
    (out / "memory.json").write_text(json.dumps(entries, indent=1) + "\n")
    table = markdown(entries, models, rows)
    (out / "memory.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
