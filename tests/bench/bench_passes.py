"""The optimizer's passes inside the real TensorFlow: what a swap costs, and
what the pass pipeline adds to optimizing a Keras train step.

Prints, in one process with the installed wheel and its default policy:

(a) swap: the median time of ``tfwasm.passes.swap`` between the two
    reference passes' files (the compile cache warm: each file was loaded
    once before timing), and the time to first use: swap, then trace and
    run a fresh small ``tf.function`` on the device, less the same without
    a swap; for scale, the same trace and run on TensorFlow's CPU device;
(b) pipeline: the time to trace, optimize and run the first step of a
    Keras MLP train step (784→512→256→10, Adam) on the device with the
    passes on and with them off (``tfwasm.passes.disable``), alternating,
    and on ÷ off; and the same first step on the CPU device for scale.

The native path the passes replaced (the plugin's own fusion, kept as the
reference pass's oracle) is compared with the pass, graph by graph, by
``cargo bench -p tfwasm-fuse-pass --bench pass``. Nothing here asserts a
time.

    .venv/bin/python tests/bench/bench_passes.py [--swaps 41] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--swaps", type=int, default=41, help="timed swaps")
    parser.add_argument("--rounds", type=int, default=9, help="first steps timed per setting")
    args = parser.parse_args()

    import numpy as np
    import tensorflow as tf
    import tfwasm.passes

    if not tf.config.list_physical_devices("WASM"):
        sys.exit("bench_passes: no WASM device (is the tfwasm wheel installed?)")
    passes = {p["slot"]: p for p in tfwasm.passes.list()}
    if not {"fuse-contraction", "fuse-elementwise"} <= passes.keys():
        sys.exit(f"bench_passes: the default policy's passes are not loaded: {sorted(passes)}")
    slot = "fuse-elementwise"
    with tempfile.TemporaryDirectory() as tmp:
        files = [Path(tmp) / "a.wasm", Path(tmp) / "b.wasm"]
        shutil.copyfile(passes["fuse-elementwise"]["path"], files[0])
        shutil.copyfile(passes["fuse-contraction"]["path"], files[1])
        for f in files:  # warm the compile cache
            tfwasm.passes.swap(slot, f)

        x = tf.random.normal((64, 64))

        def first_run(device: str) -> float:
            started = time.perf_counter()
            with tf.device(device):
                y = tf.function(lambda v: tf.reduce_sum(tf.nn.relu(v * 2.0 + 1.0)))(x)
            y.numpy()
            return time.perf_counter() - started

        swaps, with_swap, without_swap, cpu_first = [], [], [], []
        for i in range(args.swaps):
            started = time.perf_counter()
            tfwasm.passes.swap(slot, files[i % 2])
            swaps.append(time.perf_counter() - started)
            with_swap.append(swaps[-1] + first_run("/device:WASM:0"))
            without_swap.append(first_run("/device:WASM:0"))
            cpu_first.append(first_run("/device:CPU:0"))
        tfwasm.passes.swap(slot, passes[slot]["path"])

    ms = lambda values: statistics.median(values) * 1e3  # noqa: E731
    print("(a) swap, compile cache warm")
    print(f"    tfwasm.passes.swap:                       {ms(swaps):8.2f} ms (median of {len(swaps)})")
    print(f"    swap to first use (swap + first step − first step): {ms(with_swap) - ms(without_swap):8.2f} ms")
    print(f"    for scale: a fresh small tf.function's first run: WASM {ms(without_swap):.2f} ms, CPU {ms(cpu_first):.2f} ms")

    import keras
    from keras import layers

    rng = np.random.default_rng(0)
    data = rng.standard_normal((128, 784)).astype(np.float32)
    labels = rng.integers(0, 10, 128)

    def keras_first_step(device: str) -> float:
        with tf.device(device):
            net = keras.Sequential([keras.Input((784,)), layers.Dense(512, activation="relu"),
                                    layers.Dense(256, activation="relu"), layers.Dense(10)])
            net.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        jit_compile=False)
            started = time.perf_counter()
            net.train_on_batch(data, labels)
        return time.perf_counter() - started

    keras_first_step("/device:WASM:0")  # warm: Keras' own first-use costs
    on, off, cpu = [], [], []
    for _ in range(args.rounds):
        for p in passes:
            tfwasm.passes.enable(p)
        on.append(keras_first_step("/device:WASM:0"))
        for p in passes:
            tfwasm.passes.disable(p)
        off.append(keras_first_step("/device:WASM:0"))
        cpu.append(keras_first_step("/device:CPU:0"))
    for p in passes:
        tfwasm.passes.enable(p)
    print("(b) Keras MLP train step: trace, optimize and run the first step")
    print(f"    WASM, passes on:  {ms(on):8.1f} ms")
    print(f"    WASM, passes off: {ms(off):8.1f} ms   on ÷ off {statistics.median(on) / statistics.median(off):.3f}"
          f"   (+{ms(on) - ms(off):.1f} ms)")
    print(f"    CPU:              {ms(cpu):8.1f} ms   WASM on ÷ CPU {statistics.median(on) / statistics.median(cpu):.3f}")


if __name__ == "__main__":
    main()
