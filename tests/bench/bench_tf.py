"""Benchmarks tfwasm against TensorFlow's CPU device, through the real TensorFlow.

Prints, in one run:

(a) eager tiny-op latency: the median time of one ``a + b`` (AddV2 on a [4]
    float32 tensor), on the plugin device and on the CPU, and WASM ÷ CPU;
    then, for scale, the same for ``tf.identity``, which runs TensorFlow's
    own kernel on both devices: the pluggable device's cost per eager op
    before any tfwasm code runs;
(b) MatMul throughput on 1024×1024 float32 (GFLOP/s), plugin device and CPU
    in alternating samples, and WASM ÷ CPU;
(c) the same for 2048×2048 when the 1024 run says it will be quick;
(d) Keras MLP train-step time (784→512→256→10, batch 128) and
(e) small-CNN train-step time (Conv2D+MaxPool ×2, Dropout, Dense; batch 64):
    medians from fresh processes that alternate between the plugin device and
    a reference process whose policy lists no device (TensorFlow's CPU kernels
    only), both with ``jit_compile=False`` (see bench_keras.py), with each
    pair's own ratio so the spread between pairs shows; which of the two
    runs first alternates from pair to pair, so neither always gets the
    fresher machine;
(f) elementwise activations (Exp, Log, Tanh, Sigmoid, Erf, Softplus, Relu) on
    a 1M-element float32 tensor: time per op on each device and WASM ÷ CPU;
(g) a Keras transformer encoder block's train-step time (embedding,
    4-head attention, layer norms, GELU feed-forward; 64 tokens, batch 32),
    measured as (d) and (e);
(h) a Keras LSTM's train-step time (LSTM(64) over 20 steps of 16 features,
    Dense(10); batch 64), measured as (d) and (e);
(i) a small volumetric CNN's train-step time (Conv3D + MaxPooling3D ×2,
    Dense; 16×32×32 volumes, batch 16), measured as (d) and (e);
(j) the Keras MLP of (d) under ``tf.distribute.MirroredStrategy``: samples
    per second over 1 and 2 plugin devices (a batch of 128 per replica), and
    the bytes the gradients' all-reduce moves between devices per step; then
    the same over 1 and 2 logical CPU devices, and 2 plugin devices ÷ 2 CPU
    devices. Both devices share this machine's cores, so two replicas cannot
    be twice as fast as one here: the line reports, it sets no goal.

Both devices get the same inputs, placed on the device before timing, and
every timed batch ends by copying its last result to the host, so queued
work cannot hide. Each figure is a median over samples. Nothing here asserts
a time: this is a measurement, not a test.

Uses the plugin installed in this interpreter (the repo's .venv), or, like
the Python tests, the build named by TFWASM_TEST_LIBRARY.
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


def load_tensorflow():
    reason = plugin_missing_reason()
    if reason:
        sys.exit(f"bench_tf: {reason}")
    os.environ.pop(PLUGIN_ENV, None)
    for key, value in defaults_env().items():
        if key == PLUGIN_ENV or key not in os.environ:
            os.environ[key] = value
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def place(tf, device: str, array):
    with tf.device(device):
        return tf.identity(tf.constant(array))


def alternating_medians(tf, devices: list[str], inputs, op, batches: int, per_batch: int, warmup: int):
    """Median seconds per ``op(*inputs)`` on each device, with the inputs
    placed there first, and the device the last result landed on. Batches
    alternate between the devices, so drift on a shared machine hits both
    alike; each batch ends with a device→host copy of its last result."""
    runs = {}
    for device in devices:
        placed = [place(tf, device, array) for array in inputs]
        ran_on = []

        def batch(device=device, placed=placed, ran_on=ran_on):
            with tf.device(device):
                for _ in range(per_batch):
                    result = op(*placed)
            result.numpy()
            ran_on.append(result.device)

        runs[device] = (batch, ran_on, [])
    for _ in range(warmup):  # kernel lookup, first allocations
        for batch, _, _ in runs.values():
            batch()
    for _ in range(batches):
        for batch, _, samples in runs.values():
            start = time.perf_counter()
            batch()
            samples.append((time.perf_counter() - start) / per_batch)
    return {device: (statistics.median(samples), ran_on[-1]) for device, (_, ran_on, samples) in runs.items()}


def tiny_op_latency(tf, devices: list[str], batches: int, per_batch: int):
    """Median seconds per ``a + b`` (AddV2 on [4] float32) on each device."""
    import numpy as np

    inputs = [np.array([1.0, 2.0, 3.0, 4.0], np.float32), np.array([0.5, 0.25, 0.125, 2.0], np.float32)]
    return alternating_medians(tf, devices, inputs, lambda a, b: a + b, batches, per_batch, warmup=1)


def identity_latency(tf, devices: list[str], batches: int, per_batch: int):
    """Median seconds per ``tf.identity(a)`` on a [4] float32 tensor on each
    device: TensorFlow's own kernel on both (no tfwasm code on its path), so
    its ratio is what a pluggable device costs per eager op before any
    plugin kernel runs."""
    import numpy as np

    inputs = [np.array([1.0, 2.0, 3.0, 4.0], np.float32)]
    return alternating_medians(tf, devices, inputs, tf.identity, batches, per_batch, warmup=1)


def matmul_throughput(tf, devices: list[str], n: int, samples: int, per_sample: int, warmup: int):
    """(GFLOP/s, seconds per op, device) of an n×n MatMul on each device."""
    import numpy as np

    rng = np.random.default_rng(n)
    inputs = [rng.standard_normal([n, n]).astype(np.float32) for _ in range(2)]
    medians = alternating_medians(tf, devices, inputs, tf.linalg.matmul, samples, per_sample, warmup)
    return {device: (2.0 * n**3 / seconds / 1e9, seconds, ran_on) for device, (seconds, ran_on) in medians.items()}


def activation_times(tf, devices: list[str], n: int, samples: int, per_sample: int):
    """{op: {device: (seconds per op, device it ran on)}}, in the order (f)
    prints them, on an n-element float32 tensor (values in [0.25, 4.25), so
    Log is finite)."""
    import numpy as np

    functions = {
        "Exp": tf.math.exp, "Log": tf.math.log, "Tanh": tf.math.tanh, "Sigmoid": tf.math.sigmoid,
        "Erf": tf.math.erf, "Softplus": tf.math.softplus, "Relu": tf.nn.relu,
    }
    x = np.random.default_rng(n).random(n, dtype=np.float32) * 4.0 + 0.25
    return {name: alternating_medians(tf, devices, [x], op, samples, per_sample, warmup=1) for name, op in functions.items()}


def train_step_ratio(model: str, rounds: int, steps: int, device_type: str):
    """Median train-step seconds (plugin, CPU) over ``rounds`` alternating
    process pairs, and each pair's plugin ÷ CPU ratio. Even pairs start with
    the plugin, odd ones with the CPU (ABBA order)."""
    import subprocess
    import tempfile

    from tfwasm_support import make_policy, reference_guest_path, subprocess_env, toml_dumps

    worker = Path(__file__).resolve().parent / "bench_keras.py"
    with tempfile.TemporaryDirectory() as tmp:
        no_device = Path(tmp) / "no-device.toml"
        no_device.write_text(toml_dumps(make_policy(reference_guest_path(), count=0)), encoding="utf-8")
        samples = {"plugin": [], "cpu": []}
        placed = {}
        for index in range(rounds):
            order = [("plugin", None), ("cpu", no_device)]
            for kind, policy in order if index % 2 == 0 else order[::-1]:
                env = subprocess_env(policy_path=policy)
                env["TF_CPP_MIN_LOG_LEVEL"] = "2"
                done = subprocess.run(
                    [sys.executable, str(worker), "--model", model, "--steps", str(steps)],
                    env=env, capture_output=True, text=True, errors="replace", timeout=1800,
                )
                values = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("STEP_SECONDS", "WEIGHTS_ON")))
                if done.returncode != 0 or "STEP_SECONDS" not in values:
                    sys.exit(f"bench_tf: the {model} worker ({kind}) failed:\n{done.stderr[-3000:]}")
                samples[kind].append(float(values["STEP_SECONDS"]))
                placed[kind] = values.get("WEIGHTS_ON", "?")
    pairs = [plugin / cpu for plugin, cpu in zip(samples["plugin"], samples["cpu"])]
    return statistics.median(samples["plugin"]), statistics.median(samples["cpu"]), placed, pairs


def mirrored_scaling(rounds: int, steps: int, device_type: str):
    """Median samples per second of the MLP under MirroredStrategy, keyed by
    (device type, replicas), and the plugin's device-to-device bytes per
    step with two replicas. Rounds alternate the four configurations."""
    import subprocess
    import tempfile

    from tfwasm_support import make_policy, reference_guest_path, subprocess_env, toml_dumps

    worker = Path(__file__).resolve().parent / "bench_keras.py"
    configs = [(device_type, 1), (device_type, 2), ("CPU", 1), ("CPU", 2)]
    samples = {config: [] for config in configs}
    moved = []
    with tempfile.TemporaryDirectory() as tmp:
        policies = {}
        for name, count in [("two", 2), ("none", 0)]:
            policies[name] = Path(tmp) / f"{name}.toml"
            policies[name].write_text(toml_dumps(make_policy(reference_guest_path(), count=count)), encoding="utf-8")
        for index in range(rounds):
            for kind, replicas in configs if index % 2 == 0 else configs[::-1]:
                env = subprocess_env(policy_path=policies["none" if kind == "CPU" else "two"])
                env["TF_CPP_MIN_LOG_LEVEL"] = "2"
                cmd = [sys.executable, str(worker), "--model", "mlp", "--steps", str(steps)]
                cmd += ["--mirrored", kind, "--replicas", str(replicas)]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=1800)
                values = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
                if done.returncode != 0 or "SAMPLES_PER_SECOND" not in values:
                    sys.exit(f"bench_tf: the mirrored worker ({kind} x{replicas}) failed:\n{done.stderr[-3000:]}")
                samples[(kind, replicas)].append(float(values["SAMPLES_PER_SECOND"]))
                if kind != "CPU" and replicas == 2:
                    moved.append(float(values["DEVICE_TO_DEVICE_BYTES"]))
    return {config: statistics.median(values) for config, values in samples.items()}, statistics.median(moved)


def short(device_name: str) -> str:
    return device_name.rsplit("/", 1)[-1].replace("device:", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny-batches", type=int, default=31, help="samples for the tiny-op latency")
    parser.add_argument("--tiny-ops", type=int, default=200, help="ops per tiny-op sample")
    parser.add_argument("--samples", type=int, default=7, help="samples per MatMul size")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up batches per MatMul size")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds the 2048 run may take, or it is skipped")
    parser.add_argument("--train-rounds", type=int, default=5, help="process pairs per Keras model")
    parser.add_argument("--train-steps", type=int, default=60, help="timed train steps per process")
    parser.add_argument("--skip-keras", action="store_true", help="skip (d), (e), (g), (h), (i) and (j)")
    parser.add_argument("--activation-elements", type=int, default=1 << 20, help="tensor size for (f)")
    args = parser.parse_args()

    tf = load_tensorflow()
    device_type = os.environ.get("TFWASM_DEVICE_TYPE", "WASM")
    if not tf.config.list_physical_devices(device_type):
        sys.exit(f"bench_tf: no {device_type} device is listed; run with TFWASM_LOG=info to see why")
    plugin, cpu = f"/device:{device_type}:0", "/device:CPU:0"

    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs, plugin device {plugin}")
    print("medians; every timed batch ends with a device→host copy of its last result\n")

    # (a) tiny-op latency
    latency = tiny_op_latency(tf, [plugin, cpu], args.tiny_batches, args.tiny_ops)
    (wasm_s, wasm_on), (cpu_s, cpu_on) = latency[plugin], latency[cpu]
    print("(a) eager AddV2 on [4] float32, latency per op")
    print(f"    {device_type:<5} {wasm_s * 1e6:9.2f} us   (ran on {short(wasm_on)})")
    print(f"    {'CPU':<5} {cpu_s * 1e6:9.2f} us   (ran on {short(cpu_on)})")
    print(f"    {device_type} / CPU = {wasm_s / cpu_s:.2f}")
    floor = identity_latency(tf, [plugin, cpu], args.tiny_batches, args.tiny_ops)
    (wasm_id, _), (cpu_id, _) = floor[plugin], floor[cpu]
    print("    for scale, TensorFlow's own Identity kernel on the same devices (no tfwasm code on its path):")
    print(f"    {device_type} {wasm_id * 1e6:.2f} us, CPU {cpu_id * 1e6:.2f} us, {device_type} / CPU = {wasm_id / cpu_id:.2f}\n")

    # (b), (c) MatMul throughput
    seconds_1024 = None
    for label, n in (("b", 1024), ("c", 2048)):
        if seconds_1024 is not None:
            # 8x the work per op; warm-up and samples on both devices.
            estimate = 8 * seconds_1024 * (args.warmup + args.samples)
            if estimate > args.budget:
                print(f"({label}) MatMul {n}x{n}: skipped (about {estimate:.0f} s expected, budget {args.budget:.0f} s)")
                break
        throughput = matmul_throughput(tf, [plugin, cpu], n, args.samples, 1, args.warmup)
        (wasm_gflops, wasm_s, wasm_on), (cpu_gflops, cpu_s, cpu_on) = throughput[plugin], throughput[cpu]
        seconds_1024 = seconds_1024 or wasm_s + cpu_s
        print(f"({label}) MatMul {n}x{n} float32, throughput")
        print(f"    {device_type:<5} {wasm_gflops:8.2f} GFLOP/s  ({wasm_s * 1e3:8.2f} ms/op, ran on {short(wasm_on)})")
        print(f"    {'CPU':<5} {cpu_gflops:8.2f} GFLOP/s  ({cpu_s * 1e3:8.2f} ms/op, ran on {short(cpu_on)})")
        print(f"    {device_type} / CPU = {wasm_gflops / cpu_gflops:.2f}\n")

    def train_step(label: str, model: str, what: str):
        wasm_step, cpu_step, placed, pairs = train_step_ratio(model, args.train_rounds, args.train_steps, device_type)
        print(f"({label}) {what}: train-step time (jit_compile=False)")
        print(f"    {device_type:<5} {wasm_step * 1e3:8.2f} ms/step  (weights on {short(placed['plugin'])})")
        print(f"    {'CPU':<5} {cpu_step * 1e3:8.2f} ms/step  (weights on {short(placed['cpu'])})")
        print(f"    {device_type} / CPU = {wasm_step / cpu_step:.2f}")
        listed = " ".join(f"{ratio:.2f}" for ratio in pairs)
        print(f"    each pair: {listed}  (median {statistics.median(pairs):.2f})\n")

    if not args.skip_keras:
        train_step("d", "mlp", "Keras MLP 784-512-256-10, batch 128")
        train_step("e", "cnn", "Keras small CNN, batch 64")

    # (f) elementwise activations
    times = activation_times(tf, [plugin, cpu], args.activation_elements, args.samples, 10)
    print(f"(f) activations on {args.activation_elements} float32 elements, time per op")
    print(f"    {'op':<9} {device_type:>9} {'CPU':>9}   {device_type} / CPU")
    for name, medians in times.items():
        (wasm_s, act_on), (cpu_s, _) = medians[plugin], medians[cpu]
        where = "" if act_on.endswith(f"{device_type}:0") else f"  (ran on {short(act_on)})"
        print(f"    {name:<9} {wasm_s * 1e6:6.0f} us {cpu_s * 1e6:6.0f} us   {wasm_s / cpu_s:5.2f}{where}")
    print()

    if not args.skip_keras:
        train_step("g", "transformer", "Keras transformer encoder block, 64 tokens, batch 32")
        train_step("h", "lstm", "Keras LSTM(64), 20 steps of 16 features, batch 64")
        train_step("i", "volume", "Keras 3-D CNN, 16x32x32 volumes, batch 16")

        rates, moved = mirrored_scaling(max(2, args.train_rounds // 2), args.train_steps, device_type)
        print("(j) Keras MLP of (d) under MirroredStrategy, batch 128 per replica: samples per second")
        for kind in (device_type, "CPU"):
            one, two = rates[(kind, 1)], rates[(kind, 2)]
            print(f"    {kind:<5} x1 {one:9.0f}   x2 {two:9.0f}   x2 / x1 = {two / one:.2f}")
        print(f"    {device_type} x2 / CPU x2 = {rates[(device_type, 2)] / rates[('CPU', 2)]:.2f}")
        print(f"    between the two {device_type} devices: {moved / 1024:.0f} KiB per step (the gradients' all-reduce)\n")

    if not wasm_on.endswith(f"{device_type}:0"):
        print(f"note: MatMul results landed on {short(wasm_on)}: the plugin has no MatMul kernel in this build,")
        print("      so the plugin figures above measure TensorFlow's CPU fallback plus copies.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
