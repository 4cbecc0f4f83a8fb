"""A hostile graph-optimizer pass inside the real TensorFlow: whatever it does,
TensorFlow keeps its own graph and Keras trains as if the pass were not there.

Each case runs a fresh interpreter with a policy whose ``[[pass]]`` is the
hostile test pass (``guest/hostile-pass``, as built in ``target/``) in one
mode, under a 200 ms deadline and a 16 MiB memory cap. A small Keras MLP
trains for a few steps on the WASM device; the losses must match a run on
TensorFlow's CPU device, the process must exit 0, stderr must have the
plugin's line naming the pass and the reason, and ``tfwasm.passes.list()``
must count the failures and keep the last reason. The legal modes (honest,
slow) are called and never blamed; a pass after a failing one still
rewrites the graph it gets; a pass that fails 8 times in a row is disabled,
and ``tfwasm.passes.enable`` turns it on again.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from test_pass_verify import verify
from test_training import LOSS_RTOL
from tfwasm_support import (
    GUEST_BUILD_DIR,
    REPO_ROOT,
    SCRIPT_PRELUDE,
    TfRun,
    make_policy,
    reference_guest_path,
    subprocess_env,
    toml_dumps,
)

HOSTILE_PASS = GUEST_BUILD_DIR / "tfwasm_hostile_pass.wasm"
FUSE_PASS = GUEST_BUILD_DIR / "tfwasm_fuse_pass.wasm"
TIMEOUT = 600
# The plugin disables a pass after this many failures in a row.
MAX_CONSECUTIVE_FAILURES = 8

# A Keras MLP fitted for 3 epochs of 4 steps with Adam. jit_compile=False:
# the step is a plain graph function, optimized by the plugin like any other.
FIT = """
import json
import keras
from keras import layers

keras.utils.set_random_seed(1234)
rng = np.random.default_rng(1234)
x = rng.standard_normal((128, 20)).astype(np.float32)
y = np.argmax(x @ rng.standard_normal((20, 10)), axis=1).astype(np.int64)
net = keras.Sequential([keras.Input((20,)), layers.Dense(32, activation="relu"), layers.Dense(10)])
net.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
history = net.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0)
passes = []
if tf.config.list_physical_devices("WASM"):
    import tfwasm.passes
    passes = tfwasm.passes.list()
