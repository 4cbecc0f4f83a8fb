"""One Keras training benchmark worker: median train-step time of a model.

Run by bench_tf.py, once with the WASM device listed and once with a
policy of ``[device] count = 0`` (TensorFlow's CPU kernels only), in
alternating fresh processes. Prints ``STEP_SECONDS <median>`` and the
device the weights live on. Both runs use ``jit_compile=False``: XLA
exists only for the CPU, and the comparison is kernel against kernel.

    python bench_keras.py --model mlp|cnn|volume|transformer|lstm [--steps 60]
    python bench_keras.py --model mlp --mirrored WASM|CPU --replicas N

With ``--mirrored`` the model trains under ``tf.distribute.MirroredStrategy``
over N devices of that type (N logical CPU devices for ``CPU``), each
replica with the model's batch, and the worker also prints
``SAMPLES_PER_SECOND`` and, for the plugin, ``DEVICE_TO_DEVICE_BYTES`` per
step (from ``tfwasm.traffic``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time


VOCABULARY = 1000


def build(model: str, strategy=None):
    if strategy is not None:
        with strategy.scope():
            return build(model)
    import keras
    from keras import layers

    if model == "mlp":
        # An MNIST-sized MLP.
        net = keras.Sequential([
            keras.Input((784,)),
            layers.Dense(512, activation="relu"),
            layers.Dense(256, activation="relu"),
            layers.Dense(10),
        ])
        shape, batch = (784,), 128
    elif model == "transformer":
        # One encoder block over 64 tokens: embedding, 4-head attention
        # (einsums), layer norms, an exact-GELU feed-forward layer.
        inputs = keras.Input((64,), dtype="int32")
        h = layers.Embedding(VOCABULARY, 64)(inputs)
        h = layers.LayerNormalization()(h + layers.MultiHeadAttention(num_heads=4, key_dim=16)(h, h))
        f = layers.Dense(64)(layers.Dense(128, activation="gelu")(h))
        h = layers.LayerNormalization()(h + layers.Dropout(0.1)(f))
        net = keras.Model(inputs, layers.Dense(10)(layers.GlobalAveragePooling1D()(h)))
        shape, batch = (64,), 32
    elif model == "lstm":
        # A recurrence: one LSTM over 20 steps of 16 features. TensorFlow
        # runs it as a while loop of small kernels, one step after another.
        net = keras.Sequential([keras.Input((20, 16)), layers.LSTM(64), layers.Dense(10)])
        shape, batch = (20, 16), 64
    elif model == "volume":
        # A small volumetric CNN (Conv3D + MaxPooling3D ×2): 16×32×32
        # single-channel volumes, as in medical imaging.
        net = keras.Sequential([
            keras.Input((16, 32, 32, 1)),
            layers.Conv3D(8, 3, activation="relu", padding="same"),
            layers.MaxPooling3D(),
            layers.Conv3D(16, 3, activation="relu"),
            layers.MaxPooling3D(),
            layers.Flatten(),
            layers.Dense(10),
        ])
        shape, batch = (16, 32, 32, 1), 16
    else:
        # The small CNN of the training-parity test.
        net = keras.Sequential([
            keras.Input((28, 28, 1)),
            layers.Conv2D(8, 3, activation="relu", padding="same"),
            layers.MaxPooling2D(),
            layers.Conv2D(16, 3, activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dropout(0.25),
            layers.Dense(10),
        ])
        shape, batch = (28, 28, 1), 64
    net.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
    )
    return net, shape, batch


def train_data(model: str, shape: tuple, batch: int, steps: int):
    """`steps` batches of random inputs (token ids for the transformer) and labels."""
    import numpy as np

    rng = np.random.default_rng(7)
    if model == "transformer":
        x = rng.integers(0, VOCABULARY, size=(batch * steps, *shape)).astype(np.int32)
    else:
        x = rng.random((batch * steps, *shape)).astype(np.float32)
    return x, rng.integers(0, 10, size=batch * steps).astype(np.int64)


def timed_fit(net, x, y, batch: int, before=None, timed=contextlib.nullcontext) -> float:
    """The median train-step time of one epoch over `x`, `y`, after five
    batches that trace and warm up. `before()` runs just before the timed
    epoch, which runs inside the context manager `timed()`."""
    import keras

    ends = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            ends.append(time.perf_counter())

    net.fit(x[: batch * 5], y[: batch * 5], batch_size=batch, epochs=1, verbose=0)  # trace and warm up
    if before is not None:
        before()
    with timed():
        net.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[Clock()])
    return statistics.median(b - a for a, b in zip(ends, ends[1:]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["mlp", "cnn", "volume", "transformer", "lstm"], required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--mirrored", metavar="TYPE", help="train under MirroredStrategy over devices of TYPE")
    parser.add_argument("--replicas", type=int, default=1, help="devices for --mirrored")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    keras.utils.set_random_seed(7)
    strategy = None
    if args.mirrored:
        import tensorflow as tf

        if args.mirrored == "CPU":
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
        strategy = tf.distribute.MirroredStrategy([f"/device:{args.mirrored}:{i}" for i in range(args.replicas)])
    net, shape, batch = build(args.model, strategy)
    batch *= args.replicas
    x, y = train_data(args.model, shape, batch, args.steps)
    # The device-to-device bytes of the timed epoch, counted from after the warm-up.
    traffic = []
    read_traffic = None
    if args.mirrored and args.mirrored != "CPU":
        import tfwasm.traffic

        def read_traffic():
            traffic.append(tfwasm.traffic.read())

    step = timed_fit(net, x, y, batch, before=read_traffic)
    print(f"STEP_SECONDS {step:.9f}")
    print(f"SAMPLES_PER_SECOND {batch / step:.3f}")
    if traffic:
        moved = sum(d["device_to_device"]["bytes"] for d in tfwasm.traffic.since(traffic[0]))
        print(f"DEVICE_TO_DEVICE_BYTES {moved / args.steps:.0f}")
    print(f"WEIGHTS_ON {net.trainable_variables[0].value.device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
