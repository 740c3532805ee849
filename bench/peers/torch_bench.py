#!/usr/bin/env python3
"""PyTorch 2 worker of `bench/run`: campo's benchmark training job (train/plan.cc run_bench,
run_gan_bench) in PyTorch, driven by the lockstep protocol of peer_protocol.py:

  ~/.cache/campo/peers/bin/python bench/peers/torch_bench.py --model resnet50 \\
      --image-size 32 --channels 3 --batch 32 --classes 10 --steps 20 --warmup 3 \\
      --threads 2 --config fp32
  prints {"ready": true, ...}; then each stdin line `run` -> {"samples_per_sec", "seconds",
  "loss"}; EOF or `quit` ends it. Errors: `peer-bench: error: <what>` on stderr, status 1.

Configurations (--config; the names bench/run's table shows after "pytorch"):
  fp32                      eager, float32, NCHW.
  fp32 channels_last        eager, float32, model and inputs
                            .to(memory_format=torch.channels_last) (NHWC in memory, the
                            layout PyTorch recommends for convolutions on the CPU).
  autocast                  eager, torch.autocast("cpu", dtype=torch.bfloat16) around the
                            forward passes and the losses (backward and optimizer outside, as
                            PyTorch recommends), NCHW.
  autocast channels_last    the same in channels_last.
  compile                   torch.compile (inductor, default mode) of the model(s), float32,
                            NCHW: forward and, through AOTAutograd, backward are compiled; the
                            optimizer step stays eager.
  compile channels_last     the same in channels_last.
  compile+autocast channels_last
                            torch.compile of the channels_last model(s), bf16 autocast around
                            the compiled forward passes and the losses.
  autocast fp16 channels_last
                            torch.autocast("cpu", dtype=torch.float16) in channels_last, the
                            loss scaled by torch.amp.GradScaler("cpu") (one per optimizer).
                            Checked at startup: a torch without GradScaler("cpu"), or whose
                            CPU autocast does not run a matmul in float16, is refused with
                            one line saying so.
Every model here is convolutional (4-D activations), so channels_last applies to all of them
(one without a 4-D parameter is refused in channels_last: it would time the NCHW job again).
After the warm-up each configuration checks that it took effect, else it is an error: under
autocast the model's output comes out in the autocast dtype, compiled or not; in
channels_last the inputs and every 4-D parameter are channels_last. The compile
configurations compile in the warm-up (which must be at least one step); a compiler failure
is an error, never a fallback to eager.
The job: one fixed synthetic batch (inputs N(0, 1) [B, C, H, W], labels uniform in
[0, classes)), mean softmax cross-entropy, SGD momentum 0.9, lr 1e-3 (campo bench's
defaults). dcgan: one iteration = D step (BCE-with-logits on a real batch U(-1, 1) and on
G(z) detached) then G step (BCE(D(G(z)), 1), gradients of G only), Adam lr 2e-4, beta1 0.5,
fresh z ~ N(0, 1) each iteration (GanSession::step). Models: lenet from pytorch_train.py;
resnet50 is torchvision's (3x3 stem without max-pool under 64 px, as campo); vgg16 and the
DCGAN networks are built here after models/vgg.cc and models/dcgan.cc.
Threads: torch.set_num_threads(--threads), one inter-op thread, PyTorch's OpenMP defaults.
On a machine other processes keep busy, libgomp's spin-waiting threads slowed two-thread
steps ~10x (VGG-16, batch 2, load 7 on 2 cores: 3.6 s against 0.29 s with
OMP_WAIT_POLICY=PASSIVE in the environment); benchmark on an otherwise idle machine.
"""
from peer_protocol import (BN_EPSILON, BN_MOMENTUM, CLASSIFIER_LR, GAN_BETA1, GAN_BETA2,
                           GAN_EPSILON, GAN_LR, GAN_NDF, GAN_NGF, GAN_NZ, MOMENTUM, PeerError,
                           cpu_flags_note, dcgan_stages, emit, fail, is_small_variant,
                           parse_args, serve, summarize)


