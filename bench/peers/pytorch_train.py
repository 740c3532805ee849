#!/usr/bin/env python3
"""The same training job as `campo train` in PyTorch, for side-by-side comparisons.

Same model definitions (mlp, lenet, and torchvision's resnet18 with campo's small-image stem),
data (Fashion-MNIST IDX files, same normalisation, the same bilinear resize for
--image-size), recipe (SGD with momentum 0.9, campo's default lr 0.05 with cosine decay to 0
over the run, per step), batch size and number of steps; --autocast runs forward and loss
under torch.autocast("cpu", torch.bfloat16). Prints one JSON line like campo's:
samples_per_sec over the training loop, test_accuracy.
Runs with Debian's python3-torch (mlp, lenet) or the peers' environment (bench/setup-peers).
"""
import argparse
import gzip
import json
import math
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split, data_dir, limit=0, image_size=0):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    if limit:
        x, y = x[:limit], y[:limit]
    x = torch.from_numpy((x - 0.2860) / 0.3530).unsqueeze(1)
    if image_size and image_size != x.shape[-1]:
        # campo's resize: bilinear, half-pixel centres, no antialiasing.
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    return x, torch.from_numpy(y)


class LeNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(400, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class MLP(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, classes)

    def forward(self, x):
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def resnet18(classes=10):
    """torchvision's resnet18 with campo's small-image stem (models/resnet.cc): a 3x3/1 conv
    on the 1-channel input and no max-pool."""
    import torchvision
    m = torchvision.models.resnet18(num_classes=classes)
    m.conv1 = nn.Conv2d(1, 64, 3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(m.conv1.weight, mode="fan_out", nonlinearity="relu")
    m.maxpool = nn.Identity()
    return m


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="lenet", choices=["lenet", "mlp", "resnet18"])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=0, help="0: --epochs full epochs")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--image-size", type=int, default=0, help="0: the images' own 28")
    p.add_argument("--limit-train", type=int, default=0)
    p.add_argument("--limit-test", type=int, default=0)
    p.add_argument("--autocast", action="store_true", help="bf16 autocast (forward and loss)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load("train", a.data_dir, a.limit_train, a.image_size)
    xte, yte = load("test", a.data_dir, a.limit_test, a.image_size)
    model = {"mlp": MLP, "lenet": LeNet, "resnet18": resnet18}[a.model]()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    steps_per_epoch = len(xtr) // a.batch
    steps = a.steps or steps_per_epoch * a.epochs
    cosine = a.lr_schedule == "cosine"
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))) if cosine else 1.0)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast)
    losses = []
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        i = step % steps_per_epoch
        if i == 0:
            perm = torch.randperm(len(xtr))  # a new order every epoch
        idx = perm[i * a.batch:(i + 1) * a.batch]
        opt.zero_grad(set_to_none=True)
        with autocast:
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    correct = 0
    with torch.no_grad(), autocast:
        for i in range(0, len(xte), 500):
            correct += (model(xte[i:i + 500]).argmax(1) == yte[i:i + 500]).sum().item()
    print(json.dumps({"event": "result", "peer": "pytorch", "torch": torch.__version__,
                      "model": a.model, "steps": steps, "batch": a.batch,
                      "precision": "autocast-bf16" if a.autocast else "fp32",
                      "test_accuracy": correct / len(xte),
                      "final_loss": float(np.mean(losses[-50:])),
                      "samples_per_sec": steps * a.batch / seconds}))


if __name__ == "__main__":
    main()
