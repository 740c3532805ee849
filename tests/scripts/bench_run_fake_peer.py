#!/usr/bin/env python3
"""A stand-in for bench/peers/torch_bench.py and tf_bench.py in tests/scripts/bench_run_test.py:
the workers' command line (peer_protocol.parse_args, every configuration of bench/run.py's
PEER_CONFIGS) and lockstep protocol (peer_protocol.serve), with no framework. Copied into a
folder as torch_bench.py or tf_bench.py; its file name says which framework it plays.

A step sleeps batch / RATE seconds, so samples/s comes out near RATE (the table below: low
enough that a step sleeps tens of milliseconds, so that a loaded machine's scheduling delays
cannot reorder the configurations);
"autocast fp16 channels_last" refuses to start with one line, as torch_bench.py does where
torch's CPU autocast has no float16.
"""
import os
import sys
import time

BENCH = os.environ["BENCH_RUN_TEST_BENCH_DIR"]  # the source tree's bench/
sys.path.insert(0, os.path.join(BENCH, "peers"))
sys.path.insert(0, BENCH)
from peer_protocol import fail, parse_args, serve  # noqa: E402
from run import PEER_CONFIGS  # noqa: E402

FRAMEWORK = "pytorch" if os.path.basename(__file__).startswith("torch") else "tensorflow"
# samples/s: pytorch compile+autocast channels_last is the strongest peer, the strongest
# fp32 peer is a compiled channels_last one (a name not ending in "fp32").
RATES = {
    "pytorch": {"fp32": 125, "fp32 channels_last": 175, "autocast": 100,
                "autocast channels_last": 225, "compile": 200, "compile channels_last": 250,
                "compile+autocast channels_last": 500},
    "tensorflow": {"fp32": 150, "grappler-amp": 75, "mixed-bfloat16": 300},
}


def main():
    a = parse_args(list(PEER_CONFIGS[FRAMEWORK][1]))
    if a.config == "autocast fp16 channels_last":
        fail(f"{a.config}: torch 0.0-fake's CPU autocast does not run float16 (a matmul under "
             f"it came out torch.float32)")
    rate = RATES[FRAMEWORK][a.config]

    def run_steps(n):
        time.sleep(n * a.batch / rate)
        return 2.3

    for _ in range(a.warmup):
        run_steps(1)
    serve({"ready": True, "framework": f"{FRAMEWORK} fake", "config": a.config,
           "model": a.model, "params": 1, "threads": a.threads, "notes": "fake"},
          run_steps, a.steps, a.batch)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # parse_args's PeerError, as the real workers report it
        fail(str(e))
