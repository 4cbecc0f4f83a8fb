"""Optimizer passes swapped while a program trains, in the real TensorFlow.

``tfwasm.passes`` talks to the plugin TensorFlow loaded: it lists the
policy's passes, swaps the file behind one, and turns one off and on. A swap
loads the new file before anything changes, so a broken file is refused and
the old pass goes on; graphs optimized after a swap (a retraced step) use the
new pass. A policy entry with ``watch = true`` picks up a changed file by
itself.

The two builds swapped are the two reference passes (``fuse-elementwise``
and ``fuse-contraction``): different files that both keep every result. The
broken build is a truncated copy of one of them.
"""

from __future__ import annotations

import json
import shutil

import numpy as np

from test_training import LOSS_RTOL
from tfwasm_support import GUEST_BUILD_DIR, make_policy, reference_guest_path

FUSE_PASS = GUEST_BUILD_DIR / "tfwasm_fuse_pass.wasm"
CONTRACTION_PASS = GUEST_BUILD_DIR / "tfwasm_contraction_pass.wasm"
SLOT = "rewrite"
TIMEOUT = 900


def policy_with_pass(path, watch=False) -> dict:
    policy = make_policy(reference_guest_path())
    policy["pass"] = [{"name": SLOT, "path": str(path), "watch": watch}]
    return policy


