"""Benchmarks TensorFlow's fused products on tfwasm against the ops they replace and the CPU device.

In one run, eagerly, for a Keras-sized dense layer (256×784 · 784×512, bias,
Relu) and a convolution layer (32×28×28×8 * 3×3×8×16, SAME, bias, Relu):

* ``_FusedMatMul`` / ``_FusedConv2D`` on WASM (one op, one write of the output),
* ``MatMul``/``Conv2D``, ``BiasAdd`` and ``Relu`` as three ops on WASM,
* the CPU device's ``_FusedMatMul`` / ``_FusedConv2D``,

each the median time per layer over samples that alternate between the
three, and the ratios. Inputs are placed on the device before timing; every
sample of ``--repeat`` calls ends by copying its last result to the host,
so queued work cannot hide. Nothing here asserts a time.

Measured on the 2-core VM, five runs while other builds shared it (load
2 to 6, so single figures moved by ±30%; the ratios come from alternating
samples):

    dense: fused WASM 1511-2616 us; fused / three ops on WASM 0.89-0.96
           (one run 1.11); fused WASM / fused CPU 0.69-0.95
    conv:  fused WASM 1008-2022 us; fused / three ops on WASM 0.77-0.96;
           fused WASM / fused CPU 0.54-1.01
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from tfwasm_support import PLUGIN_ENV, defaults_env, plugin_missing_reason  # noqa: E402

WASM, CPU = "/device:WASM:0", "/device:CPU:0"


def load_tensorflow():
    reason = plugin_missing_reason()
    if reason:
        sys.exit(f"bench_fused.py: {reason}")
    os.environ.pop(PLUGIN_ENV, None)
    for key, value in defaults_env().items():
        os.environ.setdefault(key, value)
    # The CPU reference is TensorFlow's own kernels, as in the tests.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def fused(tf, op, inputs, bias, **attrs):
    """``op`` with ``fused_ops = [BiasAdd, Relu]``, eagerly."""
    from tensorflow.python.eager import context, execute

    dtype = tf.float32.as_datatype_enum
    flat = ["T", dtype, "num_args", 1, "fused_ops", ["BiasAdd", "Relu"], "epsilon", 1e-4, "leakyrelu_alpha", 0.2]
    if op == "_FusedConv2D":
        flat += ["TArgs", [dtype], "num_host_args", 0]
    for key, value in attrs.items():
        flat += [key, value]
    return execute.execute(op, 1, [*inputs, bias], tuple(flat), context.context())[0]


def timed(run, repeat):
    """Seconds per call of ``run`` over ``repeat`` calls, ending in a copy to the host."""
    start = time.perf_counter()
    for _ in range(repeat):
        y = run()
    y.numpy()
    return (time.perf_counter() - start) / repeat


def compare(tf, name, variants, samples, repeat):
    """Median µs per call of each variant, samples alternating between them."""
    for run, device in variants.values():
        y = run()  # warm-up: kernels built, memory allocated
        assert y.device.endswith(device.removeprefix("/device:")), f"{name} ran on {y.device}"
    times = {key: [] for key in variants}
    for _ in range(samples):
        for key, (run, _) in variants.items():
            times[key].append(timed(run, repeat))
    medians = {key: statistics.median(values) * 1e6 for key, values in times.items()}
    fused_wasm, three, fused_cpu = medians["fused WASM"], medians["three WASM ops"], medians["fused CPU"]
    print(f"{name}: fused WASM {fused_wasm:.0f} us, three WASM ops {three:.0f} us, fused CPU {fused_cpu:.0f} us")
    print(f"  fused / three ops on WASM {fused_wasm / three:.2f}, fused WASM / fused CPU {fused_wasm / fused_cpu:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    tf = load_tensorflow()
    import numpy as np

    rng = np.random.default_rng(1)

    def placed(device, shape):
        value = rng.standard_normal(shape).astype(np.float32)
        with tf.device(device):
            return tf.identity(tf.constant(value))

    # A dense layer.
    operands = {device: (placed(device, [256, 784]), placed(device, [784, 512]), placed(device, [512])) for device in (WASM, CPU)}

    def dense_fused(device):
        x, w, b = operands[device]

        def run():
            with tf.device(device):
                return fused(tf, "_FusedMatMul", [x, w], b, transpose_a=False, transpose_b=False)

        return run

    def dense_three():
        x, w, b = operands[WASM]
        with tf.device(WASM):
            return tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b))

    compare(
        tf,
        "dense 256x784x512 + bias + relu",
        {"fused WASM": (dense_fused(WASM), WASM), "three WASM ops": (dense_three, WASM), "fused CPU": (dense_fused(CPU), CPU)},
        args.samples,
        args.repeat,
    )

    # A convolution layer.
    conv_operands = {
        device: (placed(device, [32, 28, 28, 8]), placed(device, [3, 3, 8, 16]), placed(device, [16])) for device in (WASM, CPU)
    }
    conv_attrs = dict(strides=[1, 1, 1, 1], padding="SAME", explicit_paddings=[], data_format="NHWC", dilations=[1, 1, 1, 1])

    def conv_fused(device):
        x, w, b = conv_operands[device]

        def run():
            with tf.device(device):
                return fused(tf, "_FusedConv2D", [x, w], b, **conv_attrs)

        return run

    def conv_three():
        x, w, b = conv_operands[WASM]
        with tf.device(WASM):
            return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))

    compare(
        tf,
        "conv 32x28x28x8 * 3x3x8x16 + bias + relu",
        {"fused WASM": (conv_fused(WASM), WASM), "three WASM ops": (conv_three, WASM), "fused CPU": (conv_fused(CPU), CPU)},
        args.samples,
        args.repeat,
    )


if __name__ == "__main__":
    main()