result("cases", json.dumps({
    "loss": [float(v) for v in history.history["loss"]],
    "weights_device": net.trainable_variables[0].value.device,
    "passes": passes,
}))
cpu_check()
"""

# Each failing mode and what the plugin's reason says.
FAILING = [
    pytest.param("garbage", r"the answer is not a GraphDef", id="garbage"),
    pytest.param("drop-preserved", r"which TensorFlow asked to keep, is gone", id="drop-preserved"),
    pytest.param("dangling-input", r"`\^hostile/nowhere` that names no node", id="dangling-input"),
    pytest.param("unknown-op", r"`_HostileEverythingFused`, which TensorFlow does not know", id="unknown-op"),
    pytest.param("cycle", r"the answer has a cycle outside any loop", id="cycle"),
    pytest.param("no-kernel", r"`hostile/gram` \(MatMul\) is placed on the WASM device, which has no kernel", id="no-kernel"),
    pytest.param("huge", r"`optimize` trapped.*past its cap of 16777216 bytes", id="huge"),
    pytest.param("loop", r"`optimize` exceeded its 200 ms deadline", id="loop"),
    pytest.param("trap", r"`optimize` trapped.*panicked", id="trap"),
    pytest.param("error", r"it returned an error: asked to fail", id="error"),
]

FAILURE_LINE = re.compile(
    r"tfwasm: pass 'hostile' \(tfwasm_hostile_pass\.wasm\) \(sha256 [0-9a-f]{12}\) failed, "
    r"TensorFlow goes on without its rewrite: (?P<reason>.*) \(failure (?P<n>\d+)\)$"
)


@pytest.fixture(scope="module", autouse=True)
def passes_built():
    missing = [p.relative_to(REPO_ROOT) for p in (HOSTILE_PASS, FUSE_PASS) if not p.is_file()]
    if missing:
        pytest.fail(
            f"not built: {', '.join(map(str, missing))}; run host/scripts/setup.sh or cargo build "
            "--target wasm32-wasip2 --profile guest -p tfwasm-hostile-pass -p tfwasm-fuse-pass",
            pytrace=False,
        )


def hostile_entry(mode: str, **config) -> dict:
    """The ``[[pass]]`` entry of policies/hostile-pass.toml, in ``mode``."""
    return {
        "name": "hostile",
        "path": str(HOSTILE_PASS),
        "config": {"mode": mode, **config},
        "limits": {"memory-bytes": 16 << 20, "call-deadline-ms": 200},
    }


def policy_with(*passes: dict, count: int = 1) -> dict:
    policy = make_policy(reference_guest_path(), count=count)
    policy["pass"] = list(passes)
    return policy


def fit(policy: dict, directory, script: str = FIT, tf_log_level: str = "2") -> tuple[dict, TfRun]:
    """Runs ``script`` (FIT) in a fresh interpreter under ``policy``: its findings and the run."""
    path = directory / f"policy-{len(list(directory.glob('policy-*.toml')))}.toml"
    path.write_text(toml_dumps(policy), encoding="utf-8")
    # The passes must run: an operator's TFWASM_PASSES=0 must not leak in.
    env = subprocess_env({"TFWASM_PASSES": None, "TF_CPP_MIN_LOG_LEVEL": tf_log_level}, path)
    try:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT_PRELUDE + script],
            env=env,
            cwd=directory,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the Keras fit hung for {TIMEOUT} s under {toml_dumps(policy)}")
    run = TfRun(done.returncode, done.stdout, done.stderr)
    assert run.returncode == 0, run.describe()
    assert run.results().get("cpu", "").startswith("2.0@"), run.describe()
    return json.loads(run.results()["cases"]), run


@pytest.fixture(scope="module")
def cpu_losses(tmp_path_factory) -> list[float]:
    """The same fit on TensorFlow's CPU device (the plugin lists no device)."""
    found, run = fit(policy_with(count=0), tmp_path_factory.mktemp("cpu"))
    assert found["weights_device"].endswith("CPU:0"), run.describe()
    return found["loss"]


def assert_trained_as_on_cpu(found: dict, cpu_losses: list[float], run: TfRun, label: str) -> None:
    assert found["weights_device"].endswith("WASM:0"), run.describe()
    assert len(found["loss"]) == 3 and all(math.isfinite(v) for v in found["loss"]), found["loss"]
    np.testing.assert_allclose(found["loss"], cpu_losses, rtol=LOSS_RTOL, err_msg=f"{label}: losses per epoch")
    assert found["loss"][-1] < found["loss"][0], f"{label}: the model did not learn"


def slot(found: dict, name: str) -> dict:
    slots = {p["slot"]: p for p in found["passes"]}
    assert name in slots, f"no pass {name!r} in tfwasm.passes.list(): {found['passes']}"
    return slots[name]


@pytest.mark.parametrize("mode,why", FAILING)
def test_a_failing_pass_costs_only_its_rewrite(mode, why, tmp_path, cpu_losses):
    found, run = fit(policy_with(hostile_entry(mode)), tmp_path)
    assert_trained_as_on_cpu(found, cpu_losses, run, mode)

    lines = [m for m in map(FAILURE_LINE.search, run.stderr.splitlines()) if m]
    assert lines, f"{mode}: no stderr line names pass 'hostile' and says it failed\n{run.describe()}"
    for line in lines:
        assert re.search(why, line["reason"]), f"{mode}: the reason does not say {why!r}: {line['reason']}"
    assert [int(line["n"]) for line in lines] == list(range(1, len(lines) + 1)), run.describe()

    hostile = slot(found, "hostile")
    assert hostile["name"] == "hostile" and hostile["path"].endswith("tfwasm_hostile_pass.wasm"), hostile
    assert hostile["failures"] == len(lines) > 0, f"{hostile}\n{run.describe()}"
    assert hostile["calls"] >= hostile["failures"] and hostile["rewrites"] == 0, hostile
    assert hostile["last_error"] and re.search(why, hostile["last_error"]), hostile
    if hostile["failures"] >= MAX_CONSECUTIVE_FAILURES:
        assert hostile["disabled"] and "failures in a row" in hostile["disabled"], hostile
        assert "tfwasm.passes.enable(\"hostile\")" in run.stderr, run.describe()
    else:
        assert hostile["disabled"] is None, hostile


