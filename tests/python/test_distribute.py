"""tf.distribute on tfwasm: TensorFlow's own distribution engine, unchanged.

* ``MirroredStrategy`` over two WASM devices (a policy with ``count = 2``):
  Keras ``fit``/``evaluate``/``predict`` and a custom loop with
  ``strategy.run`` and an explicit ``all_reduce``, against the same program
  on two logical CPU devices. Each all-reduce runs TensorFlow's collective
  kernels, which call the device's own ``Add``/``Div`` kernels and require
  them to write into a forwarded input.
* ``MultiWorkerMirroredStrategy`` across worker processes on loopback
  (``TF_CONFIG``), with the plugin registered as ``GPU``: that strategy takes
  only GPU (else CPU) local devices.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tfwasm_support import REFERENCE_GUEST_NAME, SCRIPT_PRELUDE, TfRun, make_policy, subprocess_env, toml_dumps

# One program, two device sets: `DEVICES` is "wasm" (two WASM devices) or
# "cpu" (two logical CPU devices, and a plugin that lists no device).
MIRRORED = """
import json
import keras

if DEVICES == "cpu":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    devices = ["/device:CPU:0", "/device:CPU:1"]
else:
    devices = ["/device:WASM:0", "/device:WASM:1"]
strategy = tf.distribute.MirroredStrategy(devices=devices)

rng = np.random.default_rng(0)
# 250 samples: the last global batch of 64 is 58, split 29/29.
x = rng.standard_normal([250, 31]).astype(np.float32)
y = (x[:, :1] * 0.5 - x[:, 1:2] + 0.1).astype(np.float32)


def build():
    model = keras.Sequential([keras.Input((31,)), keras.layers.Dense(131, activation="relu"), keras.layers.Dense(1)])
    init = np.random.default_rng(1)
    model.set_weights([init.standard_normal(w.shape).astype(np.float32) * 0.1 for w in model.get_weights()])
    return model


def replicas_identical(model):
    return all(
        all(np.array_equal(v.value.values[0].numpy(), c.numpy()) for c in v.value.values) for v in model.weights
    )


with strategy.scope():
    model = build()
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
if DEVICES == "wasm":
    import tfwasm.traffic

    before = tfwasm.traffic.read()
history = model.fit(x, y, batch_size=64, epochs=3, shuffle=False, verbose=0)
if DEVICES == "wasm":
    result("fit_traffic", json.dumps(tfwasm.traffic.since(before)))
result("fit_loss", json.dumps(history.history["loss"]))
result("evaluate", json.dumps(model.evaluate(x, y, batch_size=64, verbose=0)))
result("predict", json.dumps(model.predict(x[:37], batch_size=16, verbose=0).ravel().tolist()))
result("fit_replicas_identical", replicas_identical(model))
result("variable_devices", json.dumps([c.device for c in model.weights[0].value.values]))
result("parameter_bytes", sum(w.nbytes for w in model.get_weights()))

# A custom loop: strategy.run, the optimizer's own all-reduce, an explicit one.
with strategy.scope():
    loop_model = build()
    optimizer = keras.optimizers.SGD(0.05)
global_batch = 50
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
replica_sums = []


@tf.function
def train_step(xb, yb):
    def step(xb, yb):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(loop_model(xb, training=True) - yb), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, loop_model.trainable_variables)
        optimizer.apply_gradients(zip(grads, loop_model.trainable_variables))
        context = tf.distribute.get_replica_context()
        # Each replica's own id plus its batch's sum, summed over replicas.
        mine = tf.cast(context.replica_id_in_sync_group, tf.float32) + tf.reduce_sum(xb, axis=0)
        return loss, context.all_reduce("sum", mine)

    losses, sums = strategy.run(step, args=(xb, yb))
    return strategy.reduce("SUM", losses, axis=None), strategy.experimental_local_results(sums)


loop_losses = []
all_reduce_ok = True
for epoch in range(2):
    for start, batch in enumerate(strategy.experimental_distribute_dataset(dataset)):
        loss, sums = train_step(*batch)
        loop_losses.append(float(loss))
        rows = x[start * global_batch:(start + 1) * global_batch]
        want = rows.astype(np.float64).sum(axis=0) + 1.0  # replica ids 0 + 1
        all_reduce_ok = all_reduce_ok and all(np.allclose(s.numpy(), want, rtol=1e-5, atol=1e-4) for s in sums)
        all_reduce_ok = all_reduce_ok and all(np.array_equal(s.numpy(), sums[0].numpy()) for s in sums)
