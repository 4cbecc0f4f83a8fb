"""XLA on the WASM device through tfwasm's PJRT client (issue 45, stage 1):
the plugin built with the cargo feature ``pjrt``.

    cargo build --release -p tfwasm --features pjrt
    cp target/release/libtfwasm.so SOMEWHERE/libtfwasm.so
    TFWASM_PJRT_LIBRARY=SOMEWHERE/libtfwasm.so python -m pytest tests/python/test_xla_pjrt.py

Skipped unless ``TFWASM_PJRT_LIBRARY`` names such a build: the default build
(what users get) has no PJRT. The build is loaded from an overlay of this
interpreter's site-packages whose ``tensorflow-plugins`` holds it, as
tests/bench/bench_profiler.py --without-profiler does (TensorFlow loads the
plugins of site-packages first; the installed copy, loaded second, stays
inert and exports no PJRT). Each case is a fresh interpreter.

What a user relies on: an eager ``tf.function(jit_compile=True)`` on WASM
runs there and equals TensorFlow's CPU XLA; an op the executor cannot plan
is a clear error and the process lives; nothing that worked without PJRT
breaks (devices, eager ops, plain functions, Keras fit); Keras' default
``train_on_batch`` / ``test_on_batch`` / ``predict_on_batch`` (jit on) run;
and with the shim off the device behaves as the default build does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tfwasm_support import DEFAULT_TIMEOUT, SCRIPT_PRELUDE, TfRun, subprocess_env

LIBRARY_ENV = "TFWASM_PJRT_LIBRARY"
LIBRARY = os.environ.get(LIBRARY_ENV)

pytestmark = pytest.mark.skipif(
    not LIBRARY or not Path(LIBRARY).is_file(),
    reason=f"{LIBRARY_ENV} does not name a plugin built with --features pjrt "
    f"({LIBRARY_ENV}={LIBRARY!r}); the default build has no XLA through PJRT",
)

NO_JIT = "No JIT device registered"


@pytest.fixture(scope="module")
def pjrt_python(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """An interpreter that loads the pjrt build first, and its environment."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_profiler import overlay_interpreter

    return overlay_interpreter(Path(LIBRARY), tmp_path_factory.mktemp("pjrt"))


@pytest.fixture
def run_pjrt(pjrt_python, tmp_path):
    python, extra = pjrt_python

    def run(code: str, env: dict | None = None, timeout: float = DEFAULT_TIMEOUT) -> TfRun:
        done = subprocess.run(
            [python, "-c", SCRIPT_PRELUDE + textwrap.dedent(code)],
            env=subprocess_env({**extra, **(env or {})}),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
        )
        return TfRun(done.returncode, done.stdout, done.stderr)

    return run


def test_the_build_exports_pjrt():
    symbols = subprocess.run(["nm", "-D", "--defined-only", LIBRARY], capture_output=True, text=True).stdout
    assert " GetPjrtApi" in symbols and " TFNPD_InitPlugin" in symbols, symbols


MATMUL = """
@tf.function(jit_compile=True)
def f(x):
    return tf.matmul(x, x) + 1.0
"""


def test_eager_jit_matmul_plus_one_equals_cpu_xla(run_pjrt):
    run = run_pjrt(
        MATMUL
        + """
import json
cases = {}
for n in (1, 2, 3, 7, 13, 31, 64):
    x = np.random.default_rng(n).standard_normal((n, n), dtype=np.float32)
    with tf.device("/device:WASM:0"):
        wasm = f(tf.constant(x))
    with tf.device("/CPU:0"):
        cpu = f(tf.constant(x))
    cases[n] = [wasm.device, float(np.abs(wasm.numpy() - cpu.numpy()).max()), float(np.abs(cpu.numpy()).max())]
# The output is a device tensor: a plain WASM op reads it.
with tf.device("/device:WASM:0"):
    y = f(tf.constant([[0.0, 1.0], [2.0, 3.0]]))
    total = tf.reduce_sum(y) * 2.0
cases["values"] = [y.numpy().tolist(), total.device, float(total)]
result("cases", json.dumps(cases))
"""
    )
    assert run.returncode == 0, run.describe()
    cases = json.loads(run.results()["cases"])
    for n in ("1", "2", "3", "7", "13", "31", "64"):
        device, error, scale = cases[n]
        assert device.endswith("device:WASM:0"), (n, device)
        assert error <= 1e-5 * max(1.0, scale), (n, error, scale)
    values, device, total = cases["values"]
    assert values == [[3.0, 4.0], [7.0, 12.0]]
    assert device.endswith("device:WASM:0") and total == 52.0
    assert NO_JIT not in run.stderr, run.describe()


def test_an_op_without_a_plan_is_a_clear_error_and_the_process_lives(run_pjrt):
    run = run_pjrt(
        MATMUL
        + """
@tf.function(jit_compile=True)
def g(x):
    return tf.sort(x)

try:
    with tf.device("/device:WASM:0"):
        g(tf.constant([3.0, 1.0, 2.0]))
    result("error", "none")
except tf.errors.OpError as e:
    result("error", type(e).__name__ + ": " + e.message.replace("\\n", " "))
with tf.device("/device:WASM:0"):
    result("after", f(tf.constant([[2.0]])).numpy().tolist())
"""
    )
    assert run.returncode == 0, run.describe()
    results = run.results()
    error = results["error"]
    assert error.startswith("UnimplementedError: tfwasm: XLA module"), error
    assert "no plan for HLO `sort`" in error and "TopKV2" in error, error
    assert "jit_compile=False" in error, error
    assert results["after"] == "[[5.0]]"


