#!/usr/bin/env python3
"""TensorFlow 2 worker of `bench/run`: campo's benchmark training job (train/plan.cc run_bench,
run_gan_bench) in TensorFlow with Keras 3 models, driven by the lockstep protocol of
peer_protocol.py:

  ~/.cache/campo/peers/bin/python bench/peers/tf_bench.py --model resnet50 --image-size 32 \\
      --channels 3 --batch 32 --classes 10 --steps 20 --warmup 3 --threads 2 --config fp32
  prints {"ready": true, ...}; then each stdin line `run` -> {"samples_per_sec", "seconds",
  "loss"}; EOF or `quit` ends it. Errors: `peer-bench: error: <what>` on stderr, status 1.

Every configuration runs one tf.function-compiled training step per call (a custom loop with
tf.GradientTape), images in NHWC (TensorFlow's native CPU layout; its Eigen Conv2D kernels
take NHWC only), oneDNN on (TF_ENABLE_ONEDNN_OPTS=1 unless set otherwise: TensorFlow turns it
on by itself only on CPUs with AVX-512 VNNI/BF16 or AMX, so on an AVX2 CPU it is off, and
grappler registers its bf16 rewrite only with oneDNN on).
  fp32            float32.
  grappler-amp    grappler's graph rewrite auto_mixed_precision_onednn_bfloat16: float32
                  Keras model, TensorFlow's allow/infer/deny lists paint the graph bf16 (the
                  rewrite campo's `amp` policy reproduces). Verified at startup: the optimized
                  step graph (grappler's own dump) must contain bf16 nodes, else an error.
  mixed-bfloat16  Keras's mixed_precision policy "mixed_bfloat16" (bf16 compute, float32
                  variables), the final logits float32.
Whatever the configuration, the optimized graph's bf16 node and Cast counts are in the ready
line's notes. The job: one fixed synthetic batch (inputs N(0, 1) [B, H, W, C], labels uniform
in [0, classes)), mean softmax cross-entropy, SGD momentum 0.9, lr 1e-3 (campo bench's
defaults). dcgan: D step (BCE-with-logits on a real batch U(-1, 1) and on G(z)) then G step
(BCE(D(G(z)), 1) against the updated D, gradients of G only), Adam lr 2e-4, beta1 0.5, fresh
z ~ N(0, 1) each iteration. The Keras models are built after campo's (models/small.cc,
resnet.cc, vgg.cc, dcgan.cc) with the same parameter counts: ResNet-50 is torchvision's v1.5
(stride on the 3x3 conv, unlike keras.applications.ResNet50, which strides the first 1x1).
Padding: "same" where PyTorch pads symmetrically; for the stride-2 convs and pools TensorFlow
pads (0, 1) instead of (1, 1), same output size and FLOPs.
"""
import glob
import os
import shutil
import sys
import tempfile

from peer_protocol import (BN_EPSILON, BN_MOMENTUM, CLASSIFIER_LR, GAN_BETA1, GAN_BETA2,
                           GAN_EPSILON, GAN_LR, GAN_NDF, GAN_NGF, GAN_NZ, MOMENTUM, PeerError,
                           cpu_flags, cpu_flags_note, dcgan_stages, emit, fail, is_small_variant,
                           parse_args, serve, summarize)

CONFIGS = ["fp32", "grappler-amp", "mixed-bfloat16"]
AMP_OPTION = "auto_mixed_precision_onednn_bfloat16"  # tf.config.optimizer's key in TF 2.21