result("loop_loss", json.dumps(loop_losses))
result("all_reduce_ok", all_reduce_ok)
result("loop_replicas_identical", replicas_identical(loop_model))
result("loop_weights", json.dumps([w.ravel()[:8].tolist() for w in loop_model.get_weights()]))
cpu_check()
"""


def close(got: list[float], want: list[float], rtol: float) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= rtol * max(abs(w), 1e-6) for g, w in zip(got, want))


@pytest.fixture(scope="module")
def mirrored_runs(tmp_path_factory, reference_guest):
    """The mirrored program on two WASM devices and on two logical CPUs."""
    folder = tmp_path_factory.mktemp("mirrored")
    runs = {}
    for devices, count in [("wasm", 2), ("cpu", 0)]:
        policy = folder / f"{devices}.toml"
        policy.write_text(toml_dumps(make_policy(reference_guest, REFERENCE_GUEST_NAME, count=count)), encoding="utf-8")
        code = f"DEVICES = {devices!r}\n" + textwrap.dedent(MIRRORED)
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT_PRELUDE + code],
            env=subprocess_env(None, policy),
            cwd=folder,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=600,
        )
        run = TfRun(done.returncode, done.stdout, done.stderr)
        assert run.returncode == 0, f"{devices}: {run.describe()}"
        runs[devices] = run
    return runs


def test_mirrored_keras_fit_matches_two_cpu_devices(mirrored_runs):
    wasm, cpu = mirrored_runs["wasm"].results(), mirrored_runs["cpu"].results()
    assert json.loads(wasm["variable_devices"]) == [
        "/job:localhost/replica:0/task:0/device:WASM:0",
        "/job:localhost/replica:0/task:0/device:WASM:1",
    ], mirrored_runs["wasm"].describe()
    for key in ["fit_loss", "evaluate", "predict"]:
        got, want = json.loads(wasm[key]), json.loads(cpu[key])
        got, want = (got if isinstance(got, list) else [got]), (want if isinstance(want, list) else [want])
        assert close(got, want, 1e-5), f"{key}: WASM {got} vs CPU {want}"
    assert wasm["fit_replicas_identical"] == "True", "the two WASM replicas' variables differ after fit"
    # The gradients' all-reduce moves device to device: a ring over two
    # devices sends each device's half of the gradients to the other twice
    # (reduce, then gather), two parameter sizes a step in all. Only the
    # batches and the loss cross the host, far less than a gradient.
    steps, parameter_bytes = 3 * 4, int(wasm["parameter_bytes"])
    traffic = json.loads(wasm["fit_traffic"])
    between = sum(d["device_to_device"]["bytes"] for d in traffic)
    to_host = sum(d["device_to_host"]["bytes"] for d in traffic)
    assert between >= steps * parameter_bytes, f"{between} bytes device to device in {steps} steps: {traffic}"
    assert to_host < steps * parameter_bytes / 2, f"{to_host} bytes to the host in {steps} steps: {traffic}"
    losses = json.loads(wasm["fit_loss"])
    assert losses[-1] < losses[0], losses


def test_mirrored_custom_loop_and_all_reduce(mirrored_runs):
    wasm, cpu = mirrored_runs["wasm"].results(), mirrored_runs["cpu"].results()
    assert wasm["all_reduce_ok"] == "True", "all_reduce on two WASM devices differs from NumPy"
    assert cpu["all_reduce_ok"] == "True", mirrored_runs["cpu"].describe()
    assert close(json.loads(wasm["loop_loss"]), json.loads(cpu["loop_loss"]), 1e-5)
    for got, want in zip(json.loads(wasm["loop_weights"]), json.loads(cpu["loop_weights"])):
        assert close(got, want, 1e-5), (got, want)
    assert wasm["loop_replicas_identical"] == "True"
    assert wasm["cpu"].startswith("2.0@"), mirrored_runs["wasm"].describe()


# --------------------------------------------------------------- multi-worker

WORKER = """
import json
import os
import keras

out_path, steps, die_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=float(os.environ["COLLECTIVE_TIMEOUT"]))
strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
rng = np.random.default_rng(0)
x = rng.standard_normal([384, 31]).astype(np.float32)
y = (x[:, :1] * 0.5 - x[:, 1:2] + 0.1).astype(np.float32)
global_batch = 48
with strategy.scope():
    model = keras.Sequential([keras.Input((31,)), keras.layers.Dense(67, activation="relu"), keras.layers.Dense(1)])
    init = np.random.default_rng(1)
    model.set_weights([init.standard_normal(w.shape).astype(np.float32) * 0.1 for w in model.get_weights()])
    optimizer = keras.optimizers.SGD(0.05)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).repeat()
