#!/usr/bin/env python3
"""The same training job as `campo train` in PyTorch, for side-by-side comparisons.

Same model definitions (mlp, lenet), data (Fashion-MNIST IDX files, same normalisation),
optimizer (SGD with momentum 0.9), batch size, learning rate and number of steps. Prints
one JSON line like campo's: samples_per_sec over the training loop, test_accuracy.
Run with Debian's python3-torch: /usr/bin/python3 bench/peers/pytorch_train.py --model lenet
"""
import argparse
import gzip
import json
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


def load(split, data_dir):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    x = (x - 0.2860) / 0.3530
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="lenet", choices=["lenet", "mlp"])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--steps", type=int, default=0, help="0: one epoch")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load("train", a.data_dir)
    xte, yte = load("test", a.data_dir)
    model = MLP() if a.model == "mlp" else LeNet()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    steps_per_epoch = len(xtr) // a.batch
    steps = a.steps or steps_per_epoch
    perm = torch.randperm(len(xtr))
    losses = []
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        i = step % steps_per_epoch
        idx = perm[i * a.batch:(i + 1) * a.batch]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(xte), 500):
            correct += (model(xte[i:i + 500]).argmax(1) == yte[i:i + 500]).sum().item()
    print(json.dumps({"event": "result", "peer": "pytorch", "torch": torch.__version__,
                      "model": a.model, "steps": steps, "batch": a.batch,
                      "test_accuracy": correct / len(xte),
                      "final_loss": float(np.mean(losses[-50:])),
                      "samples_per_sec": steps * a.batch / seconds}))


if __name__ == "__main__":
    main()