REGRESSION = """
import keras
result("devices", ",".join(d.name for d in tf.config.list_logical_devices()))
a = np.arange(6, dtype=np.float32).reshape(2, 3)
with tf.device("/device:WASM:0"):
    r = tf.nn.relu(tf.constant(a) - 2.0) * 3.0
result("eager", f"{r.device}|{r.numpy().tolist()}")

@tf.function
def g(x):
    return tf.reduce_sum(tf.matmul(x, x, transpose_b=True))

with tf.device("/device:WASM:0"):
    s = g(tf.constant(a))
result("function", f"{s.device}|{float(s)}")
keras.utils.set_random_seed(0)
x = np.random.rand(32, 8).astype("float32")
y = np.random.rand(32, 1).astype("float32")
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
m.compile("adam", "mse", jit_compile=False)
h = m.fit(x, y, epochs=2, batch_size=16, verbose=0)
result("fit", f"{m.trainable_variables[0].value.device}|{json.dumps(h.history['loss'])}")
"""


def test_what_worked_without_pjrt_still_works(run_pjrt, run_tf):
    """Devices, an eager op, a plain tf.function and Keras fit without jit
    give what the installed (default) build gives."""
    with_pjrt = run_pjrt("import json\n" + REGRESSION)
    assert with_pjrt.returncode == 0, with_pjrt.describe()
    results = with_pjrt.results()
    assert results["devices"] == "/device:CPU:0,/device:WASM:0"
    device, values = results["eager"].split("|")
    assert device.endswith("device:WASM:0") and values == "[[0.0, 0.0, 0.0], [3.0, 6.0, 9.0]]"
    device, value = results["function"].split("|")
    assert device.endswith("device:WASM:0") and float(value) == 83.0
    device, losses = results["fit"].split("|")
    assert device.endswith("device:WASM:0"), results

    without = run_tf("import json\n" + REGRESSION)
    assert without.returncode == 0, without.describe()
    default = without.results()
    assert default["fit"].split("|")[0] == device
    assert json.loads(losses) == pytest.approx(json.loads(default["fit"].split("|")[1]), rel=1e-6)
    for key in ("devices", "eager", "function"):
        assert results[key] == default[key], key


def test_keras_default_train_test_predict_on_batch_equal_cpu(run_pjrt):
    """Keras' defaults turn XLA on; each *_on_batch is one eager XLA launch
    on the device: the Dense/Adam step compiles and runs on WASM."""
    run = run_pjrt(
        """
import json
import keras

def train(device):
    with tf.device(device):
        keras.utils.set_random_seed(0)
        x = np.random.rand(32, 8).astype("float32")
        y = np.random.rand(32, 1).astype("float32")
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
        m.compile("adam", "mse")
        losses = [float(m.train_on_batch(x, y)) for _ in range(3)]
        return {
            "jit": bool(m.jit_compile),
            "losses": losses,
            "kernel": m.trainable_variables[0].value.device,
            "iterations": int(m.optimizer.iterations.numpy()),
            "test": float(m.test_on_batch(x, y)),
            "predict": m.predict_on_batch(x[:2]).ravel().tolist(),
        }

result("cases", json.dumps({"wasm": train("/device:WASM:0"), "cpu": train("/CPU:0")}))
""",
        timeout=300,
    )
    assert run.returncode == 0, run.describe()
    cases = json.loads(run.results()["cases"])
    wasm, cpu = cases["wasm"], cases["cpu"]
    assert wasm["jit"] and wasm["kernel"].endswith("device:WASM:0") and wasm["iterations"] == 3, wasm
    assert cpu["kernel"].endswith("device:CPU:0"), cpu
    assert wasm["losses"] == pytest.approx(cpu["losses"], rel=1e-4, abs=1e-6)
    assert wasm["test"] == pytest.approx(cpu["test"], rel=1e-4, abs=1e-6)
    assert wasm["predict"] == pytest.approx(cpu["predict"], rel=1e-4, abs=1e-6)
    assert NO_JIT not in run.stderr, run.describe()


def test_switched_off_the_device_behaves_as_without_pjrt(run_pjrt):
    """TFWASM_PJRT=off is the gate a TensorFlow other than the shim's takes:
    nothing is installed, one line says why, eager jit keeps TensorFlow's
    own error, and the process lives."""
    run = run_pjrt(
        MATMUL
        + """
try:
    with tf.device("/device:WASM:0"):
        f(tf.constant([[1.0]]))
    result("error", "none")
except tf.errors.OpError as e:
    result("error", e.message.replace("\\n", " "))
with tf.device("/device:WASM:0"):
    r = tf.constant([[1.0]]) * 2.0
result("eager", f"{r.device}|{r.numpy().tolist()}")
""",
        env={"TFWASM_PJRT": "off"},
    )
    assert run.returncode == 0, run.describe()
    results = run.results()
    assert NO_JIT in results["error"], results
    device, values = results["eager"].split("|")
    assert device.endswith("device:WASM:0") and values == "[[2.0]]"
    assert run.stderr.count("XLA on WASM is off: TFWASM_PJRT=off turns it off") == 1, run.describe()
