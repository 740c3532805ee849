#!/usr/bin/env python3
"""The cost of campo train --numerics (docs/mixed-precision.md, "Numerics telemetry").

Runs `campo train` with an FP8/MX precision policy without --numerics and with it (at each
--every), interleaved: each repetition runs every setting once, in an order rotated from one
repetition to the next, so that slow and fast spells of a shared machine fall on all of them.
Every run writes --metrics (so the only difference is --numerics). Prints each setting's median
samples/s and, per --numerics setting, the median over repetitions of its samples/s over the
same repetition's run without (1.00: free; 0.97: 3% slower).

  python3 bench/numerics_cost.py --repeats 7
  python3 bench/numerics_cost.py --model resnet18 --image-size 32 --channels 3 --batch 16 \\
      --steps 20 --repeats 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train(args, every, metrics):
    cmd = [args.campo, "train", "--model", args.model, "--dataset", "synthetic",
           "--batch", str(args.batch), "--steps", str(args.steps),
           "--limit-train", str(args.batch * args.steps), "--limit-test", "32",
           "--progress", "none", "--precision", "amp", "--precision-policy", args.policy,
           "--metrics", metrics]
    if args.image_size:
        cmd += ["--image-size", str(args.image_size), "--channels", str(args.channels)]
    if every:
        cmd += ["--numerics", args.scope, "--numerics-every", str(every)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in reversed(out.splitlines()):
        if line.startswith("{") and '"event":"result"' in line:
            return json.loads(line)["samples_per_sec"]
    sys.exit("no result line from: " + " ".join(cmd))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--campo", default=os.path.join(ROOT, "build", "campo"))
    p.add_argument("--model", default="lenet")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--image-size", type=int, default=0)
    p.add_argument("--channels", type=int, default=3)
    p.add_argument("--policy", default=os.path.join(ROOT, "examples", "fp8-policy.json"))
    p.add_argument("--scope", default="quantized", help="--numerics quantized or all")
    p.add_argument("--every", default="10,1", help="--numerics-every values to time")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    settings = [0] + [int(e) for e in args.every.split(",")]  # 0: without --numerics
    rates = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "m.jsonl")
        for r in range(args.repeats):
            order = settings[r % len(settings):] + settings[:r % len(settings)]
            for s in order:
                rates[s].append(train(args, s, metrics))
    base = rates[0]
    print(f"{args.model} batch {args.batch}, {args.steps} steps, {os.path.basename(args.policy)}, "
          f"{args.repeats} interleaved repetitions (samples/s, median)")
    print(f"  without --numerics: {statistics.median(base):.1f}")
    for s in settings[1:]:
        ratio = statistics.median(w / b for w, b in zip(rates[s], base))
        print(f"  --numerics {args.scope} --numerics-every {s}: {statistics.median(rates[s]):.1f}"
              f"  ({ratio:.3f} of without, median of paired ratios; "
              f"range {min(rates[s]):.1f}..{max(rates[s]):.1f})")


if __name__ == "__main__":
    main()
