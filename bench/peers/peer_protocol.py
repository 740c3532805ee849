"""The lockstep protocol shared by the peer-framework benchmark workers (torch_bench.py,
tf_bench.py); no framework is imported here.

A worker is started once per configuration and kept alive, so that `bench/run` can interleave
repetitions of campo, PyTorch and TensorFlow (A B C A B C ...):
  1. startup: build the model and optimizer, one fixed synthetic batch, run --warmup steps,
     then print ONE JSON line {"ready": true, "framework", "config", "model", "params",
     "threads", "notes"} on stdout;
  2. each stdin line `run`: --steps timed training steps (time.perf_counter around all of
     them, the work finished), then one JSON line {"samples_per_sec", "seconds", "loss"};
  3. EOF or `quit`: exit 0.
Any error before the ready line (a bad option, an unsupported configuration) is one line
`peer-bench: error: <what>` on stderr and exit status 1; so is one after it (an unknown
command, a failed run). Nothing else goes to stdout.
"""
import argparse
import json
import sys
import time

MODELS = ["lenet", "resnet50", "vgg16", "dcgan"]
# campo's defaults for `campo bench` (BenchOptions, OptimizerConfig) and its GAN session
# (GanOptions, gan_optimizer): SGD momentum 0.9 for classifiers, Adam beta1 0.5 for DCGAN.
CLASSIFIER_LR = 1e-3
MOMENTUM = 0.9
GAN_LR = 2e-4
GAN_BETA1 = 0.5
GAN_BETA2 = 0.999
GAN_EPSILON = 1e-8
GAN_NZ = 100  # DcganOptions: nz, ngf, ndf
GAN_NGF = 64
GAN_NDF = 64
BN_EPSILON = 1e-5  # layers::batch_norm's (PyTorch's)
BN_MOMENTUM = 0.1  # PyTorch's convention: running = (1 - m) running + m batch


class PeerError(Exception):
    """An error the worker reports as one `peer-bench: error:` line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise PeerError(message)


def parse_args(configs, argv=None):
    """The workers' command line; `configs` are the values --config accepts."""
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--image-size", type=int, required=True)
    p.add_argument("--channels", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--steps", type=int, required=True, help="timed steps per `run`")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps at startup")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--config", required=True, choices=configs)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--print-params", action="store_true",
                   help="print {\"params\": N} (trainable parameters) and exit")
    a = p.parse_args(argv)
    for name in ("image_size", "channels", "batch", "steps", "threads"):
        if getattr(a, name) < 1:
            raise PeerError(f"--{name.replace('_', '-')} must be positive, got {getattr(a, name)}")
    if a.warmup < 0:
        raise PeerError(f"--warmup must be >= 0, got {a.warmup}")
    if a.classes < 2:
        raise PeerError(f"--classes must be at least 2, got {a.classes}")
    if a.model == "lenet" and a.image_size < 28:
        raise PeerError(f"lenet needs images of at least 28x28, got {a.image_size}")
    if a.model == "vgg16":
        small = is_small_variant(a.image_size)
        side = a.image_size // 32  # the feature map of the imagenet variant (five pools)
        if (small and a.image_size < 16) or (not small and (side < 7 or side % 7 != 0)):
            raise PeerError(f"vgg16 needs 16 to 63 px (small variant) or a feature map whose "
                            f"side is a multiple of 7 (224 px: 7x7); got {a.image_size}")
    if a.model == "dcgan":
        s = a.image_size
        if not (16 <= s <= 256 and s & (s - 1) == 0):
            raise PeerError(f"dcgan image size must be a power of two from 16 to 256, got {s}")
    return a


def is_small_variant(image_size):
    """campo's uses_small_variant with stem "auto" (models/models.cc): images under 64 px
    get ResNet's 3x3 stem without max-pool and VGG's small head."""
    return image_size < 64


def dcgan_stages(image_size):
    """log2(S) - 2 (models/dcgan.cc num_stages): G's ConvTranspose+BN+ReLU layers before its
    last one, D's strided convs before its last one. S = 64 gives 4."""
    stages, s = 0, image_size
    while s > 4:
        stages, s = stages + 1, s // 2
    return stages


LOW_PRECISION_CPU_FLAGS = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16",
                           "amx_fp16", "avx_vnni", "avx512_vnni"]


def cpu_flags():
    """The CPU's bf16- and fp16-relevant instruction sets that Linux reports (/proc/cpuinfo),
    or None when unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return None
    return [w for w in LOW_PRECISION_CPU_FLAGS if w in flags]


def cpu_flags_note():
    have = cpu_flags()
    if have is None:
        return "cpu flags unknown"
    return "cpu: " + (" ".join(have) if have else "none of " + " ".join(LOW_PRECISION_CPU_FLAGS))


def summarize(error):
    """One line for an exception: its type and first message line, and the last line when
    the first only introduces a trace ("in user code:", "backend='inductor' raised:")."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
    text = lines[0]
    if text.endswith(":") and len(lines) > 1:
        text += " ... " + lines[-1]
    return f"{type(error).__name__}: {text}"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(message):
    sys.stderr.write(f"peer-bench: error: {message}\n")
    sys.stderr.flush()
    sys.exit(1)


def serve(ready, run_steps, steps, batch):
    """Prints the ready line, then answers `run` lines until EOF or `quit`.

    run_steps(n) runs n training steps and returns the last loss as a Python float once
    the work is done (it is timed as a whole)."""
    emit(ready)
    for line in iter(sys.stdin.readline, ""):  # one line at a time, no read-ahead
        command = line.strip()
        if command == "quit":
            break
        if command != "run":
            fail(f"unknown command '{command}' on stdin (expected run or quit)")
        start = time.perf_counter()
        try:
            loss = run_steps(steps)
        except Exception as e:
            fail(f"a run failed: {summarize(e)}")
        seconds = time.perf_counter() - start
        emit({"samples_per_sec": batch * steps / seconds, "seconds": seconds, "loss": loss})
    sys.exit(0)
