#!/usr/bin/env python3
"""`campo bench --device cuda`'s training job in PyTorch on a GPU, for scripts/gpu-check:

  python3 bench/peers/torch_gpu.py --model resnet50 --image-size 224 --channels 3 \\
      --classes 1000 --batch 128 --configs fp32,autocast --steps 5 --warmup 2 --repeats 3 \\
      --json torch-resnet50.json

writes a JSON array like campo bench's --json: one entry per configuration, with
"precision" fp32 or amp (the campo policy it pairs with), "samples_per_sec" per repetition
and their median. --dry-run checks the options and prints the plan without importing torch.

The job is torch_bench.py's (the CPU comparison's worker, whose model definitions are imported
from there: VGG-16 and the DCGAN networks built after models/vgg.cc and models/dcgan.cc,
ResNet-50 from torchvision), moved to the device:
  fp32      eager, float32, cudnn.benchmark on (its algorithms chosen by measurement, as
            campo's; --no-cudnn-benchmark for PyTorch's default); otherwise PyTorch's
            defaults: convolutions may use TF32 (cudnn.allow_tf32's default), matrix products
            do not (campo uses no TF32 at all); all of it is recorded.
  autocast  eager, torch.autocast("cuda", torch.float16) around the forward passes and the
            losses, with a GradScaler (dynamic loss scaling): campo's amp on cuda (fp16 with
            dynamic loss scaling, tools/cli.cc's defaults). On --device cpu: bfloat16 and no
            scaler, as torch_bench.py.
One fixed synthetic batch (N(0, 1) inputs, uniform labels), mean softmax cross-entropy, SGD
momentum 0.9 lr 1e-3; dcgan: D step then G step, Adam lr 2e-4 beta1 0.5, fresh z each
iteration (torch_bench.Worker._gan_step). The configurations are built side by side, warmed
up, then timed in interleaved repetitions (A B A B ...), like campo bench; each repetition is
--steps steps between two device synchronizations.
"""
import argparse
import json
import math
import statistics
import sys
import time

from peer_protocol import (CLASSIFIER_LR, GAN_BETA1, GAN_BETA2, GAN_EPSILON, GAN_LR, GAN_NZ,
                           MOMENTUM, PeerError, is_small_variant)
from peer_protocol import parse_args as peer_parse_args

CONFIGS = {"fp32": "fp32", "autocast": "amp"}  # configuration -> the campo policy it pairs with


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=["resnet50", "vgg16", "dcgan"])
    p.add_argument("--image-size", type=int, required=True)
    p.add_argument("--channels", type=int, default=3)
    p.add_argument("--classes", type=int, default=1000, help="classifiers only")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--configs", default="fp32,autocast",
                   help="comma-separated: " + ", ".join(CONFIGS))
    p.add_argument("--steps", type=int, default=5, help="timed steps per repetition")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per configuration")
    p.add_argument("--repeats", type=int, default=3, help="interleaved repetitions")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--no-cudnn-benchmark", dest="cudnn_benchmark", action="store_false",
                   help="leave torch.backends.cudnn.benchmark at PyTorch's default (off)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--dry-run", action="store_true",
                   help="check the options, print the plan, import no torch")
    a = p.parse_args(argv)
    a.configs = [c for c in a.configs.split(",") if c]
    for c in a.configs:
        if c not in CONFIGS:
            p.error(f"unknown configuration '{c}' (expected {', '.join(CONFIGS)})")
    if not a.configs:
        p.error("--configs needs at least one configuration")
    for name in ("steps", "repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name} must be positive, got {getattr(a, name)}")
    # The shape rules of the CPU comparison's workers (vgg16's sizes, dcgan's powers of two).
    try:
        peer_parse_args(["fp32"], [
            "--model", a.model, "--image-size", str(a.image_size), "--channels", str(a.channels),
            "--batch", str(a.batch), "--classes", str(a.classes), "--steps", str(a.steps),
            "--warmup", str(a.warmup), "--threads", "1", "--config", "fp32"])
    except PeerError as e:
        p.error(str(e))
    return a