@pytest.mark.parametrize("mode", ["honest", "slow"])
def test_a_legal_pass_is_called_and_never_blamed(mode, tmp_path, cpu_losses):
    found, run = fit(policy_with(hostile_entry(mode)), tmp_path)
    assert_trained_as_on_cpu(found, cpu_losses, run, mode)
    assert "pass 'hostile'" not in run.stderr, run.describe()
    hostile = slot(found, "hostile")
    assert hostile["calls"] > 0, f"the pass never ran: {hostile}"
    assert (hostile["failures"], hostile["last_error"], hostile["disabled"]) == (0, None, None), hostile


def test_the_next_pass_rewrites_the_graph_the_failed_one_was_given(tmp_path, cpu_losses):
    fuse = {"name": "fuse-elementwise", "path": str(FUSE_PASS)}
    found, run = fit(policy_with(hostile_entry("trap"), fuse), tmp_path)
    assert_trained_as_on_cpu(found, cpu_losses, run, "trap, then fuse-elementwise")
    hostile, after = slot(found, "hostile"), slot(found, "fuse-elementwise")
    assert hostile["failures"] > 0 and "panicked" in hostile["last_error"], hostile
    assert after["calls"] >= hostile["calls"], f"the next pass must run on every graph: {found['passes']}"
    assert after["rewrites"] > 0 and after["failures"] == 0, f"{after}\n{run.describe()}"


# Twelve small functions on the device, each a graph of its own for the
# optimizer; then the pass is enabled again and one more function is traced.
KEEPS_FAILING = """
import json
import tfwasm.passes


def status():
    return next(p for p in tfwasm.passes.list() if p["slot"] == "hostile")


def traced(scale):
    @tf.function
    def step(x):
        return tf.nn.relu(x * scale) + 1.0

    with tf.device("/device:WASM:0"):
        return float(tf.reduce_sum(step(tf.ones([4, 4]))).numpy())


sums = [traced(float(i + 1)) for i in range(12)]
disabled = status()
tfwasm.passes.enable("hostile")
revived = status()
sums.append(traced(13.0))
result("cases", json.dumps({"sums": sums, "disabled": disabled, "revived": revived, "after": status()}))
"""


def test_a_pass_that_keeps_failing_is_disabled_and_enable_revives_it(run_tf):
    policy = policy_with(hostile_entry("error"))
    run = run_tf(KEEPS_FAILING, policy=policy, env={"TFWASM_PASSES": None}, timeout=TIMEOUT)
    assert run.returncode == 0, run.describe()
    found = json.loads(run.results()["cases"])
    # Every function computed its value: 16 elements of relu(scale) + 1.
    assert found["sums"] == [16.0 * (scale + 1) for scale in range(1, 14)], found["sums"]

    disabled = found["disabled"]
    assert disabled["calls"] == disabled["failures"] == MAX_CONSECUTIVE_FAILURES, f"{disabled}\n{run.describe()}"
    assert disabled["disabled"].startswith(f"{MAX_CONSECUTIVE_FAILURES} failures in a row, the last: "), disabled
    assert "returned an error" in disabled["disabled"] and disabled["enabled"], disabled
    disabled_lines = [line for line in run.stderr.splitlines() if "is disabled after" in line]
    assert len(disabled_lines) == 1 and "pass 'hostile'" in disabled_lines[0], run.describe()
    assert 'tfwasm.passes.enable("hostile")' in disabled_lines[0], disabled_lines

    assert found["revived"]["disabled"] is None and found["revived"]["enabled"], found["revived"]
    after = found["after"]
    assert after["calls"] > MAX_CONSECUTIVE_FAILURES, f"enabled again, the pass must be called again: {after}"
    assert after["failures"] == after["calls"] and after["disabled"] is None, after