def main():
    a = None
    dump_dir = None
    try:
        a = parse_args(CONFIGS)
        if a.warmup < 1 and not a.print_params:
            raise PeerError("tf_bench needs --warmup >= 1: tf.function traces and grappler "
                            "optimizes the step in the warm-up, outside the timed steps")
        # Before TensorFlow is imported: its C++ logs to stderr only from warnings on, oneDNN,
        # and grappler's optimized graphs dumped (meta_optimizer's VLOG 1) for the bf16 count.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
        os.environ.setdefault("KERAS_BACKEND", "tensorflow")
        if os.environ["KERAS_BACKEND"] != "tensorflow":
            raise PeerError(f"KERAS_BACKEND is '{os.environ['KERAS_BACKEND']}'; tf_bench needs "
                            "tensorflow")
        if a.config == "grappler-amp" and os.environ["TF_ENABLE_ONEDNN_OPTS"] != "1":
            raise PeerError("grappler-amp needs oneDNN (its bf16 rewrite is registered only with "
                            "it); unset TF_ENABLE_ONEDNN_OPTS or set it to 1")
        if not a.print_params:
            dump_dir = tempfile.mkdtemp(prefix="tf_bench_graphs_")
            os.environ["TF_DUMP_GRAPH_PREFIX"] = dump_dir
            vmodule = os.environ.get("TF_CPP_VMODULE")
            os.environ["TF_CPP_VMODULE"] = (vmodule + "," if vmodule else "") + "meta_optimizer=1"
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        if a.config == "grappler-amp":
            tf.config.optimizer.set_experimental_options({AMP_OPTION: True})
        import keras
        if a.config == "mixed-bfloat16":
            keras.mixed_precision.set_global_policy("mixed_bfloat16")
        keras.utils.set_random_seed(a.seed)
        worker = Worker(a, tf, keras)
        if a.print_params:
            emit({"params": worker.params})
            return
        for _ in range(a.warmup):
            worker.run_steps(1)
        graph_note = count_bf16_nodes(tf, dump_dir)
        os.environ.pop("TF_DUMP_GRAPH_PREFIX")
        if a.config == "grappler-amp" and graph_note["bf16_nodes"] == 0:
            raise PeerError(f"grappler's {AMP_OPTION} rewrite did not happen: the optimized step "
                            f"graph has no bfloat16 node ({cpu_flags_note()})")
    except PeerError as e:
        fail(str(e))
    except Exception as e:
        fail(f"{a.config if a else 'startup'}: {summarize(e)}")
    finally:
        if dump_dir:
            shutil.rmtree(dump_dir, ignore_errors=True)
    serve(worker.ready_line(graph_note), worker.run_steps, a.steps, a.batch)


def count_bf16_nodes(tf, dump_dir):
    """bf16 nodes and Casts to bf16 in the largest graph grappler optimized (the training
    step), from the after_MetaOptimizer_*.pbtxt files it dumped into dump_dir."""
    from google.protobuf import text_format
    files = glob.glob(os.path.join(dump_dir, "after_MetaOptimizer_*.pbtxt"))
    if not files:
        raise PeerError(f"no optimized graph was dumped into {dump_dir} (TF_DUMP_GRAPH_PREFIX "
                        f"with TF_CPP_VMODULE=meta_optimizer=1); cannot count bf16 nodes")
    graphs = []
    for path in files:
        graph = tf.compat.v1.GraphDef()
        with open(path) as f:
            text_format.Parse(f.read(), graph)
        graphs.append(graph)
    step = max(graphs, key=lambda g: len(g.node))
    bf16 = tf.bfloat16.as_datatype_enum

    def is_bf16(node):
        return any(node.attr[k].type == bf16 for k in ("T", "DstT", "dtype") if k in node.attr)

    return {"nodes": len(step.node), "bf16_nodes": sum(is_bf16(n) for n in step.node),
            "casts_to_bf16": sum(n.op == "Cast" and n.attr["DstT"].type == bf16
                                 for n in step.node)}


# ---- models (Keras 3, NHWC) ---------------------------------------------------------------

VGG_CONFIG_D = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                512, 512, 512, "M"]


def batch_norm(layers):
    # Keras's momentum is the running statistics' decay: 1 - PyTorch's momentum.
    return layers.BatchNormalization(momentum=1.0 - BN_MOMENTUM, epsilon=BN_EPSILON)


def logits_layer(layers, classes, **kwargs):
    # float32 output whatever the policy: the loss is computed in float32.
    return layers.Dense(classes, dtype="float32", **kwargs)


