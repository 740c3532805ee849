#!/usr/bin/env python3
"""Convert between campo checkpoints (safetensors) and PyTorch state_dict files.

  safetensors_torch.py to-torch   campo.safetensors model.pt [--prefix netG.]
  safetensors_torch.py from-torch model.pt [more.pt ...] campo.safetensors [--prefix P ...]
  safetensors_torch.py self-test

campo names its variables as torchvision's state_dict does ("layer1.0.conv1.weight",
"bn1.running_mean", "bn1.num_batches_tracked"), so to-torch output loads with
`model.load_state_dict(torch.load(path))`. campo's optimizer state sits under "optimizer."
("optimizer.<param>.momentum_buffer", ".exp_avg", ".exp_avg_sq"; checkpoints of format
version 1 kept it beside the parameters) and is dropped by to-torch; a file written by
from-torch has none, and campo loads it with missing optimizer state allowed.

from-torch never unpickles arbitrary objects: a .pt file is a pickle, and the full
unpickler runs whatever code the file names. Files are read with
torch.load(weights_only=True) (torch >= 1.13), which accepts tensors, dicts, lists and
numbers only; anything else (a pickled nn.Module, custom classes) is refused, and so is
every file under a torch too old to have weights_only. Re-save such a file as a plain
state_dict with `torch.save(model.state_dict(), "model.pt")`.

DCGAN: campo keeps both networks in one file under "netG." / "netD."; the PyTorch example
saves each network separately without the prefix:
  to-torch   ck.safetensors netG.pt --prefix netG.
  from-torch netG.pt netD.pt ck.safetensors --prefix netG. --prefix netD.

Debian ships no `safetensors` package, so the format is read and written here with json and
struct: u64 little-endian header length N, N bytes of JSON header (space-padded to a multiple
of 8), then the data section; each tensor's "data_offsets" [begin, end) is relative to the
data section, and the tensors tile it exactly. The header key "__metadata__" holds the
metadata, so a tensor of that name cannot be stored: from-torch refuses it (rename the key,
or give a --prefix).
"""

import argparse
import collections
import inspect
import json
import os
import pickle
import stat
import struct
import sys
import tempfile

try:
    import torch
except ImportError as e:
    raise SystemExit(f"safetensors_torch: PyTorch is not installed for {sys.executable} "
                     f"({e}); install it (pip install torch) or run this script with a Python "
                     f"that has it")

# safetensors dtype name <-> torch dtype (the subset torch has)
DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}
NAMES = {v: k for k, v in DTYPES.items()}
OPTIMIZER_PREFIX = "optimizer."  # campo checkpoints from format version 2 on
V1_OPTIMIZER_STATE_SUFFIXES = (".momentum_buffer", ".exp_avg", ".exp_avg_sq")
RESAVE_HINT = 're-save it as a plain state_dict: torch.save(model.state_dict(), "model.pt")'
MAX_HEADER = 100_000_000
METADATA_KEY = "__metadata__"  # the header's metadata; no tensor may have this name


def fail(msg):
    raise SystemExit(f"safetensors_torch: {msg}")


def first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def element_size(dtype):
    return torch.empty((), dtype=dtype).element_size()


def read_safetensors(path):
    """Returns (OrderedDict name -> tensor in header order, metadata dict); validates the file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8 or n > MAX_HEADER:
        fail(f"{path}: header length {n} does not fit the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8 : 8 + n].decode("utf-8"), object_pairs_hook=collections.OrderedDict)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: header is not valid JSON: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: header is not a JSON object")
    data = memoryview(blob)[8 + n :]
    metadata = header.pop("__metadata__", {}) or {}
    spans = []
    tensors = collections.OrderedDict()
    for name, e in header.items():
        try:
            dtype = DTYPES.get(e["dtype"])
            shape = [int(d) for d in e["shape"]]
            begin, end = (int(x) for x in e["data_offsets"])
        except (KeyError, TypeError, ValueError):
            fail(f"{path}: malformed header entry for '{name}': {e!r}")
        if dtype is None:
            fail(f"{path}: tensor '{name}' has dtype {e['dtype']!r}, not supported here")
        if any(d < 0 for d in shape):
            fail(f"{path}: tensor '{name}' has a negative dimension in {shape}")
        numel = 1
        for d in shape:
            numel *= d
        if end - begin != numel * element_size(dtype) or not 0 <= begin <= end <= len(data):
            fail(f"{path}: tensor '{name}' has inconsistent data_offsets {[begin, end]}")
        spans.append((begin, end, name))
        if numel == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
        else:
            # bytearray: a private, writable copy the tensor may keep
            t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype)
            tensors[name] = t.reshape(shape)
    covered = 0
    for begin, end, name in sorted(spans):
        if begin != covered:
            fail(f"{path}: tensor '{name}' starts at {begin}, expected {covered} (gap or overlap)")
        covered = end
    if covered != len(data):
        fail(f"{path}: tensors cover {covered} of {len(data)} data bytes")
    return tensors, metadata


def current_umask():
    """The process umask, read without changing it where Linux says it (/proc)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # this script has one thread: set and restore at once
    os.umask(mask)
    return mask


