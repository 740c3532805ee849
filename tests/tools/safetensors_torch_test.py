#!/usr/bin/env python3
"""tools/safetensors_torch.py: from-torch never runs code from a file, and optimizer state
is told apart from the model's tensors (campo format 2: "optimizer." prefix; format 1:
suffixes).

Runs with plain python3. Without torch installed (Debian ships none), a stand-in `torch`
module is used: its load() is the restricted unpickler when weights_only=True (tensors are
refused like any foreign class) and the real, full pickle.load otherwise, so a crafted file
that reaches the full unpickler really runs its payload (which creates a marker file). With
torch installed the same checks run against it, plus the resnet18 self-test when
torchvision is present. Registered with ctest by add_test in CMakeLists.txt.
"""

import collections
import importlib.util
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "tools", "safetensors_torch.py")


class Payload:
    """Unpickled by the full unpickler, it creates the file `marker` (as os.system would
    run any command)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


# ---------------------------------------------------------------------------------------
# A stand-in for the part of torch the converter uses.


class FakeDType:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __repr__(self):
        return f"torch.{self.name}"


class FakeTensor:
    def __init__(self, dtype, shape, data):
        self.dtype, self.shape, self.data = dtype, list(shape), bytes(data)

    def element_size(self):
        return self.dtype.size

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def reshape(self, shape):
        return FakeTensor(self.dtype, shape, self.data)

    def detach(self):
        return self

    def cpu(self):
        return self

    def contiguous(self):
        return self

    def numpy(self):
        return types.SimpleNamespace(tobytes=lambda: self.data)


class RestrictedUnpickler(pickle.Unpickler):
    """What weights_only=True does for this test's files: plain containers only."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"Weights only load failed: unsupported global {module}.{name}")


