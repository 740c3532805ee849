#!/usr/bin/env python3
"""Makes this folder's extract of NeuSight's published GPU kernel measurements (README.md):
one CSV per op family, one row per shape, one column of measured ms per GPU, and
devices.json, NeuSight's configuration of each GPU in campo's device-table format.

  python3 bench/data/neusight/extract.py --git-dir NEUSIGHT.git [--commit SHA] [--out DIR]

--git-dir is a clone (or bare mirror) of github.com/trsharm25/NeuSight; files are read with
`git show COMMIT:PATH`, so no work tree is needed. The output is deterministic: rows sorted by
(op, shape), the convolution shapes sampled by a fixed stride over that order, latencies
written with 6 significant digits. Uses only the Python standard library.
"""
import argparse
import csv
import io
import json
import os
import subprocess

COMMIT = "db1fdc966633fe96c0717e0706e7621ad0921ed2"
DATA = "scripts/asplos/data"
TEST = DATA + "/dataset/test"
CONV = DATA + "/dataset/train/collect/conv/p2.1.0"

# NeuSight's device name (its CSVs' Device column) -> (campo name, NeuSight's config file).
DEVICES = {
    "Tesla P4": ("p4", "Tesla_P4.json"),
    "Tesla P100-PCIE-16GB": ("p100-pcie-16gb", "Tesla_P100-PCIE-16GB.json"),
    "Tesla T4": ("t4", "Tesla_T4.json"),
    "Tesla V100-PCIE-32GB": ("v100-pcie-32gb", "Tesla_V100-PCIE-32GB.json"),
    "NVIDIA A100-PCIE-40GB": ("a100-pcie-40gb", "NVIDIA_A100-PCIE-40GB.json"),
    "NVIDIA A100 80GB PCIe": ("a100-pcie-80gb", "NVIDIA_A100_80GB_PCIe.json"),
    "NVIDIA L4": ("l4", "NVIDIA_L4.json"),
    "NVIDIA H100 80GB HBM3": ("h100-sxm5-80gb", "NVIDIA_H100_80GB_HBM3.json"),
}
FULL_NAMES = {
    "p4": "NVIDIA Tesla P4", "p100-pcie-16gb": "NVIDIA Tesla P100 PCIe 16 GB",
    "t4": "NVIDIA Tesla T4", "v100-pcie-32gb": "NVIDIA Tesla V100 PCIe 32 GB",
    "a100-pcie-40gb": "NVIDIA A100 PCIe 40 GB", "a100-pcie-80gb": "NVIDIA A100 PCIe 80 GB",
    "l4": "NVIDIA L4", "h100-sxm5-80gb": "NVIDIA H100 80 GB HBM3 (SXM5)",
}

# family: (source CSVs, shape columns as NeuSight names them, as this extract names them).
FAMILIES = {
    "bmm": ([TEST + "/bmm.csv"], ["B", "M", "N", "K"], ["B", "M", "N", "K"]),
    "linear": ([TEST + "/linear.csv"], ["B", "M", "N", "K"], ["B", "M", "N", "K"]),
    # vec.csv: the element-wise ops, layer norm and softmax (NeuSight's test set).
    "vec": ([TEST + "/vec.csv"], ["B", "H"], ["B", "H"]),
    "conv": ([CONV + "/" + d + ".csv" for d in ("Tesla P4", "Tesla P100-PCIE-16GB", "Tesla T4",
                                                 "Tesla V100-PCIE-32GB", "NVIDIA A100 80GB PCIe")],
             ["B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride",
              "Padding"],
             ["B", "C", "O", "KS", "S", "stride", "pad"]),
}
# Convolutions: NeuSight measured about 5,000 random shapes on each of five GPUs; 2,000 of
# those measured on all five keep the extract small.
CONV_SHAPES = 2000


def git_show(args, path):
    return subprocess.run(["git", "--git-dir", args.git_dir, "show", f"{args.commit}:{path}"],
                          check=True, capture_output=True, text=True).stdout


def read_family(args, family):
    paths, columns, names = FAMILIES[family]
    rows = {}  # (op, shape) -> {device: ms}; a shape measured twice keeps its first time
    for path in paths:
        for r in csv.DictReader(io.StringIO(git_show(args, path))):
            if r["Device"] not in DEVICES:
                continue
            key = (r["OPName"],) + tuple(int(r[c]) for c in columns)
            rows.setdefault(key, {}).setdefault(DEVICES[r["Device"]][0], float(r["Latency"]))
    keys = sorted(rows)
    if family == "conv":
        full = [k for k in keys if len(rows[k]) == len(paths)]
        stride = len(full) / CONV_SHAPES
        keys = [full[int(i * stride)] for i in range(CONV_SHAPES)]
    return names, keys, rows


def device_table(args):
    devices = []
    for neusight_name, (name, config) in DEVICES.items():
        path = DATA + "/device_configs/" + config
        c = json.loads(git_show(args, path))
        devices.append({
            "name": name, "kind": "gpu", "full_name": FULL_NAMES[name],
            "units": c["Num_Sm"], "clock_mhz": c["Freq"],
            "peak_gflops": {"f32": c["SingleFLOPs"]}, "memory_gbs": c["Mem_Bw"],
            "source": f"NeuSight (github.com/trsharm25/NeuSight, commit {args.commit[:12]}) "
                      f"{path}: Num_Sm {c['Num_Sm']}, Freq {c['Freq']} MHz, SingleFLOPs "
                      f"{c['SingleFLOPs']} GFLOP/s, Mem_Bw {c['Mem_Bw']} GB/s; the GPU its "
                      f"measurements name '{neusight_name}'"})
    return {"about": "The GPUs of NeuSight's kernel measurements as NeuSight configures them "
                     "(bench/data/neusight/README.md), in campo's device-table format "
                     "(campo predict --devices). f32 only: the measurements are fp32 kernels "
                     "(TF32 off).",
            "devices": devices}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--git-dir", required=True, help="a clone or mirror of trsharm25/NeuSight")
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    order = [name for name, _ in DEVICES.values()]
    for family in FAMILIES:
        names, keys, rows = read_family(args, family)
        with open(os.path.join(args.out, family + ".csv"), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["op"] + names + order)
            for key in keys:
                w.writerow(list(key) + [f"{rows[key][d]:.6g}" if d in rows[key] else ""
                                        for d in order])
        print(f"{family}: {len(keys)} shapes")
    with open(os.path.join(args.out, "devices.json"), "w") as f:
        json.dump(device_table(args), f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