def write_atomically(dst, write):
    """write(f) fills a new file next to dst, which then replaces dst in one rename: a failed
    conversion or a full disk leaves an existing dst as it was, and no half-written file.
    The file gets the mode a plain open() would give it: an existing dst's permission bits,
    else 0666 less the umask (mkstemp creates 0600)."""
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(dst) + ".", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(dst)))
    try:
        try:
            st = os.lstat(dst)
            mode = st.st_mode & 0o777 if stat.S_ISREG(st.st_mode) else None
        except FileNotFoundError:
            mode = None
        os.fchmod(fd, 0o666 & ~current_umask() if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def tensor_bytes(t):
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: same-size reinterpretation
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """tensors: name -> tensor, written in this header order; data laid out 8-byte types
    first so every tensor is aligned to its element size (as campo and the reference do)."""
    items = list(tensors.items())
    for name, t in items:  # every tensor checked before anything is written
        if name == METADATA_KEY:
            fail(f"a tensor is named '{METADATA_KEY}', which the safetensors format reserves "
                 f"for the header's metadata (the file could not be read); rename it in the "
                 f"state_dict first")
        if getattr(t, "is_quantized", False):
            fail(f"tensor '{name}' is quantized ({t.dtype}); safetensors holds plain tensors: "
                 f"dequantize it first (t.dequantize())")
        layout = getattr(t, "layout", None)
        if layout is not None and layout != getattr(torch, "strided", layout):
            fail(f"tensor '{name}' has layout {layout}; safetensors holds dense tensors: "
                 f"convert it first (t.to_dense())")
        if t.dtype not in NAMES:
            fail(f"tensor '{name}' has dtype {t.dtype}, which safetensors_torch cannot write")
    order = sorted(range(len(items)), key=lambda i: -items[i][1].element_size())  # stable
    offsets, pos = {}, 0
    for i in order:
        size = items[i][1].numel() * items[i][1].element_size()
        offsets[i] = (pos, pos + size)
        pos += size
    header = collections.OrderedDict()
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for i, (name, t) in enumerate(items):
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": list(offsets[i])}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    def write(f):
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for i in order:
            f.write(tensor_bytes(items[i][1]))

    write_atomically(path, write)


def load_torch(path):
    """The state_dict in a .pt file, read with the restricted unpickler only: the full one
    would run any code a crafted file names, so a file it refuses is refused here too."""
    if "weights_only" not in inspect.signature(torch.load).parameters:
        fail(f"{path}: torch {torch.__version__} cannot load a file without running the code "
             f"it may hold (torch.load has no weights_only, added in 1.13); upgrade torch")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # the restricted unpickler met something else
        fail(f"{path}: refused: it holds more than tensors and plain containers (loading it "
             f"would run code from the file: {first_line(e)}); {RESAVE_HINT}")
    except OSError:
        raise
    except Exception as e:  # a damaged or foreign file; still nothing unpickled in full
        fail(f"{path}: cannot read it as a torch file ({type(e).__name__}: {first_line(e)})")
    for key in ("state_dict", "model_state_dict", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        fail(f"{path}: not a state_dict (a dict of tensors); {RESAVE_HINT}")
    return obj


def is_optimizer_state(name, metadata):
    if metadata.get("campo.format_version") == "1":
        return name.endswith(V1_OPTIMIZER_STATE_SUFFIXES)
    return name.startswith(OPTIMIZER_PREFIX)


def to_torch(src, dst, prefix=""):
    tensors, metadata = read_safetensors(src)
    state = collections.OrderedDict()
    for name, t in tensors.items():
        if is_optimizer_state(name, metadata):
            continue
        if prefix:
            if not name.startswith(prefix):
                continue
            name = name[len(prefix) :]
        state[name] = t
    if not state:
        fail(f"{src}: no model tensors" + (f" under prefix '{prefix}'" if prefix else ""))
    write_atomically(dst, lambda f: torch.save(state, f))
    return state


def from_torch(srcs, dst, prefixes=None):
    prefixes = prefixes or [""] * len(srcs)
    if len(prefixes) != len(srcs):
        fail(f"{len(srcs)} inputs but {len(prefixes)} --prefix values")
    out = collections.OrderedDict()
    for src, prefix in zip(srcs, prefixes):
        for name, t in load_torch(src).items():
            if (prefix + name).startswith(OPTIMIZER_PREFIX):
                fail(f"{src}: tensor '{prefix + name}': campo checkpoints reserve the prefix "
                     f"'{OPTIMIZER_PREFIX}' for optimizer state; rename the module")
            if prefix + name == METADATA_KEY:
                fail(f"{src}: tensor '{METADATA_KEY}': the safetensors format reserves this "
                     f"name for the header's metadata; rename the key in the state_dict, or "
                     f"give a --prefix")
            if prefix + name in out:
                fail(f"tensor '{prefix + name}' appears twice")
            out[prefix + name] = t
    write_safetensors(dst, out, {"format": "pt"})
    return out


def self_test():
    """torchvision resnet18 -> state_dict -> safetensors -> state_dict: names, shapes, dtypes
    and bytes survive both ways, and the result loads strictly into a fresh model."""
    import os
    import tempfile

    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    model.train()
    model(torch.randn(2, 3, 64, 64))  # moves running stats and num_batches_tracked off defaults
    state = model.state_dict()
    with tempfile.TemporaryDirectory() as d:
        pt, st, back = (os.path.join(d, n) for n in ("m.pt", "m.safetensors", "back.pt"))
        torch.save(state, pt)
        from_torch([pt], st)
        tensors, metadata = read_safetensors(st)
        assert list(tensors) == list(state), "names or order differ"
        for name, t in state.items():
            u = tensors[name]
            assert u.dtype == t.dtype and u.shape == t.shape, name
            assert tensor_bytes(u) == tensor_bytes(t), name
        with open(st, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
        assert (8 + n) % 8 == 0
        to_torch(st, back)
        fresh = torchvision.models.resnet18()
        fresh.load_state_dict(torch.load(back), strict=True)
        for name, t in fresh.state_dict().items():
            assert torch.equal(t, state[name]), name
        # optimizer state is dropped; a prefix selects and strips one network
        extra = collections.OrderedDict(("netG." + k, v) for k, v in state.items())
        extra["optimizer.netG.fc.weight.momentum_buffer"] = torch.zeros_like(state["fc.weight"])
        write_safetensors(st, extra)
        assert list(to_torch(st, back, prefix="netG.")) == list(state)
        # a format-1 campo file kept optimizer state beside the parameters
        extra = collections.OrderedDict(state)
        extra["fc.weight.momentum_buffer"] = torch.zeros_like(state["fc.weight"])
        write_safetensors(st, extra, {"campo.format_version": "1"})
        assert list(to_torch(st, back)) == list(state)
    print(f"self-test passed: resnet18, {len(state)} tensors "
          f"({sum(t.numel() for t in state.values())} elements) round trip bit-exact")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("to-torch", help="campo .safetensors -> torch state_dict (.pt)")
    a.add_argument("src")
    a.add_argument("dst")
    a.add_argument("--prefix", default="", help="keep only tensors under this prefix, stripped")
    b = sub.add_parser("from-torch", help="torch state_dict(s) (.pt) -> campo .safetensors")
    b.add_argument("srcs", nargs="+")
    b.add_argument("dst")
    b.add_argument("--prefix", action="append", help="prefix for each input's names, in order")
    sub.add_parser("self-test", help="round-trip a torchvision resnet18 (needs torchvision)")
    args = p.parse_args(argv)
    if args.cmd == "to-torch":
        state = to_torch(args.src, args.dst, args.prefix)
        print(f"wrote {args.dst}: {len(state)} tensors")
    elif args.cmd == "from-torch":
        out = from_torch(args.srcs, args.dst, args.prefix)
        print(f"wrote {args.dst}: {len(out)} tensors")
    else:
        self_test()


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        fail(str(e))
