#!/usr/bin/env python3
"""Checks that the peer workers build the benchmark models with campo's parameter counts.

For each benchmark shape, campo's count is read from the banner of a one-step `campo train`
on the synthetic data set ("training X (N parameters)", dcgan "(G n, D m parameters)"), the
peers' from `--print-params` of torch_bench.py and tf_bench.py. Prints one line per model and
exits 1 when any count differs.
  ~/.cache/campo/peers/bin/python bench/peers/check_params.py [--campo build/campo]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# (model, image size, channels): the benchmark shapes, and ResNet-50's imagenet stem.
SHAPES = [("lenet", 28, 1), ("resnet50", 32, 3), ("vgg16", 32, 3), ("dcgan", 64, 3),
          ("resnet50", 224, 3)]


def campo_params(campo, model, size, channels, workdir):
    cmd = [campo, "train", "--model", model, "--dataset", "synthetic", "--image-size", str(size),
           "--channels", str(channels), "--steps", "1", "--batch", "2", "--limit-train", "2",
           "--precision", "fp32", "--threads", "1", "--progress", "none"]
    if model == "dcgan":  # no evaluation; a sample grid instead
        cmd += ["--samples-dir", os.path.join(workdir, "samples")]
    else:
        cmd += ["--limit-test", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir)
    log = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"check_params: {' '.join(cmd)} failed: {log.strip().splitlines()[-1:]}")
    gan = re.search(r"\(G (\d+), D (\d+) parameters\)", log)
    if gan:
        return int(gan.group(1)) + int(gan.group(2))
    plain = re.search(r"\((\d+) parameters\)", log)
    if not plain:
        sys.exit(f"check_params: no parameter count in the output of {' '.join(cmd)}")
    return int(plain.group(1))


def peer_params(worker, model, size, channels):
    cmd = [sys.executable, os.path.join(HERE, worker), "--model", model, "--image-size",
           str(size), "--channels", str(channels), "--batch", "1", "--steps", "1",
           "--threads", "1", "--config", "fp32", "--print-params"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"check_params: {worker} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)["params"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--campo", default=os.path.join(HERE, "..", "..", "build", "campo"))
    a = p.parse_args()
    if not os.access(a.campo, os.X_OK):
        sys.exit(f"check_params: {a.campo} is not an executable campo binary; build campo or "
                 f"give --campo")
    ok = True
    with tempfile.TemporaryDirectory() as workdir:
        for model, size, channels in SHAPES:
            counts = {"campo": campo_params(os.path.abspath(a.campo), model, size, channels,
                                            workdir),
                      "pytorch": peer_params("torch_bench.py", model, size, channels),
                      "tensorflow": peer_params("tf_bench.py", model, size, channels)}
            same = len(set(counts.values())) == 1
            ok &= same
            print(f"{model:9s} {size:3d} px x{channels}: " +
                  ", ".join(f"{k} {v}" for k, v in counts.items()) +
                  ("" if same else "  MISMATCH"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
