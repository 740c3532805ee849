#!/usr/bin/env python3
"""Writes the reference-implementation fixtures of tests/models/reference/ (run it again
after a model's names change upstream; the tests read only what it wrote):

  <model>.json        the names and shapes of the state_dict torchvision (or Hugging Face's
                      save_pretrained, for bert) writes for each model campo rebuilds;
  bert_tiny.safetensors  a small BertForMaskedLM (2 layers, hidden 128, vocabulary 64)
                      saved by Hugging Face's save_pretrained, and
  bert_tiny_io.safetensors  token ids and the logits that model computes for them (eval
                      mode), so a test can check that campo's bert computes the same.

Needs torch, torchvision, transformers and safetensors (bench/setup-peers's environment,
or any virtual environment with them); nothing of it is needed to build or test campo.
Usage: python3 scripts/reference-checkpoints.py [OUT_DIR]
"""
import json
import os
import sys
import tempfile

import torch
import torchvision
import transformers
from safetensors import safe_open
from safetensors.torch import save_file


def manifest(names_shapes, path, source):
    """{"source": ..., "tensors": [[name, shape], ...]}, one tensor a line."""
    lines = [json.dumps([n, list(s)]) for n, s in names_shapes]
    with open(path, "w") as f:
        f.write('{"source": %s,\n"tensors": [\n%s\n]}\n' % (json.dumps(source), ",\n".join(lines)))


def torchvision_manifest(name, out, **kwargs):
    model = getattr(torchvision.models, name)(weights=None, **kwargs)
    tensors = [(k, v.shape) for k, v in model.state_dict().items()]
    manifest(tensors, os.path.join(out, name + ".json"),
             f"torchvision {torchvision.__version__} models.{name}({kwargs or ''}).state_dict()")


def saved_keys(model):
    """Names and shapes in the file save_pretrained writes (tied copies left out)."""
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        with safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
            return [(k, f.get_slice(k).get_shape()) for k in f.keys()]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "models", "reference")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for name in ["alexnet", "resnet18", "resnet50", "vgg16", "vgg16_bn"]:
        torchvision_manifest(name, out)
    torchvision_manifest("inception_v3", out, aux_logits=True, init_weights=False)

    base = transformers.BertForMaskedLM(transformers.BertConfig())
    manifest(saved_keys(base), os.path.join(out, "bert_base.json"),
             f"transformers {transformers.__version__} BertForMaskedLM(BertConfig()).save_pretrained")

    config = transformers.BertConfig(vocab_size=64, hidden_size=128, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=512)
    tiny = transformers.BertForMaskedLM(config).eval()
    with tempfile.TemporaryDirectory() as d:
        tiny.save_pretrained(d, safe_serialization=True)
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            data = f.read()
    with open(os.path.join(out, "bert_tiny.safetensors"), "wb") as f:
        f.write(data)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 64, (2, 16), generator=gen, dtype=torch.int64)
    with torch.no_grad():
        logits = tiny(input_ids=ids).logits.reshape(-1, 64)
    save_file({"input_ids": ids.to(torch.int32).contiguous(), "logits": logits.contiguous()},
              os.path.join(out, "bert_tiny_io.safetensors"),
              metadata={"source": f"transformers {transformers.__version__} BertForMaskedLM "
                        "(vocab 64, hidden 128, 2 layers, 2 heads, intermediate 512), eval"})
    print("wrote", out)


if __name__ == "__main__":
    main()