# ---------------------------------------------------------------------------
# Answers TensorFlow itself would crash on, refuse, or import only by
# dropping every rewrite: each refused by the host first, inside Keras fit of
# an MLP and a CNN, with the reference passes after the hostile one.

# Both models fitted for 2 epochs of 4 steps with Adam, in one interpreter.
FIT_TWO = """
import json
import keras
from keras import layers

JIT = {jit}


def fit(net, x, y):
    net.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=JIT)
    return [float(v) for v in net.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0).history["loss"]]


keras.utils.set_random_seed(1234)
rng = np.random.default_rng(1234)
x = rng.standard_normal((128, 20)).astype(np.float32)
y = np.argmax(x @ rng.standard_normal((20, 10)), axis=1).astype(np.int64)
mlp = keras.Sequential([keras.Input((20,)), layers.Dense(32, activation="relu"), layers.Dense(10)])
images = rng.random((128, 12, 12, 1)).astype(np.float32)
labels = (images[:, 3:9, 3:9, 0].mean(axis=(1, 2)) * 10).astype(np.int64) % 10
cnn = keras.Sequential([
    keras.Input((12, 12, 1)),
    layers.Conv2D(8, 3, activation="relu"),
    layers.MaxPooling2D(),
    layers.Flatten(),
    layers.Dense(10),
])
losses = {{"mlp": fit(mlp, x, y), "cnn": fit(cnn, images, labels)}}
passes = []
if tf.config.list_physical_devices("WASM"):
    import tfwasm.passes
    passes = tfwasm.passes.list()
result("cases", json.dumps({{
    "loss": losses,
    "devices": [mlp.trainable_variables[0].value.device, cnn.trainable_variables[0].value.device],
    "passes": passes,
}}))
cpu_check()
"""

CONTRACTION_PASS = GUEST_BUILD_DIR / "tfwasm_contraction_pass.wasm"

# Each kind, the refusal the log must show, and whether Keras compiles the
# step with XLA (the only way a graph holds an `_XlaMustCompile` call).
STRUCTURAL = [
    pytest.param("missing-device", r"is placed on `[^`]*/device:WASM:9`, which is no device of this process", False, id="missing-device"),
    pytest.param("missing-cpu", r"`[^`]*/device:CPU:3`, which is no device of this process", False, id="missing-cpu"),
    pytest.param("other-job", r"`/job:worker/replica:0/task:0/device:CPU:0`, which is no device", False, id="other-job"),
    pytest.param("missing-input", r"has \d+ data input\(s\), and its op takes \d+", False, id="missing-input"),
    pytest.param("wrong-dtype", r"is float from .* expects double there", False, id="wrong-dtype"),
    pytest.param("cast-dst", r"\(Cast\)|expects \w+ there", False, id="cast-dst"),
    pytest.param("all-to-cpu", r"a resource is used on its own device", False, id="all-to-cpu"),
    pytest.param("xla-on", r"XLA turned back on", True, id="xla-on"),
    pytest.param("versions", r"changes the graph's versions", False, id="versions"),
    pytest.param("grow", r"more than the pass's max-growth allows", False, id="grow"),
    pytest.param("log-flood", r"exceeded its 200 ms deadline", False, id="log-flood"),
]

# What TensorFlow logs when it cannot import an optimizer's answer: the
# function then runs unoptimized, or the step fails.
TENSORFLOW_REFUSALS = re.compile(r"incompatible with expected|Incomplete graph|Ignoring multi-device function optimization failure")


def fit_two(policy: dict, directory, jit: bool) -> tuple[dict, TfRun]:
    # TensorFlow's warnings on: its refusals are what must not appear.
    return fit(policy, directory, FIT_TWO.format(jit=jit), tf_log_level="0")


@pytest.fixture(scope="module")
def cpu_losses_two(tmp_path_factory) -> dict:
    found, run = fit_two(policy_with(count=0), tmp_path_factory.mktemp("cpu-two"), jit=False)
    assert all(device.endswith("CPU:0") for device in found["devices"]), run.describe()
    return found["loss"]


