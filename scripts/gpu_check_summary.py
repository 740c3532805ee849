#!/usr/bin/env python3
"""The summary of scripts/gpu-check: reads what its stages left and prints one table (stages,
tests, then samples/s of campo and PyTorch per model and precision with their ratio);
writes it all to OUT/summary.json. gpu-check runs it with --quiet after every stage (the
JSON only), so that a run killed at any point leaves a summary of what it measured.

  scripts/gpu_check_summary.py --out OUT --work WORK [--quiet]
  scripts/gpu_check_summary.py --suite NAME --suite-status STATUS --seconds N
                               [--report GTEST_JSON] --into OUT/cuda-tests.jsonl

OUT: stages.tsv (name, status, seconds, note a line), cuda-tests.jsonl (one CUDA test suite
a line: suite, status, seconds, its GoogleTest report or null; the second form appends one),
campo-<model>.json (campo bench --json), torch-<model>.json (bench/peers/torch_gpu.py
--json). WORK: graph-on-lenet.json and graph-off-lenet.json (campo bench --cuda-graph on /
off), calibration.json (campo calibrate --device cuda --quick), version.txt. A missing file
is a stage that did not run or did not finish: its cells read '-'.
"""
import argparse
import glob
import json
import os
import sys

MODELS = ["resnet50", "vgg16", "dcgan"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_stages(path):
    stages = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 3:
                    stages.append({"stage": parts[0], "status": parts[1],
                                   "seconds": int(parts[2]) if parts[2].isdigit() else None,
                                   "note": parts[3] if len(parts) > 3 else ""})
    except OSError:
        pass
    return stages


def read_suites(path):
    """cuda-tests.jsonl: one dict per suite (a line that does not parse is skipped)."""
    suites = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    suites.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return suites


def suites_counts(suites):
    """The suites' GoogleTest reports summed: counts, failed and skipped names, and the
    suites without a report (killed, crashed, or skipped for time)."""
    if not suites:
        return None
    total = {"suites": len(suites), "tests": 0, "passed": 0, "failed": [], "skipped": [],
             "suites_without_report": []}
    for s in suites:
        c = test_counts(s.get("report"))
        if c is None:
            total["suites_without_report"].append(f"{s.get('suite')} ({s.get('status')})")
            continue
        total["tests"] += c["tests"]
        total["passed"] += c["passed"]
        total["failed"] += c["failed"]
        total["skipped"] += c["skipped"]
    return total


def append_suite(a):
    report = load(a.report) if a.report else None
    with open(a.into, "a") as f:
        f.write(json.dumps({"suite": a.suite, "status": a.suite_status, "seconds": a.seconds,
                            "report": report}) + "\n")
    return 0


def test_counts(report):
    """GoogleTest's JSON report: counts, and the failed and skipped tests' names."""
    if not report:
        return None
    failed, skipped, ran = [], [], 0
    for suite in report.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = f"{suite.get('name')}.{t.get('name')}"
            if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN":
                skipped.append(name)
            elif t.get("failures"):
                failed.append(name)
            else:
                ran += 1
    return {"tests": report.get("tests", 0), "passed": ran, "failed": failed,
            "skipped": skipped}


def medians(entries, key="precision"):
    out = {}
    for e in entries or []:
        if isinstance(e, dict) and e.get("median_samples_per_sec"):
            out[e.get(key)] = e
    return out


def fmt(x, width=10):
    return f"{x:{width}.1f}" if isinstance(x, (int, float)) else f"{'-':>{width}}"


COUNTERS = ("dram_bytes", "achieved_occupancy", "tensor_pipe", "l2_hit_rate", "instructions")


def calibration_summary(cal):
    """The calibrate stage's file: held-out error of its op models, and the counters line."""
    if not isinstance(cal, dict):
        print("  calibration: no result (the calibrate stage did not finish)")
        return None
    ops = [o for o in cal.get("ops", []) if isinstance(o, dict)]
    scored = [o["heldout_mape"] for o in ops
              if isinstance(o.get("heldout_mape"), (int, float)) and o["heldout_mape"] >= 0]
    with_counters = [o.get("key") for o in ops
                     if any(f.get("name") in COUNTERS for f in o.get("features", [])
                            if isinstance(f, dict))]
    out = {"op_models": len(ops), "scored": len(scored),
           "mean_heldout_mape": sum(scored) / len(scored) if scored else None,
           "models_using_counters": with_counters,
           "hardware_counters": cal.get("hardware_counters")}
    mean = out["mean_heldout_mape"]
    print(f"  calibration: {len(ops)} op models, held-out MAPE "
          f"{'%.1f%%' % mean if mean is not None else '-'} mean over {len(scored)}; "
          f"{len(with_counters)} use hardware counters")
    print(f"  hardware counters: {out['hardware_counters']}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--work")
    p.add_argument("--quiet", action="store_true", help="write summary.json only")
    p.add_argument("--suite")
    p.add_argument("--suite-status", choices=["ok", "failed", "timeout", "skipped"])
    p.add_argument("--seconds", type=int, default=0)
    p.add_argument("--report")
    p.add_argument("--into")
    a = p.parse_args()
    if a.suite:
        if not a.suite_status or not a.into:
            p.error("--suite needs --suite-status and --into")
        return append_suite(a)
    if not a.out or not a.work:
        p.error("--out and --work are required")
    if a.quiet:
        sys.stdout = open(os.devnull, "w")
    stages = read_stages(os.path.join(a.out, "stages.tsv"))
    suites = read_suites(os.path.join(a.out, "cuda-tests.jsonl"))
    tests = {"cuda": suites_counts(suites)}
    models = MODELS + sorted(
        {os.path.basename(f)[len("campo-"):-len(".json")]
         for f in glob.glob(os.path.join(a.out, "campo-*.json"))} - set(MODELS))
    rows, raw = [], {"campo": {}, "torch": {}}
    for model in models:
        campo = load(os.path.join(a.out, f"campo-{model}.json"))
        torch = load(os.path.join(a.out, f"torch-{model}.json"))
        if campo is None and torch is None:
            continue
        raw["campo"][model], raw["torch"][model] = campo, torch
        c, t = medians(campo), medians(torch)
        # cost-aware has no PyTorch twin: it is set beside autocast, the policy it must beat.
        for precision, peer in (("fp32", "fp32"), ("amp", "amp"), ("cost-aware", "amp")):
            if precision not in c and precision != peer:
                continue
            cs = c.get(precision, {}).get("median_samples_per_sec")
            ts = t.get(peer, {}).get("median_samples_per_sec")
            rows.append({"model": model, "precision": precision,
                         "batch": (c.get(precision) or t.get(peer) or {}).get("batch"),
                         "campo_samples_per_sec": cs, "torch_samples_per_sec": ts,
                         "campo_over_torch": cs / ts if cs and ts else None,
                         "torch_config": t.get(peer, {}).get("config")})
    machine = next((e.get("machine") for m in raw["campo"].values() for e in (m or [])
                    if isinstance(e, dict) and e.get("machine")), None)
    torch_machine = next((e.get("machine") for m in raw["torch"].values() for e in (m or [])
                          if isinstance(e, dict) and e.get("machine")), None)

    print("== gpu-check summary")
    try:
        with open(os.path.join(a.work, "version.txt")) as f:
            versions = [l.strip() for l in f if l.startswith(("campo ", "cuda"))]
    except OSError:
        versions = ["no version stage output"]
    for line in versions:
        print(f"  {line}")
    for s in stages:
        seconds = f"{s['seconds']:4d}s" if s["seconds"] is not None else "    -"
        print(f"  {s['stage']:<22} {s['status']:<8} {seconds}  {s['note']}")
    for name, t in tests.items():
        if t is None:
            print(f"  {name} tests: no report (not run, or stopped before the end)")
            continue
        print(f"  {name} tests: {t['suites']} suites, {t['tests']} tests, {t['passed']} passed, "
              f"{len(t['failed'])} failed, {len(t['skipped'])} skipped")
        for n in t["suites_without_report"]:
            print(f"    NO REPORT {n}")
        for n in t["failed"][:20]:
            print(f"    FAILED {n}")
        if name == "cuda" and t["skipped"]:
            print(f"    skipped on the GPU machine: {', '.join(t['skipped'][:10])}"
                  f"{' ...' if len(t['skipped']) > 10 else ''}")
    print(f"  campo on: {machine or '-'}; pytorch on: {torch_machine or '-'}")
    print(f"  {'model':<9} {'precision':<10} {'batch':>5} {'campo':>10} {'pytorch':>10} "
          f"{'campo/pt':>8}   (samples/s, medians)")
    for r in rows:
        ratio = f"{r['campo_over_torch']:8.3f}" if r["campo_over_torch"] else f"{'-':>8}"
        print(f"  {r['model']:<9} {r['precision']:<10} {r['batch'] or '-':>5} "
              f"{fmt(r['campo_samples_per_sec'])} {fmt(r['torch_samples_per_sec'])} {ratio}")
    if not rows:
        print("  no benchmark results")
    for model, runs in raw["campo"].items():
        for e in runs or []:
            if isinstance(e, dict) and isinstance(e.get("cuda_graph"), dict):
                g = e["cuda_graph"]
                why = g.get("launched_because")
                print(f"  cuda graph {model} {e.get('precision')}: " +
                      (f"kernel by kernel ({why})" if why else
                       f"replayed ({g.get('captures')} captures, {g.get('replays')} replays)"))
    graph = {}
    for mode in ("on", "off"):
        m = medians(load(os.path.join(a.work, f"graph-{mode}-lenet.json")))
        graph[mode] = (m.get("amp") or {}).get("median_samples_per_sec")
    if graph["on"] and graph["off"]:
        graph["on_over_off"] = graph["on"] / graph["off"]
        print(f"  cuda graph, lenet amp batch 64: replayed {graph['on']:.1f} samples/s, launched "
              f"{graph['off']:.1f}: x{graph['on_over_off']:.3f}")
    else:
        print("  cuda graph, lenet amp: no result (graph-on / graph-off did not finish)")
    calibration = calibration_summary(load(os.path.join(a.work, "calibration.json")))
    summary = {"versions": versions, "stages": stages, "tests": tests, "cuda_suites": suites,
               "rows": rows,
               "campo_machine": machine, "cuda_graph_lenet_amp": graph,
               "calibration": calibration,
               "torch_machine": torch_machine, "runs": raw}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