def build_lenet(keras, a):
    layers = keras.layers
    pad = "same" if a.image_size < 32 else "valid"  # pad 2 on 28 px (models/small.cc)
    return keras.Sequential([
        keras.Input((a.image_size, a.image_size, a.channels)),
        layers.Conv2D(6, 5, padding=pad, activation="relu"),
        layers.MaxPooling2D(2),
        layers.Conv2D(16, 5, activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(120, activation="relu"),
        layers.Dense(84, activation="relu"),
        logits_layer(layers, a.classes),
    ], name="lenet")


def build_resnet50(keras, a):
    """torchvision's ResNet-50 v1.5 (models/resnet.cc): bottleneck 1x1 -> 3x3/stride -> 1x1
    (4 planes), projection shortcut (1x1/stride conv + BN) when the shape changes."""
    layers = keras.layers
    he_fan_out = keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")

    def conv_bn(x, filters, kernel, stride):
        x = layers.Conv2D(filters, kernel, stride, padding="same", use_bias=False,
                          kernel_initializer=he_fan_out)(x)
        return batch_norm(layers)(x)

    def bottleneck(x, planes, stride):
        y = layers.ReLU()(conv_bn(x, planes, 1, 1))
        y = layers.ReLU()(conv_bn(y, planes, 3, stride))
        y = conv_bn(y, planes * 4, 1, 1)
        shortcut = x
        if stride != 1 or x.shape[-1] != planes * 4:
            shortcut = conv_bn(x, planes * 4, 1, stride)
        return layers.ReLU()(layers.Add()([y, shortcut]))

    images = keras.Input((a.image_size, a.image_size, a.channels))
    if is_small_variant(a.image_size):
        x = layers.ReLU()(conv_bn(images, 64, 3, 1))
    else:
        x = layers.ReLU()(conv_bn(images, 64, 7, 2))
        x = layers.MaxPooling2D(3, 2, padding="same")(x)
    for stage, (planes, blocks) in enumerate(zip([64, 128, 256, 512], [3, 4, 6, 3])):
        for i in range(blocks):
            x = bottleneck(x, planes, 2 if stage > 0 and i == 0 else 1)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(images, logits_layer(layers, a.classes)(x), name="resnet50")


def build_vgg16(keras, a):
    """torchvision's vgg16 (configuration D) with campo's small variant under 64 px
    (models/vgg.cc): last max-pool left out, global average pooling, Dense 512, ReLU,
    Dropout(0.5), Dense classes."""
    layers = keras.layers
    small = is_small_variant(a.image_size)
    x = images = keras.Input((a.image_size, a.image_size, a.channels))
    for i, v in enumerate(VGG_CONFIG_D):
        if v == "M":
            if not (small and i == len(VGG_CONFIG_D) - 1):
                x = layers.MaxPooling2D(2)(x)
            continue
        x = layers.Conv2D(v, 3, padding="same", activation="relu")(x)
    linear_init = {"kernel_initializer": keras.initializers.RandomNormal(0.0, 0.01)}
    if small:
        x = layers.GlobalAveragePooling2D()(x)
        x = layers.Dropout(0.5)(layers.Dense(512, activation="relu", **linear_init)(x))
    else:
        side = x.shape[1]  # AdaptiveAvgPool2d((7, 7)) on a map whose side is a multiple of 7
        if side != 7:
            x = layers.AveragePooling2D(side // 7)(x)
        x = layers.Flatten()(x)
        for _ in range(2):
            x = layers.Dropout(0.5)(layers.Dense(4096, activation="relu", **linear_init)(x))
    return keras.Model(images, logits_layer(layers, a.classes, **linear_init)(x), name="vgg16")


def build_dcgan(keras, a):
    """(G, D) as models/dcgan.cc: G z [N, nz] -> ConvTranspose 4x4 (1x1 -> 4x4, then x2 each)
    + BN + ReLU, last ConvTranspose to C channels + tanh; D strided 4x4 convs, LeakyReLU 0.2,
    BN on all but the first, last conv 4x4 valid to one logit. No biases."""
    layers = keras.layers
    init = keras.initializers.RandomNormal(0.0, 0.02)
    gamma_init = keras.initializers.RandomNormal(1.0, 0.02)
    stages = dcgan_stages(a.image_size)

    def gan_batch_norm():
        return layers.BatchNormalization(momentum=1.0 - BN_MOMENTUM, epsilon=BN_EPSILON,
                                         gamma_initializer=gamma_init)

    z = keras.Input((GAN_NZ,))
    x = layers.Reshape((1, 1, GAN_NZ))(z)
    for i in range(stages):
        first = i == 0
        x = layers.Conv2DTranspose(GAN_NGF << (stages - 1 - i), 4, 1 if first else 2,
                                   padding="valid" if first else "same", use_bias=False,
                                   kernel_initializer=init)(x)
        x = layers.ReLU()(gan_batch_norm()(x))
    x = layers.Conv2DTranspose(a.channels, 4, 2, padding="same", use_bias=False,
                               kernel_initializer=init)(x)
    g = keras.Model(z, layers.Activation("tanh")(x), name="netG")

    images = keras.Input((a.image_size, a.image_size, a.channels))
    x = layers.Conv2D(GAN_NDF, 4, 2, padding="same", use_bias=False,
                      kernel_initializer=init)(images)
    x = layers.LeakyReLU(negative_slope=0.2)(x)
    for i in range(1, stages):
        x = layers.Conv2D(GAN_NDF << i, 4, 2, padding="same", use_bias=False,
                          kernel_initializer=init)(x)
        x = layers.LeakyReLU(negative_slope=0.2)(gan_batch_norm()(x))
    x = layers.Conv2D(1, 4, 1, padding="valid", use_bias=False, kernel_initializer=init)(x)
    d = keras.Model(images, layers.Activation("linear", dtype="float32")(layers.Flatten()(x)),
                    name="netD")
    return g, d


def trainable_count(model):
    return int(sum(v.numpy().size for v in model.trainable_variables))


# ---- the worker ---------------------------------------------------------------------------


class Worker:
    def __init__(self, a, tf, keras):
        self.a, self.tf, self.keras = a, tf, keras
        if a.model == "dcgan":
            self._init_gan()
        else:
            self._init_classifier()

    def _init_classifier(self):
        a, tf, keras = self.a, self.tf, self.keras
        builders = {"lenet": build_lenet, "resnet50": build_resnet50, "vgg16": build_vgg16}
        model = builders[a.model](keras, a)
        self.params = trainable_count(model)
        optimizer = keras.optimizers.SGD(learning_rate=CLASSIFIER_LR, momentum=MOMENTUM)
        optimizer.build(model.trainable_variables)
        self.x = tf.random.normal([a.batch, a.image_size, a.image_size, a.channels], seed=a.seed)
        self.y = tf.random.uniform([a.batch], 0, a.classes, dtype=tf.int32, seed=a.seed)

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                logits = tf.cast(model(x, training=True), tf.float32)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        self.step = lambda: train_step(self.x, self.y)

    def _init_gan(self):
        a, tf, keras = self.a, self.tf, self.keras
        g, d = build_dcgan(keras, a)
        self.params_g, self.params_d = trainable_count(g), trainable_count(d)
        self.params = self.params_g + self.params_d

        def adam(net):
            opt = keras.optimizers.Adam(learning_rate=GAN_LR, beta_1=GAN_BETA1,
                                        beta_2=GAN_BETA2, epsilon=GAN_EPSILON)
            opt.build(net.trainable_variables)
            return opt

        g_optimizer, d_optimizer = adam(g), adam(d)
        # campo's bench: one fixed real batch, U(-1, 1) (tanh's range).
        self.real = tf.random.uniform([a.batch, a.image_size, a.image_size, a.channels], -1, 1,
                                      seed=a.seed)
        ones, zeros = tf.ones([a.batch]), tf.zeros([a.batch])

        def bce(logits, labels):
            return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=labels, logits=tf.reshape(tf.cast(logits, tf.float32), [-1])))

        @tf.function
        def gan_step(real):
            z = tf.random.normal([a.batch, GAN_NZ])
            with tf.GradientTape() as g_tape:
                fake = g(z, training=True)
                with g_tape.stop_recording():
                    # D step: loss_D = BCE(D(x), 1) + BCE(D(G(z)), 0), D's variables only.
                    with tf.GradientTape() as d_tape:
                        loss_d = (bce(d(real, training=True), ones) +
                                  bce(d(fake, training=True), zeros))
                    d_grads = d_tape.gradient(loss_d, d.trainable_variables)
                    d_optimizer.apply_gradients(zip(d_grads, d.trainable_variables))
                # G step: BCE(D(G(z)), 1) against the updated D, G's variables only.
                loss_g = bce(d(fake, training=True), ones)
            g_grads = g_tape.gradient(loss_g, g.trainable_variables)
            g_optimizer.apply_gradients(zip(g_grads, g.trainable_variables))
            return loss_d

        self.step = lambda: gan_step(self.real)

    def run_steps(self, n):
        loss = None
        for _ in range(n):
            loss = self.step()
        return float(loss.numpy())  # waits for the last step's result

    def ready_line(self, graph):
        tf, keras, a = self.tf, self.keras, self.a
        notes = {
            "fp32": "tf.function step, float32",
            "grappler-amp": f"tf.function step, float32 model, grappler {AMP_OPTION}",
            "mixed-bfloat16": "tf.function step, keras mixed_bfloat16 policy, float32 logits",
        }[a.config]
        notes += (f"; optimized step graph: {graph['bf16_nodes']} of {graph['nodes']} nodes "
                  f"bf16, {graph['casts_to_bf16']} Casts to bf16; NHWC; keras "
                  f"{keras.__version__}; TF_ENABLE_ONEDNN_OPTS="
                  f"{os.environ['TF_ENABLE_ONEDNN_OPTS']}; {cpu_flags_note()}")
        if a.config != "fp32" and "avx512f" not in (cpu_flags() or ["avx512f"]):
            notes += ("; no AVX-512 on this CPU: oneDNN has no bf16 kernels here, TensorFlow "
                      "runs the bf16 ops with Eigen")
        if a.model == "dcgan":
            notes += f"; params G {self.params_g} + D {self.params_d}; loss is loss_D"
        elif a.model in ("resnet50", "vgg16"):
            notes += "; " + ("small" if is_small_variant(a.image_size) else "imagenet") + \
                     " variant"
        return {"ready": True, "framework": f"tensorflow {tf.__version__}", "config": a.config,
                "model": a.model, "params": self.params, "threads": a.threads, "notes": notes}


if __name__ == "__main__":
    sys.exit(main())