batches = iter(strategy.experimental_distribute_dataset(dataset))


@tf.function
def train_step(batch):
    def step(xb, yb):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(model(xb, training=True) - yb), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return strategy.reduce("SUM", strategy.run(step, args=batch), axis=None)


losses = []
for i in range(steps):
    if i == die_at and task == 1:
        os._exit(17)  # a worker that dies mid-run, without a word to its peers
    losses.append(float(train_step(next(batches))))
with open(out_path, "w") as f:
    json.dump({
        "losses": losses,
        "weights": [w.ravel().tolist() for w in model.get_weights()],
        "devices": [v.value.device for v in model.weights],
    }, f)
"""


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(tmp_path, reference_guest, n: int, steps: int, die_at: int = -1, timeout_s: int = 20):
    """Starts `n` workers on loopback; returns [(returncode, output, seconds, result or None)]."""
    policy = tmp_path / "gpu.toml"
    policy.write_text(toml_dumps(make_policy(reference_guest, REFERENCE_GUEST_NAME)), encoding="utf-8")
    ports = free_ports(n)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT_PRELUDE + textwrap.dedent(WORKER), encoding="utf-8")
    started = time.monotonic()
    workers = []
    for i in range(n):
        env = subprocess_env(
            {
                "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                "TFWASM_DEVICE_TYPE": "GPU",
                "COLLECTIVE_TIMEOUT": timeout_s,
            },
            policy,
        )
        out = tmp_path / f"worker{i}.json"
        log = open(tmp_path / f"worker{i}.log", "w+", encoding="utf-8")
        cmd = [sys.executable, str(script), str(out), str(steps), str(die_at)]
        workers.append((subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT), out, log))
    outcomes = []
    for proc, out, log in workers:
        try:
            proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            for other, _, _ in workers:
                other.kill()
            pytest.fail(f"a worker hung past 600 s: {tmp_path}")
        log.seek(0)
        text = log.read()
        log.close()
        outcomes.append((proc.returncode, text, time.monotonic() - started, json.loads(out.read_text()) if out.exists() else None))
    return outcomes


def check_identical_training(outcomes, n: int):
    for i, (code, text, _, found) in enumerate(outcomes):
        assert code == 0 and found, f"worker {i} failed ({code}):\n{text[-6000:]}"
        assert all(d.endswith("/device:GPU:0") for d in found["devices"]), found["devices"]
        assert f"/job:worker/replica:0/task:{i}/" in found["devices"][0], found["devices"]
    first = outcomes[0][3]
    for i, (_, _, _, found) in enumerate(outcomes[1:], start=1):
        assert found["weights"] == first["weights"], f"worker {i} ended with other variables than worker 0"
        assert found["losses"] == first["losses"]
    losses = first["losses"]
    per_epoch = 8  # 384 samples in global batches of 48
    assert sum(losses[-per_epoch:]) < sum(losses[:per_epoch]), losses


def test_two_workers_train_to_identical_variables(tmp_path, reference_guest):
    check_identical_training(run_workers(tmp_path, reference_guest, 2, steps=24), 2)


def test_three_workers_train_to_identical_variables(tmp_path, reference_guest):
    check_identical_training(run_workers(tmp_path, reference_guest, 3, steps=16), 3)


def test_a_dead_worker_is_an_error_within_the_timeout(tmp_path, reference_guest):
    timeout_s = 20
    outcomes = run_workers(tmp_path, reference_guest, 2, steps=24, die_at=3, timeout_s=timeout_s)
    (code0, text0, seconds0, found0), (code1, _, _, _) = outcomes
    assert code1 == 17, "the worker meant to die did not"
    assert code0 != 0 and found0 is None, f"worker 0 finished although its peer died:\n{text0[-4000:]}"
    assert "UnavailableError" in text0 or "DeadlineExceededError" in text0, text0[-6000:]
    assert "Traceback" in text0 and "Fatal Python error" not in text0 and "Check failed" not in text0, text0[-6000:]
    # Start-up (TensorFlow's import, the cluster's rendezvous) plus the
    # collective's own timeout, with room for a loaded CI machine.
    assert seconds0 < 120 + timeout_s, f"worker 0 took {seconds0:.0f} s to give up"