class Config:
    """What a --config name turns on."""

    def __init__(self, compiled=False, autocast=None, channels_last=False):
        self.compiled = compiled  # torch.compile of the model(s)
        self.autocast = autocast  # None, "bfloat16" or "float16" (with GradScaler)
        self.channels_last = channels_last


CONFIGS = {
    "fp32": Config(),
    "fp32 channels_last": Config(channels_last=True),
    "autocast": Config(autocast="bfloat16"),
    "autocast channels_last": Config(autocast="bfloat16", channels_last=True),
    "compile": Config(compiled=True),
    "compile channels_last": Config(compiled=True, channels_last=True),
    "compile+autocast channels_last": Config(compiled=True, autocast="bfloat16",
                                             channels_last=True),
    "autocast fp16 channels_last": Config(autocast="float16", channels_last=True),
}


def main():
    a = None
    try:
        a = parse_args(list(CONFIGS))
        if CONFIGS[a.config].compiled and a.warmup < 1 and not a.print_params:
            raise PeerError(f"--config '{a.config}' needs --warmup >= 1: the compilation runs "
                            f"in the warm-up, outside the timed steps")
        # Imported after the options are checked, so that a bad option fails fast.
        import torch
        torch.set_num_threads(a.threads)
        torch.set_num_interop_threads(1)
        worker = Worker(a)
        if a.print_params:
            emit({"params": worker.params})
            return
        for _ in range(a.warmup):  # torch.compile compiles (and fails) at the first call
            worker.run_steps(1)
        worker.check_configuration()
    except PeerError as e:
        fail(str(e))
    except Exception as e:
        fail(f"{a.config if a else 'startup'}: {summarize(e)}")
    serve(worker.ready_line(), worker.run_steps, a.steps, a.batch)


# ---- models -------------------------------------------------------------------------------

VGG_CONFIG_D = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M"]


def build_vgg16(nn, channels, image_size, classes):
    """torchvision's vgg16 (configuration D, no batch-norm) with campo's small variant under
    64 px: the last max-pool left out, global average pooling, classifier Linear(512, 512),
    ReLU, Dropout(0.5), Linear(512, classes). Names match torchvision's (features.N,
    classifier.N)."""
    small = is_small_variant(image_size)
    features, c = [], channels
    for i, v in enumerate(VGG_CONFIG_D):
        if v == "M":
            if not (small and i == len(VGG_CONFIG_D) - 1):
                features.append(nn.MaxPool2d(2, 2))
            continue
        features += [nn.Conv2d(c, v, 3, padding=1), nn.ReLU(inplace=True)]
        c = v
    if small:
        pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        classifier = nn.Sequential(nn.Linear(512, 512), nn.ReLU(inplace=True), nn.Dropout(0.5),
                                   nn.Linear(512, classes))
    else:
        pool = nn.Sequential(nn.AdaptiveAvgPool2d(7), nn.Flatten())
        classifier = nn.Sequential(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True),
                                   nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
                                   nn.Dropout(0.5), nn.Linear(4096, classes))
    model = nn.Sequential()
    model.add_module("features", nn.Sequential(*features))
    model.add_module("avgpool", pool)
    model.add_module("classifier", classifier)
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            mode = "fan_in" if small else "fan_out"  # models/vgg.cc: see the note there
            nn.init.kaiming_normal_(m.weight, mode=mode, nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.01)
            nn.init.zeros_(m.bias)
    return model


def build_resnet50(nn, torchvision, channels, image_size, classes):
    model = torchvision.models.resnet50(num_classes=classes)
    if is_small_variant(image_size):
        model.conv1 = nn.Conv2d(channels, 64, 3, 1, 1, bias=False)
        model.maxpool = nn.Identity()
    elif channels != 3:
        model.conv1 = nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


