#!/usr/bin/env python3
"""A stand-in for `campo bench --lockstep` in tests/scripts/bench_run_test.py: the ready line,
one {"samples_per_sec": {policy: value}} line per `run` (fixed values: campo reports its own
figures, so the test knows them), and on `quit` the --json file bench/run reads (one entry per
policy, as perf/bench.cc writes it, trimmed to what bench/run uses)."""
import argparse
import json
import sys

SAMPLES_PER_SEC = {"fp32": 375.0, "amp": 625.0, "cost-aware": 750.0}  # the peers' rates / 4


def main():
    p = argparse.ArgumentParser()
    assert sys.argv[1] == "bench", sys.argv
    for flag in ("--model", "--image-size", "--channels", "--batch", "--steps", "--warmup",
                 "--precision", "--json"):
        p.add_argument(flag, required=True)
    p.add_argument("--lockstep", action="store_true", required=True)
    a = p.parse_args(sys.argv[2:])
    policies = a.precision.split(",")
    print(json.dumps({"ready": True, "framework": "campo fake", "model": a.model,
                      "precisions": policies, "params": 1}), flush=True)
    runs = 0
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        assert line.strip() == "run", line
        runs += 1
        print(json.dumps({"samples_per_sec": {q: SAMPLES_PER_SEC[q] for q in policies}}),
              flush=True)
    with open(a.json, "w") as f:
        json.dump([{"precision": q, "casts": 7 if q != "fp32" else 0, "folded_casts": 1,
                    "samples_per_sec": [SAMPLES_PER_SEC[q]] * runs} for q in policies], f)


if __name__ == "__main__":
    main()