@pytest.mark.parametrize("mode,why,jit", STRUCTURAL)
def test_an_answer_tensorflow_would_not_take_is_refused_first(mode, why, jit, tmp_path, cpu_losses_two):
    contraction = {"name": "fuse-contraction", "path": str(CONTRACTION_PASS)}
    fuse = {"name": "fuse-elementwise", "path": str(FUSE_PASS)}
    found, run = fit_two(policy_with(hostile_entry(mode), contraction, fuse), tmp_path, jit)
    assert all(device.endswith("WASM:0") for device in found["devices"]), run.describe()
    for model in ("mlp", "cnn"):
        np.testing.assert_allclose(
            found["loss"][model], cpu_losses_two[model], rtol=LOSS_RTOL, err_msg=f"{mode}: {model} losses"
        )
    refused = TENSORFLOW_REFUSALS.findall(run.stderr)
    assert not refused, f"{mode}: TensorFlow met an answer it could not take: {refused}\n{run.describe()}"

    lines = [m for m in map(FAILURE_LINE.search, run.stderr.splitlines()) if m]
    assert lines, f"{mode}: no stderr line names pass 'hostile' and says it failed\n{run.describe()}"
    assert any(re.search(why, line["reason"]) for line in lines), (
        f"{mode}: no refusal says {why!r}: {[line['reason'] for line in lines]}"
    )
    hostile = slot(found, "hostile")
    assert hostile["failures"] > 0 and hostile["rewrites"] == 0, hostile
    # The passes after it still rewrote the graphs TensorFlow ran.
    for name in ("fuse-contraction", "fuse-elementwise"):
        after = slot(found, name)
        assert after["rewrites"] > 0 and after["failures"] == 0, f"{name}: {after}\n{run.describe()}"

    if mode == "log-flood":
        flood = [line for line in run.stderr.splitlines() if "never stops talking" in line]
        # Each failing call may log limits.log-lines-per-call (100) lines and
        # 64 KiB; the pass is disabled after 8 failures in a row.
        calls = hostile["calls"]
        assert len(flood) <= 100 * calls, f"{len(flood)} flood lines in {calls} calls"
        assert sum(len(line) + 1 for line in flood) <= (64 << 10) * calls
        assert "dropped past its log budget" in run.stderr, run.describe()


# A pass that changes what is learned passes every structural check; under
# a policy that requires `tfwasm pass verify`'s report, its failed report
# keeps it out of the pipeline, and Keras learns what the CPU does.
SEMANTIC = ["add-to-sub", "edit-const", "neuter-assign"]


@pytest.mark.parametrize("mode", SEMANTIC)
def test_a_semantic_edit_fails_verify_and_a_verified_policy_refuses_it(mode, tmp_path, cpu_losses_two):
    report = tmp_path / "report.json"
    keras_step = REPO_ROOT / "tests" / "fixtures" / "graphs" / "keras_mlp_step.pb"
    done = verify(HOSTILE_PASS, keras_step, "--config", f"mode={mode}", "--report", report, cwd=tmp_path)
    assert done.returncode == 1, f"verify must fail {mode}:\n{done.stdout}\n{done.stderr}"
    assert json.loads(report.read_text())["passed"] is False

    contraction = {"name": "fuse-contraction", "path": str(CONTRACTION_PASS)}
    fuse = {"name": "fuse-elementwise", "path": str(FUSE_PASS)}
    hostile = dict(hostile_entry(mode), verified=str(report))
    found, run = fit_two(policy_with(hostile, contraction, fuse), tmp_path, jit=False)
    for model in ("mlp", "cnn"):
        np.testing.assert_allclose(
            found["loss"][model], cpu_losses_two[model], rtol=LOSS_RTOL, err_msg=f"{mode}: {model} losses"
        )
    assert "hostile" not in {p["slot"] for p in found["passes"]}, found["passes"]
    refusals = [line for line in run.stderr.splitlines() if "pass 'hostile'" in line and "FAILED verify" in line]
    assert refusals, f"{mode}: no log line says the pass failed verify\n{run.describe()}"