def build_dcgan(nn, channels, image_size):
    """(G, D) as models/dcgan.cc (PyTorch's examples/dcgan layout, names main.N)."""
    stages = dcgan_stages(image_size)

    def batch_norm(width):
        return nn.BatchNorm2d(width, eps=BN_EPSILON, momentum=BN_MOMENTUM)

    g_layers, c = [], GAN_NZ
    for i in range(stages):
        width = GAN_NGF << (stages - 1 - i)  # ..., 4 ngf, 2 ngf, ngf
        first = i == 0  # 1x1 -> 4x4, then each layer doubles the size
        g_layers += [nn.ConvTranspose2d(c, width, 4, 1 if first else 2, 0 if first else 1,
                                        bias=False), batch_norm(width), nn.ReLU(True)]
        c = width
    g_layers += [nn.ConvTranspose2d(c, channels, 4, 2, 1, bias=False), nn.Tanh()]
    d_layers = [nn.Conv2d(channels, GAN_NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
    c = GAN_NDF
    for i in range(1, stages):
        width = GAN_NDF << i
        d_layers += [nn.Conv2d(c, width, 4, 2, 1, bias=False), batch_norm(width),
                     nn.LeakyReLU(0.2, True)]
        c = width
    d_layers += [nn.Conv2d(c, 1, 4, 1, 0, bias=False)]
    nets = []
    for layers in (g_layers, d_layers):
        net = nn.Sequential()
        net.add_module("main", nn.Sequential(*layers))
        for m in net.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
                nn.init.zeros_(m.bias)
        nets.append(net)
    return nets


def build_classifier(a):
    import torch.nn as nn
    import torchvision
    if a.model == "lenet":
        from pytorch_train import LeNet
        if a.channels != 1:
            raise PeerError(f"lenet takes 1 channel (pytorch_train.LeNet), got {a.channels}")
        return LeNet(a.classes)
    if a.model == "resnet50":
        return build_resnet50(nn, torchvision, a.channels, a.image_size, a.classes)
    return build_vgg16(nn, a.channels, a.image_size, a.classes)


# ---- the worker ---------------------------------------------------------------------------


class Worker:
    def __init__(self, a):
        import contextlib

        import torch
        self.torch = torch
        self.a = a
        self.config = CONFIGS[a.config]
        self.output_dtype = None  # the model's output dtype in the last step run
        torch.manual_seed(a.seed)
        self.memory_format = (torch.channels_last if self.config.channels_last
                              else torch.contiguous_format)
        if self.config.autocast == "float16":
            why = cpu_float16_refusal(torch)
            if why:
                raise PeerError(f"{a.config}: {why}")
        if self.config.autocast:
            dtype = getattr(torch, self.config.autocast)
            self.autocast = lambda: torch.autocast("cpu", dtype=dtype)
        else:
            self.autocast = contextlib.nullcontext
        if a.model == "dcgan":
            self._init_gan()
        else:
            self._init_classifier()

    def _compiled(self, module):
        return self.torch.compile(module) if self.config.compiled else module

    def _scaler(self):
        """A GradScaler for fp16 autocast (one per optimizer, as torch_gpu.py), else None."""
        if self.config.autocast != "float16":
            return None
        return self.torch.amp.GradScaler("cpu")

    def _laid_out(self, tensor):
        return tensor.contiguous(memory_format=self.memory_format)

    @staticmethod
    def _update(loss, optimizer, scaler, inputs=None):
        """Backward and optimizer step; with a scaler, on the scaled loss (a step whose
        gradients hold inf/NaN is skipped and the scale backs off, as GradScaler does)."""
        if scaler is None:
            loss.backward(inputs=inputs)
            optimizer.step()
        else:
            scaler.scale(loss).backward(inputs=inputs)
            scaler.step(optimizer)
            scaler.update()

    def _init_classifier(self):
        import torch
        a = self.a
        self.model = build_classifier(a).to(memory_format=self.memory_format)
        self.model.train()
        self.nets = [self.model]
        self.params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        self.forward = self._compiled(self.model)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=CLASSIFIER_LR,
                                         momentum=MOMENTUM)
        self.scaler = self._scaler()
        self.scalers = [self.scaler]
        self.x = self._laid_out(torch.randn(a.batch, a.channels, a.image_size, a.image_size))
        self.inputs = [self.x]
        self.y = torch.randint(0, a.classes, (a.batch,))
        self.step = self._classifier_step

    def _classifier_step(self):
        import torch.nn.functional as F
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            logits = self.forward(self.x)
            loss = F.cross_entropy(logits, self.y)
        self.output_dtype = logits.dtype
        self._update(loss, self.optimizer, self.scaler)
        return loss

    def _init_gan(self):
        import torch
        import torch.nn as nn
        a = self.a
        self.g, self.d = (net.to(memory_format=self.memory_format)
                          for net in build_dcgan(nn, a.channels, a.image_size))
        self.g.train()
        self.d.train()
        self.nets = [self.g, self.d]
        self.params_g = sum(p.numel() for p in self.g.parameters())
        self.params_d = sum(p.numel() for p in self.d.parameters())
        self.params = self.params_g + self.params_d
        self.g_forward = self._compiled(self.g)
        self.d_forward = self._compiled(self.d)

        def adam(net):
            return torch.optim.Adam(net.parameters(), lr=GAN_LR, betas=(GAN_BETA1, GAN_BETA2),
                                    eps=GAN_EPSILON)

        self.g_optimizer, self.d_optimizer = adam(self.g), adam(self.d)
        self.g_scaler, self.d_scaler = self._scaler(), self._scaler()
        self.scalers = [self.d_scaler, self.g_scaler]
        self.g_params = list(self.g.parameters())
        # campo's bench: one fixed real batch, U(-1, 1) (tanh's range).
        self.real = self._laid_out(
            torch.rand(a.batch, a.channels, a.image_size, a.image_size) * 2 - 1)
        self.inputs = [self.real]
        self.ones = torch.ones(a.batch)
        self.zeros = torch.zeros(a.batch)
        self.step = self._gan_step

    def _gan_step(self):
        import torch
        import torch.nn.functional as F
        bce = F.binary_cross_entropy_with_logits
        z = self._laid_out(torch.randn(self.a.batch, GAN_NZ, 1, 1))
        # D step: loss_D = BCE(D(x), 1) + BCE(D(G(z)), 0), G's output detached.
        self.d_optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            fake = self.g_forward(z)
            d_real = self.d_forward(self.real)
            loss_d = (bce(d_real.view(-1), self.ones) +
                      bce(self.d_forward(fake.detach()).view(-1), self.zeros))
        self.output_dtype = d_real.dtype
        self._update(loss_d, self.d_optimizer, self.d_scaler)
        # G step: loss_G = BCE(D(G(z)), 1) against the updated D; gradients of G only.
        self.g_optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss_g = bce(self.d_forward(fake).view(-1), self.ones)
        self._update(loss_g, self.g_optimizer, self.g_scaler, inputs=self.g_params)
        return loss_d

    def run_steps(self, n):
        loss = None
        for _ in range(n):
            loss = self.step()
        return float(loss.item())

    def check_configuration(self):
        """After the warm-up, that the configuration took effect, else an error: under
        autocast the model's output (the classifier's logits, D's on the real batch) comes
        out in the autocast dtype, compiled or not; in channels_last the inputs and every 4-D
        parameter (after the warm-up's updates) are channels_last."""
        torch = self.torch
        wanted = getattr(torch, self.config.autocast) if self.config.autocast else None
        if wanted and self.output_dtype not in (None, wanted):  # None: no warm-up step
            raise PeerError(f"'{self.a.config}': the model's output came out "
                            f"{self.output_dtype} under {self.config.autocast} autocast: "
                            f"autocast did not reach its layers")
        if not self.config.channels_last:
            return
        tensors = [("input", t) for t in self.inputs]
        tensors += [(name, p) for net in self.nets for name, p in net.named_parameters()
                    if p.dim() == 4]
        if len(tensors) == len(self.inputs):
            raise PeerError(f"{self.a.model} has no 4-D parameter: channels_last would time "
                            f"the same job as NCHW")
        for name, t in tensors:
            if not t.is_contiguous(memory_format=torch.channels_last):
                raise PeerError(f"'{self.a.config}': {name} {list(t.shape)} is not "
                                f"channels_last (strides {list(t.stride())})")

    def ready_line(self):
        torch = self.torch
        a, cfg = self.a, self.config
        notes = [("torch.compile (inductor, default mode) of the model(s): forward and "
                  "backward (AOTAutograd) compiled, optimizer step eager") if cfg.compiled
                 else "eager"]
        if cfg.autocast == "bfloat16":
            notes.append("torch.autocast cpu bfloat16 around forward and loss (output "
                         "checked bfloat16)")
        elif cfg.autocast == "float16":
            scales = ", ".join(f"{s.get_scale():g}" for s in self.scalers)
            notes.append(f"torch.autocast cpu float16 around forward and loss (output checked "
                         f"float16), loss scaled by torch.amp.GradScaler('cpu') (scale after "
                         f"the warm-up: {scales})")
        else:
            notes.append("float32")
        notes.append("channels_last (inputs and 4-D parameters checked)" if cfg.channels_last
                     else "NCHW")
        notes.append(cpu_flags_note())
        notes.append(f"torch cpu capability {torch.backends.cpu.get_cpu_capability()}")
        if cfg.autocast == "bfloat16" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            notes.append("oneDNN (mkldnn) reports no bf16 support on this CPU")
        if cfg.autocast == "float16" and not mkldnn_fp16_supported(torch):
            notes.append("oneDNN (mkldnn) reports no fp16 support on this CPU (no AVX-512 FP16 "
                         "or AMX-FP16): its fp16 kernels are not native here")
        if a.model == "dcgan":
            notes.append(f"params G {self.params_g} + D {self.params_d}; loss is loss_D; one G "
                         f"forward per iteration (campo runs G's forward in both step graphs)")
        elif a.model in ("resnet50", "vgg16"):
            notes.append(("small" if is_small_variant(a.image_size) else "imagenet") +
                         " variant")
        return {"ready": True, "framework": f"pytorch {torch.__version__}", "config": a.config,
                "model": a.model, "params": self.params, "threads": a.threads,
                "notes": "; ".join(notes)}


def cpu_float16_refusal(torch):
    """Why this torch cannot train in fp16 on the CPU, or None. It needs
    torch.amp.GradScaler("cpu") (torch 2.3 on) and a CPU autocast that runs float16: older
    releases warn and turn autocast off for a dtype they do not support, so a matmul under it
    is checked to come out float16."""
    import warnings
    version = torch.__version__
    try:
        torch.amp.GradScaler("cpu")
    except Exception as e:  # AttributeError before torch 2.3
        return (f"torch {version} has no loss scaler for the CPU "
                f"(torch.amp.GradScaler('cpu'): {summarize(e)})")
    probe = torch.ones(8, 8)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # autocast's "Disabling autocast"
            with torch.autocast("cpu", dtype=torch.float16):
                out = torch.mm(probe, probe)
    except Exception as e:
        return f"torch {version}'s CPU autocast refuses float16: {summarize(e)}"
    if out.dtype != torch.float16:
        return (f"torch {version}'s CPU autocast does not run float16 (a matmul under it came "
                f"out {out.dtype})")
    return None


def mkldnn_fp16_supported(torch):
    """oneDNN's own answer where this torch can ask it; True (no note) where it cannot."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except Exception:  # an older torch without the query
        return True


if __name__ == "__main__":
    main()