def fake_torch(has_weights_only=True):
    torch = types.ModuleType("torch")
    torch.__version__ = "2.5.0-fake" if has_weights_only else "1.12.0-fake"
    for name, size in [("float64", 8), ("float32", 4), ("float16", 2), ("bfloat16", 2),
                       ("int64", 8), ("int32", 4), ("int16", 2), ("int8", 1), ("uint8", 1),
                       ("bool", 1)]:
        setattr(torch, name, FakeDType(name, size))
    torch.Tensor = FakeTensor
    torch.nn = types.SimpleNamespace(Module=type("Module", (), {}))
    torch.empty = lambda shape, dtype: FakeTensor(dtype, shape, b"\0" * 0)
    torch.frombuffer = lambda buf, dtype: FakeTensor(dtype, [len(buf) // dtype.size], buf)
    torch.full_unpickles = 0

    def restricted_or_full(f, map_location=None, weights_only=False):
        with open(f, "rb") as fh:
            if weights_only:
                return RestrictedUnpickler(fh).load()
            torch.full_unpickles += 1
            return pickle.load(fh)

    if has_weights_only:
        torch.load = restricted_or_full
    else:

        def load(f, map_location=None):  # torch < 1.13: the full unpickler only
            return restricted_or_full(f, map_location, weights_only=False)

        torch.load = load
    return torch


def import_converter(torch_module):
    saved = sys.modules.get("torch")
    sys.modules["torch"] = torch_module
    try:
        spec = importlib.util.spec_from_file_location("safetensors_torch_under_test", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        if saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = saved


def real_torch():
    try:
        import torch  # noqa: F401

        return torch
    except ImportError:
        return None


def write_st(path, entries, metadata=None):
    """A safetensors file by hand: entries = [(name, dtype, shape, bytes)]."""
    header, data = collections.OrderedDict(), b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


class ConverterTest(unittest.TestCase):
    torch = None  # set by main(): the real module or None

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.marker = os.path.join(self.dir.name, "payload_ran")
        self.crafted = os.path.join(self.dir.name, "crafted.pt")

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def converter(self, has_weights_only=True):
        if self.torch is not None and has_weights_only:
            return import_converter(self.torch), self.torch
        fake = fake_torch(has_weights_only)
        return import_converter(fake), fake

    def write_crafted(self, torch):
        obj = {"conv1.weight": Payload(self.marker)}
        if torch is self.torch and torch is not None:
            torch.save(obj, self.crafted)
        else:
            with open(self.crafted, "wb") as f:
                pickle.dump(obj, f)

    def refused(self, module, argv):
        """main(argv) ends with a one-line error (SystemExit with a message); returns it."""
        with self.assertRaises(SystemExit) as cm:
            module.main(argv)
        self.assertIsInstance(cm.exception.code, str)
        self.assertNotIn("\n", cm.exception.code)
        return cm.exception.code

    def test_crafted_file_is_refused_without_running_it(self):
        module, torch = self.converter()
        self.write_crafted(torch)
        msg = self.refused(module, ["from-torch", self.crafted, self.path("out.safetensors")])
        self.assertFalse(os.path.exists(self.marker), "the file's payload ran")
        self.assertIn(self.crafted, msg)
        self.assertIn("torch.save(model.state_dict()", msg)
        self.assertFalse(os.path.exists(self.path("out.safetensors")))
        self.assertEqual(getattr(torch, "full_unpickles", 0), 0)

    def test_torch_without_weights_only_is_refused(self):
        module, torch = self.converter(has_weights_only=False)
        self.write_crafted(torch)
        msg = self.refused(module, ["from-torch", self.crafted, self.path("out.safetensors")])
        self.assertFalse(os.path.exists(self.marker), "the file's payload ran")
        self.assertIn("weights_only", msg)
        self.assertEqual(torch.full_unpickles, 0)

    def test_optimizer_state_is_told_apart_by_format_version(self):
        module, _ = self.converter()
        v2 = {"campo.format_version": "2"}
        self.assertTrue(module.is_optimizer_state("optimizer.conv1.weight.momentum_buffer", v2))
        self.assertFalse(module.is_optimizer_state("conv1.weight", v2))
        self.assertFalse(module.is_optimizer_state("bn1.num_batches_tracked", {}))
        v1 = {"campo.format_version": "1"}
        self.assertTrue(module.is_optimizer_state("conv1.weight.momentum_buffer", v1))
        self.assertTrue(module.is_optimizer_state("fc.bias.exp_avg_sq", v1))
        self.assertFalse(module.is_optimizer_state("fc.bias", v1))

    def test_from_torch_refuses_the_optimizer_prefix(self):
        if self.torch is not None:
            self.skipTest("stand-in tensors only (torch is installed: covered by the self-test)")
        module, torch = self.converter()
        module.load_torch = lambda path: {"optimizer.w": FakeTensor(torch.float32, [1], b"\0" * 4)}
        msg = self.refused(module, ["from-torch", "in.pt", self.path("out.safetensors")])
        self.assertIn("reserve the prefix 'optimizer.'", msg)

    def test_a_tensor_named_metadata_is_refused(self):
        # "__metadata__" is the header's metadata key: written as a tensor, it made a file
        # that neither campo nor the safetensors library can read.
        module, torch = self.converter()
        f32 = (torch.zeros([1], dtype=torch.float32) if torch is self.torch and torch is not None
               else FakeTensor(torch.float32, [1], b"\0" * 4))
        dst = self.path("out.safetensors")
        module.load_torch = lambda path: collections.OrderedDict(
            [("w", f32), ("__metadata__", f32)])
        msg = self.refused(module, ["from-torch", "in.pt", dst])
        self.assertIn("in.pt: tensor '__metadata__'", msg)
        self.assertIn("reserves this name", msg)
        self.assertEqual(os.listdir(self.dir.name), [])
        # With a prefix it is an ordinary name, and it round-trips.
        module.main(["from-torch", "in.pt", dst, "--prefix", "netG."])
        tensors, metadata = module.read_safetensors(dst)
        self.assertEqual(list(tensors), ["netG.w", "netG.__metadata__"])
        self.assertEqual(metadata, {"format": "pt"})
        # Any other writer of the module refuses it too.
        msg = self.refused_call(lambda: module.write_safetensors(dst, {"__metadata__": f32}))
        self.assertIn("reserves for the header's metadata", msg)

    def test_written_file_has_the_mode_of_a_plain_open(self):
        if self.torch is not None:
            self.skipTest("stand-in tensors only (torch is installed: covered by the self-test)")
        module, torch = self.converter()
        module.load_torch = lambda path: {"w": FakeTensor(torch.float32, [1], b"\0" * 4)}
        old = os.umask(0o027)
        try:
            new, kept = self.path("new.safetensors"), self.path("kept.safetensors")
            module.main(["from-torch", "in.pt", new])
            with open(kept, "wb"):
                pass
            os.chmod(kept, 0o604)
            module.main(["from-torch", "in.pt", kept])
        finally:
            os.umask(old)
        self.assertEqual(os.stat(new).st_mode & 0o777, 0o640)  # mkstemp alone gave 0600
        self.assertEqual(os.stat(kept).st_mode & 0o777, 0o604)

    def refused_call(self, call):
        with self.assertRaises(SystemExit) as cm:
            call()
        self.assertIsInstance(cm.exception.code, str)
        self.assertNotIn("\n", cm.exception.code)
        return cm.exception.code

    def test_to_torch_drops_optimizer_state(self):
        if self.torch is not None:
            self.skipTest("stand-in tensors only (torch is installed: covered by the self-test)")
        module, torch = self.converter()
        saved = {}
        torch.save = lambda state, dst: saved.update(state)
        f32 = struct.pack("<f", 1.5)
        st = self.path("ck.safetensors")
        write_st(st, [("fc.weight", "F32", [1], f32), ("bn1.num_batches_tracked", "I64", [], b"\0" * 8),
                      ("optimizer.fc.weight.momentum_buffer", "F32", [1], f32)],
                 {"campo.format_version": "2"})
        module.main(["to-torch", st, self.path("out.pt")])
        self.assertEqual(list(saved), ["fc.weight", "bn1.num_batches_tracked"])
        saved.clear()
        write_st(st, [("fc.weight", "F32", [1], f32), ("fc.weight.momentum_buffer", "F32", [1], f32)],
                 {"campo.format_version": "1"})
        module.main(["to-torch", st, self.path("out.pt")])
        self.assertEqual(list(saved), ["fc.weight"])

    def test_a_failed_conversion_keeps_the_existing_file(self):
        if self.torch is not None:
            self.skipTest("stand-in tensors only (torch is installed: covered by the self-test)")
        module, torch = self.converter()
        dst = self.path("good.safetensors")
        with open(dst, "wb") as f:
            f.write(b"the good file")
        complex64 = FakeDType("complex64", 8)
        module.load_torch = lambda path: {"w": FakeTensor(torch.float32, [1], b"\0" * 4),
                                          "z": FakeTensor(complex64, [1], b"\0" * 8)}
        msg = self.refused(module, ["from-torch", "in.pt", dst])
        self.assertIn("tensor 'z' has dtype torch.complex64", msg)
        with open(dst, "rb") as f:
            self.assertEqual(f.read(), b"the good file")
        self.assertEqual(sorted(os.listdir(self.dir.name)), ["good.safetensors"])  # no temp file

    def test_a_write_that_fails_midway_leaves_no_file(self):
        if self.torch is not None:
            self.skipTest("stand-in tensors only (torch is installed: covered by the self-test)")
        module, torch = self.converter()
        dst = self.path("out.safetensors")
        broken = FakeTensor(torch.float32, [1], b"\0" * 4)
        broken.numpy = lambda: (_ for _ in ()).throw(OSError(28, "No space left on device"))
        module.load_torch = lambda path: {"w": broken}
        with self.assertRaises(OSError):
            module.main(["from-torch", "in.pt", dst])
        self.assertEqual(os.listdir(self.dir.name), [])

    def test_quantized_and_sparse_tensors_are_one_line(self):
        if self.torch is not None:
            self.skipTest("stand-in tensors only (torch is installed: covered by the self-test)")
        module, torch = self.converter()
        quantized = FakeTensor(torch.int8, [2], b"\0" * 2)
        quantized.is_quantized = True
        module.load_torch = lambda path: {"q": quantized}
        msg = self.refused(module, ["from-torch", "in.pt", self.path("q.safetensors")])
        self.assertIn("tensor 'q' is quantized", msg)
        torch.strided = "torch.strided"
        sparse = FakeTensor(torch.float32, [2], b"\0" * 8)
        sparse.layout = "torch.sparse_coo"
        module.load_torch = lambda path: {"s": sparse}
        msg = self.refused(module, ["from-torch", "in.pt", self.path("s.safetensors")])
        self.assertIn("tensor 's' has layout torch.sparse_coo", msg)
        self.assertEqual(os.listdir(self.dir.name), [])

    def test_without_torch_it_says_so_in_one_line(self):
        no_torch = self.path("no_torch")
        os.mkdir(no_torch)
        with open(os.path.join(no_torch, "torch.py"), "w") as f:
            f.write("raise ImportError('No module named torch')\n")
        env = dict(os.environ, PYTHONPATH=no_torch)
        r = subprocess.run([sys.executable, SCRIPT, "to-torch", "a.safetensors", "b.pt"], env=env,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("safetensors_torch: PyTorch is not installed", r.stderr)

    def test_self_test_with_torchvision(self):
        if self.torch is None:
            self.skipTest("torch is not installed")
        try:
            import torchvision  # noqa: F401
        except ImportError:
            self.skipTest("torchvision is not installed")
        module, _ = self.converter()
        module.self_test()


def main():
    ConverterTest.torch = real_torch()
    print("safetensors_torch_test: " + ("torch " + ConverterTest.torch.__version__ if ConverterTest.torch
                                       else "torch not installed: a stand-in torch module is used"))
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
