"""Run a few ops on the tfwasm device and check them against NumPy.

    .venv/bin/python host/scripts/demo.py      (host/scripts/demo.sh sets up first)

Exits non-zero when no device of type $TFWASM_DEVICE_TYPE (default WASM) is
listed, when an op falls back to another device, or when a result is wrong.
"""

import os
import sys

# TensorFlow's INFO chatter (CPU feature notes) would bury the demo's output;
# warnings and errors, including the plugin's, still show. Set it yourself to override.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402  (run metadata of tf.function calls)

DEVICE_TYPE = os.environ.get("TFWASM_DEVICE_TYPE", "WASM")
DEVICE = f"/device:{DEVICE_TYPE}:0"
RTOL = ATOL = 1e-4


def short(device: str) -> str:
    """'/job:localhost/replica:0/task:0/device:WASM:0' -> 'WASM:0'."""
    return device.rpartition("device:")[2] or "?"


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)  # keep our lines in order with TF's stderr
    print(f"TensorFlow {tf.__version__}")
    devices = tf.config.list_physical_devices(DEVICE_TYPE)
    print(f"tf.config.list_physical_devices({DEVICE_TYPE!r}) = {devices}")
    if not devices:
        print(f"\nFAIL: no {DEVICE_TYPE} device. Is the tfwasm wheel installed "
              "(bash host/scripts/setup.sh)? The plugin logs why it declined on stderr.")
        return 1

    rng = np.random.default_rng(0)
    a = rng.standard_normal((257, 129), dtype=np.float32)
    b = rng.standard_normal((129, 65), dtype=np.float32)
    row = rng.standard_normal((65,), dtype=np.float32)     # broadcast along rows
    col = rng.standard_normal((257, 1), dtype=np.float32)  # broadcast along columns

    # Eager ops: each result lives where its kernel ran.
    with tf.device(DEVICE):
        product = tf.linalg.matmul(a, b)
        shifted = tf.math.add(product, row)
        scaled = tf.math.multiply(shifted, col)
    expected_product = a @ b
    expected_shifted = expected_product + row
    checks = [
        ("MatMul", "[257,129] @ [129,65]", product, expected_product),
        ("AddV2", "[257,65] + [65]", shifted, expected_shifted),
        ("Mul", "[257,65] * [257,1]", scaled, expected_shifted * col),
    ]

    print(f"\nEager, under tf.device({DEVICE!r}):")
    failures = []
    for op, shape, result, expected in checks:
        ran_on = short(result.device)
        error = float(np.max(np.abs(result.numpy() - expected)))
        try:
            np.testing.assert_allclose(result.numpy(), expected, rtol=RTOL, atol=ATOL)
            verdict = "ok"
        except AssertionError:
            verdict = "WRONG"
            failures.append(f"{op}: result differs from NumPy (max |error| {error:.2e})")
        if ran_on != f"{DEVICE_TYPE}:0":
            verdict = "WRONG DEVICE"
            failures.append(f"{op}: ran on {ran_on}, not {DEVICE_TYPE}:0 (no {DEVICE_TYPE} kernel?)")
        print(f"  {op:<7} {shape:<22} ran on {ran_on:<8} max |error| vs NumPy {error:.1e}  {verdict}")

    # The same ops in a tf.function with no tf.device: TensorFlow places them
    # itself, and a plugin device outranks the CPU wherever it has a kernel.
    @tf.function
    def layer(x, w, bias, scale):
        return (tf.linalg.matmul(x, w) + bias) * scale

    context.enable_run_metadata()
    try:
        layer(a, b, row, col)
        metadata = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    placed = {}
    for function in metadata.function_graphs:
        for graph in function.partition_graphs:
            for node in graph.node:
                if not node.op.startswith("_"):  # skip _Arg/_Retval/_Send/_Recv plumbing
                    placed.setdefault(short(node.device), []).append(node.op)
    print("\nIn a tf.function, placed by TensorFlow:")
    for device, ops in sorted(placed.items()):
        print(f"  {device:<8} {', '.join(sorted(ops))}")

    if failures:
        print("\nFAIL:\n  " + "\n  ".join(failures))
        return 1
    print(f"\nOK: MatMul, AddV2 and Mul ran on {DEVICE_TYPE}:0 and match NumPy.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