class Run:
    """One configuration: its networks, optimizers, loss scalers and fixed inputs on the
    device (torch_bench.Worker's job, on --device)."""

    def __init__(self, a, config, torch, device):
        import torch.nn as nn
        import torch_bench
        self.a, self.config, self.torch, self.device = a, config, torch, device
        torch.manual_seed(a.seed)
        low = torch.float16 if device.type == "cuda" else torch.bfloat16
        self.low = low if config == "autocast" else None
        scaled = config == "autocast" and low == torch.float16

        def scaler():
            return torch.amp.GradScaler(device.type, enabled=scaled)

        def autocast():
            return torch.autocast(device.type, dtype=low, enabled=config == "autocast")

        self.autocast = autocast
        if a.model == "dcgan":
            self.g, self.d = (net.to(device).train()
                              for net in torch_bench.build_dcgan(nn, a.channels, a.image_size))
            self.params = sum(p.numel() for net in (self.g, self.d) for p in net.parameters())

            def adam(net):
                return torch.optim.Adam(net.parameters(), lr=GAN_LR,
                                        betas=(GAN_BETA1, GAN_BETA2), eps=GAN_EPSILON)

            self.g_optimizer, self.d_optimizer = adam(self.g), adam(self.d)
            self.g_scaler, self.d_scaler = scaler(), scaler()
            self.g_params = list(self.g.parameters())
            self.real = torch.rand(a.batch, a.channels, a.image_size, a.image_size,
                                   device=device) * 2 - 1
            self.ones = torch.ones(a.batch, device=device)
            self.zeros = torch.zeros(a.batch, device=device)
            self.step = self._gan_step
        else:
            if a.model == "resnet50":
                import torchvision  # a missing torchvision fails this model alone
                model = torch_bench.build_resnet50(nn, torchvision, a.channels, a.image_size,
                                                   a.classes)
            else:
                model = torch_bench.build_vgg16(nn, a.channels, a.image_size, a.classes)
            self.model = model.to(device).train()
            self.params = sum(p.numel() for p in model.parameters() if p.requires_grad)
            self.optimizer = torch.optim.SGD(model.parameters(), lr=CLASSIFIER_LR,
                                             momentum=MOMENTUM)
            self.scaler = scaler()
            self.x = torch.randn(a.batch, a.channels, a.image_size, a.image_size, device=device)
            self.y = torch.randint(0, a.classes, (a.batch,), device=device)
            self.step = self._classifier_step

    def _classifier_step(self):
        import torch.nn.functional as F
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = F.cross_entropy(self.model(self.x), self.y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss

    def _gan_step(self):
        import torch.nn.functional as F
        torch = self.torch
        bce = F.binary_cross_entropy_with_logits
        z = torch.randn(self.a.batch, GAN_NZ, 1, 1, device=self.device)
        self.d_optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            fake = self.g(z)
            loss_d = (bce(self.d(self.real).view(-1), self.ones) +
                      bce(self.d(fake.detach()).view(-1), self.zeros))
        self.d_scaler.scale(loss_d).backward()
        self.d_scaler.step(self.d_optimizer)
        self.d_scaler.update()
        self.g_optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss_g = bce(self.d(fake).view(-1), self.ones)
        self.g_scaler.scale(loss_g).backward(inputs=self.g_params)
        self.g_scaler.step(self.g_optimizer)
        self.g_scaler.update()
        return loss_d

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def run_steps(self, n):
        """n steps; the seconds from the work before them finished to theirs finished, and
        the last loss."""
        self.sync()
        start = time.perf_counter()
        loss = None
        for _ in range(n):
            loss = self.step()
        self.sync()
        seconds = time.perf_counter() - start
        return seconds, float(loss.item())


def backend_notes(torch, device):
    """PyTorch's settings that change the fp32 numbers (TF32, cuDNN autotuning), as found;
    None where this version lacks one (newer ones have fp32_precision, older allow_tf32)."""
    import warnings
    getters = {
        "cudnn_benchmark": lambda: torch.backends.cudnn.benchmark,
        "cudnn_allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
        "matmul_fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
        "cudnn_conv_fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
        "cudnn_version": lambda: torch.backends.cudnn.version() if device.type == "cuda" else None,
    }
    notes = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecated allow_tf32 getters warn
        for key, get in getters.items():
            try:
                notes[key] = get()
            except Exception:
                notes[key] = None
    return notes


def main():
    a = parse_args()
    plan = (f"torch_gpu: {a.model}, batch {a.batch}, input [{a.channels},{a.image_size},"
            f"{a.image_size}], configs {','.join(a.configs)}, {a.warmup} warm-up + {a.steps} "
            f"steps x {a.repeats} interleaved repetitions on {a.device}")
    if a.dry_run:
        print(plan + " (dry run: nothing built)")
        return 0
    import torch
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("torch_gpu: error: torch sees no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cudnn.benchmark = a.cudnn_benchmark
    print(plan, flush=True)
    device_name = (torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu")
    runs, results = {}, []
    for config in a.configs:
        try:
            runs[config] = Run(a, config, torch, device)
            for _ in range(a.warmup):
                runs[config].step()
            runs[config].sync()
        except Exception as e:  # one line per configuration; the others still run
            print(f"torch_gpu: {a.model} {config}: error: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)
            runs.pop(config, None)
    speeds = {c: [] for c in runs}
    losses = {c: None for c in runs}
    for _ in range(a.repeats):
        for config, run in list(runs.items()):
            try:
                seconds, losses[config] = run.run_steps(a.steps)
            except Exception as e:  # e.g. out of memory: that configuration stops
                print(f"torch_gpu: {a.model} {config}: error in a timed run: "
                      f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
                runs.pop(config)
                continue
            speeds[config].append(a.batch * a.steps / seconds)
    notes = backend_notes(torch, device)
    for config, run in runs.items():
        median = statistics.median(speeds[config])
        results.append({
            "framework": f"pytorch {torch.__version__}", "machine": device_name,
            "model": a.model, "config": config, "precision": CONFIGS[config],
            "low_precision": str(run.low).replace("torch.", "") if run.low else None,
            "loss_scaling": config == "autocast" and run.low == torch.float16,
            "batch": a.batch, "image_size": a.image_size, "channels": a.channels,
            "params": run.params, "steps": a.steps, "warmup": a.warmup,
            "samples_per_sec": speeds[config], "median_samples_per_sec": median,
            "last_loss": losses[config], "loss_finite": math.isfinite(losses[config]),
            "small_variant": is_small_variant(a.image_size) if a.model != "dcgan" else None,
            **notes})
        print(f"torch_gpu: {a.model:8} {config:9} {median:9.1f} samples/s "
              f"({min(speeds[config]):.1f}-{max(speeds[config]):.1f}), last loss "
              f"{losses[config]:.4g}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        print(f"wrote {a.json}")
    return 0 if len(runs) == len(a.configs) else 1


if __name__ == "__main__":
    sys.exit(main())