def builds(tmp_path):
    """The two good builds and a broken one, as files of the test's own."""
    good_a, good_b, broken = tmp_path / "a.wasm", tmp_path / "b.wasm", tmp_path / "broken.wasm"
    shutil.copyfile(FUSE_PASS, good_a)
    shutil.copyfile(CONTRACTION_PASS, good_b)
    data = FUSE_PASS.read_bytes()
    broken.write_bytes(data[: len(data) // 2])
    return good_a, good_b, broken


# A Keras MLP trained one step per iteration, through a tf.function made
# anew each time (so each step is traced and optimized again), on WASM and,
# for reference, on the CPU. Before each step the pass is swapped: to build
# a or b in turn, and every fifth time to the broken build, which must be
# refused with the old pass left in place.
SWAPS = """
import json, keras
import tfwasm.passes
from keras import layers

A, B, BROKEN = {a!r}, {b!r}, {broken!r}
keras.utils.set_random_seed(7)
rng = np.random.default_rng(7)
x = rng.standard_normal((64, 20)).astype(np.float32)
y = rng.standard_normal((64, 8)).astype(np.float32)

def build(device):
    with tf.device(device):
        keras.utils.set_random_seed(7)
        net = keras.Sequential([keras.Input((20,)), layers.Dense(16, activation="relu"),
                                layers.Dense(16, activation="tanh"), layers.Dense(8)])
        opt = keras.optimizers.Adam(1e-3)
        opt.build(net.trainable_variables)
    return net, opt

def fresh_step(device, net, opt):
    @tf.function(jit_compile=False)
    def step(x, y):
        with tf.device(device):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(net(x, training=True) - y))
            opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        return loss
    return step

wasm, cpu = build("/device:WASM:0"), build("/device:CPU:0")
losses, cpu_losses, seen, refused, failed_steps = [], [], [], [], 0
for i in range({count}):
    target = BROKEN if i % 5 == 4 else (A if i % 2 == 0 else B)
    try:
        tfwasm.passes.swap("{slot}", target)
    except tfwasm.passes.PassError as error:
        refused.append(str(error))
    try:
        losses.append(float(fresh_step("/device:WASM:0", *wasm)(x, y)))
    except Exception as error:  # a failed step is what this test looks for
        failed_steps += 1
        losses.append(repr(error))
    cpu_losses.append(float(fresh_step("/device:CPU:0", *cpu)(x, y)))
    (entry,) = tfwasm.passes.list()
    seen.append({{k: entry[k] for k in ("name", "path", "generation", "calls", "rewrites", "failures")}})
result("cases", json.dumps(dict(losses=losses, cpu_losses=cpu_losses, seen=seen, refused=refused,
                                failed_steps=failed_steps,
                                device=wasm[0].trainable_variables[0].value.device)))
"""


def test_a_hundred_swaps_while_training_retraces(run_tf, tmp_path):
    a, b, broken = builds(tmp_path)
    count = 100
    done = run_tf(
        SWAPS.format(a=str(a), b=str(b), broken=str(broken), count=count, slot=SLOT),
        policy=policy_with_pass(a),
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.describe()
    out = json.loads(done.results()["cases"])
    assert out["device"].endswith("WASM:0")
    assert out["failed_steps"] == 0, out["losses"]
    np.testing.assert_allclose(out["losses"], out["cpu_losses"], rtol=LOSS_RTOL)

    # Every good swap is in the list: a new generation, the file and the
    # pass it holds; a broken one changes nothing and says why.
    broken_swaps = count // 5
    assert len(out["refused"]) == broken_swaps
    assert all(str(broken) in reason or "broken.wasm" in reason for reason in out["refused"]), out["refused"][0]
    seen = out["seen"]
    for i, entry in enumerate(seen):
        expected = str(broken if i % 5 == 4 else (a if i % 2 == 0 else b))
        if i % 5 == 4:
            assert entry["generation"] == seen[i - 1]["generation"], f"swap {i}: a refused build changed the pass"
            assert entry["path"] == seen[i - 1]["path"]
        else:
            assert entry["path"] == expected, f"swap {i}"
            assert entry["name"] == ("fuse-elementwise" if i % 2 == 0 else "fuse-contraction"), f"swap {i}"
        # The retraced step was optimized with the pass then installed.
        before = seen[i - 1]["calls"] if i else 0
        assert entry["calls"] > before, f"step {i} did not run the pass"
        assert entry["failures"] == 0
    assert seen[-1]["generation"] == 1 + count - broken_swaps
    # Both builds rewrote the step they were given (fusion of the update,
    # contraction of the dense layers).
    assert seen[-1]["rewrites"] >= count - broken_swaps


# A policy entry with watch = true: the file is replaced on disk, first by
# the other good build (picked up), then by a broken one (refused: the pass
# in place stays and the log says why).
WATCH = """
import json, os, shutil, time
import tfwasm.passes

PATH, OTHER, BROKEN = {path!r}, {other!r}, {broken!r}

def replace(source):
    staged = PATH + ".staged"
    shutil.copyfile(source, staged)
    os.replace(staged, PATH)  # what a build tool's atomic write looks like

def wait_for(condition, limit=10.0):
    started = time.monotonic()
    while time.monotonic() - started < limit:
        (entry,) = tfwasm.passes.list()
        if condition(entry):
            return entry, time.monotonic() - started
        time.sleep(0.01)
    (entry,) = tfwasm.passes.list()
    return entry, None

(first,) = tfwasm.passes.list()
time.sleep(0.05)  # a new modification time even on coarse clocks
replace(OTHER)
swapped, latency = wait_for(lambda e: e["generation"] == 2)
time.sleep(0.05)
replace(BROKEN)
time.sleep(1.5)  # several watch intervals
(after_broken,) = tfwasm.passes.list()
result("cases", json.dumps(dict(first=first, swapped=swapped, latency=latency, after_broken=after_broken)))
"""


def test_a_watched_pass_file_is_picked_up_when_it_changes(run_tf, tmp_path):
    a, b, broken = builds(tmp_path)
    watched = tmp_path / "watched.wasm"
    shutil.copyfile(a, watched)
    done = run_tf(
        WATCH.format(path=str(watched), other=str(b), broken=str(broken)),
        policy=policy_with_pass(watched, watch=True),
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.describe()
    out = json.loads(done.results()["cases"])
    assert out["first"]["name"] == "fuse-elementwise" and out["first"]["generation"] == 1
    assert out["latency"] is not None, f"the changed file was never picked up: {out['swapped']}"
    print(f"watch: a changed pass file was in place after {out['latency'] * 1e3:.0f} ms")
    assert out["swapped"]["name"] == "fuse-contraction"
    # The broken file is refused; the pass in place stays.
    assert out["after_broken"]["generation"] == 2 and out["after_broken"]["name"] == "fuse-contraction"
    assert "changed on disk but is not swapped in" in done.stderr and "watched.wasm" in done.stderr, done.describe()


# What the API refuses, and enable/disable.
CONTROL = """
import json
import tfwasm.passes

def refusal(call, *args):
    try:
        call(*args)
    except tfwasm.passes.PassError as error:
        return str(error)
    return None

out = dict(
    unknown_slot=refusal(tfwasm.passes.swap, "nope", {good!r}),
    missing_file=refusal(tfwasm.passes.swap, "{slot}", {missing!r}),
    device_guest=refusal(tfwasm.passes.swap, "{slot}", {device_guest!r}),
    unknown_enable=refusal(tfwasm.passes.enable, "nope"),
)
x = tf.random.normal((8, 8))

def step():
    return float(tf.function(lambda x: tf.reduce_sum(tf.nn.relu(x * 2.0 + 1.0)))(x))

step()
(on,) = tfwasm.passes.list()
tfwasm.passes.disable("{slot}")
step()
(off,) = tfwasm.passes.list()
tfwasm.passes.enable("{slot}")
step()
(again,) = tfwasm.passes.list()
out.update(on=on, off=off, again=again)
result("cases", json.dumps(out))
"""


def test_the_api_refuses_what_it_cannot_do_and_turns_passes_off_and_on(run_tf, tmp_path):
    a, _, _ = builds(tmp_path)
    done = run_tf(
        CONTROL.format(
            good=str(a), slot=SLOT, missing=str(tmp_path / "missing.wasm"), device_guest=str(reference_guest_path())
        ),
        policy=policy_with_pass(a),
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.describe()
    out = json.loads(done.results()["cases"])
    assert "no pass named \"nope\"" in out["unknown_slot"] and SLOT in out["unknown_slot"]
    assert "missing.wasm" in out["missing_file"]
    assert out["device_guest"] is not None and "reference_device.wasm" in out["device_guest"], out["device_guest"]
    assert out["unknown_enable"] is not None
    for entry in (out["on"], out["off"], out["again"]):
        assert entry["generation"] == 1, "a refused swap changed nothing"
    assert out["on"]["calls"] >= 1 and out["on"]["enabled"]
    assert not out["off"]["enabled"] and out["off"]["calls"] == out["on"]["calls"], "a disabled pass is not called"
    assert out["again"]["enabled"] and out["again"]["calls"] > out["off"]["calls"]
