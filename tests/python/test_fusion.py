"""The graph pass fuses trees of elementwise ops on WASM into one node
(``_TfwasmFusedElementwise``), and nothing a program computes changes.

Each case runs in fresh interpreters, with fusion on (the default) and off
(``TFWASM_PASSES=0``): the results must be the same bits, and agree with
TensorFlow's CPU device. Which ops ran is read from TensorFlow's run
metadata (the function graphs after optimization); the MLP run checks the
``TFWASM_LOG=debug`` line that says what was fused.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from test_training import LOSS_RTOL, SCRIPT, TIMEOUT, env_with_package
from tfwasm_support import make_policy, reference_guest_path, run_cases

FUSED = "elementwise nodes fused:"
UPDATED = "as an AssignVariableOp of"

# Keras' Adam update `m·α / (√v + ε)`, an intermediate the function also
# returns (it must survive, so the tree fuses around it), on odd shapes:
# empty, 1×1, primes, and inputs that broadcast three ways.
PROGRAM = """
import json
from tensorflow.python.eager import context
SHAPES = [((0, 3), (3,)), ((1, 1), ()), ((13, 17), (13, 17)), ((3, 1), (1, 5)), ((301, 257), (257,))]

@tf.function
def update(m, v, alpha, eps):
    root = tf.sqrt(v)
    return m * alpha / (root + eps), root * 2.0

rng = np.random.default_rng(3)
out = {}
for i, (m_shape, v_shape) in enumerate(SHAPES):
    m = rng.standard_normal(m_shape).astype(np.float32)
    v = rng.random(v_shape).astype(np.float32)
    v.flat[: min(2, v.size)] = 0.0  # √0: the ε keeps it finite
    args = (m, v, np.float32(1e-3), np.float32(1e-7))
    context.context().enable_run_metadata()
    with tf.device("/device:WASM:0"):
        wasm = [t.numpy() for t in update(*[tf.constant(a) for a in args])]
    graphs = context.context().export_run_metadata().function_graphs
    context.context().disable_run_metadata()
    # Only this call's nodes on WASM (the metadata may also hold graphs of
    # earlier calls on the CPU).
    ran = sorted({n.op for g in graphs for n in g.post_optimization_graph.node if "device:WASM:" in n.device})
    with tf.device("/device:CPU:0"):
        cpu = [t.numpy() for t in update(*[tf.constant(a) for a in args])]
    out[i] = {
        "ran": ran,
        "shape": list(wasm[0].shape),
        "cpu_shape": list(cpu[0].shape),
        "bits": [w.view(np.uint32).tolist() for w in wasm],
        "max_rel": max(float(np.max(np.abs(w - c) / (np.abs(c) + 1e-30), initial=0.0)) for w, c in zip(wasm, cpu)),
    }
result("cases", json.dumps(out))
"""


def test_fused_function_matches_unfused_and_cpu(run_tf):
    fused, fused_run = run_cases(run_tf, PROGRAM, {"TFWASM_PASSES": "1"})
    unfused, unfused_run = run_cases(run_tf, PROGRAM, {"TFWASM_PASSES": "0"})
    for i, case in fused.items():
        # The pass fused the tree; `sqrt` stays, the function returns it too.
        assert {"_TfwasmFusedElementwise", "Sqrt"} <= set(case["ran"]), f"case {i}: ran {case['ran']}"
        assert not {"AddV2", "RealDiv"} & set(case["ran"]), f"case {i}: ran {case['ran']}"
        # Turned off, it fuses nothing.
        assert "_TfwasmFusedElementwise" not in unfused[i]["ran"], unfused_run.describe()
        assert case["shape"] == case["cpu_shape"], f"case {i}: {case['shape']} vs CPU {case['cpu_shape']}"
        assert case["bits"] == unfused[i]["bits"], f"case {i}: fused and unfused results differ"
        # sqrt, *, + and / are exactly rounded on both devices.
        assert case["max_rel"] <= 1e-6, f"case {i}: {case['max_rel']} from the CPU device"


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_adam_training_is_bit_identical_with_and_without_fusion(model, tmp_path):
    """Keras' MLP and CNN with Adam: the losses of a fused and an unfused run
    are the same floats (fusion reorders nothing), and the pass did fuse
    (Adam's updates, each layer's BiasAdd with its activation) and made
    Adam's `AssignAdd`/`AssignSub` updates assignments of fused sums."""
    env = env_with_package()
    env["TFWASM_LOG"] = "debug"
    fused, fused_out = run_with_stderr([str(SCRIPT), "--model", model, "--epochs", "2"], env, tmp_path)
    env["TFWASM_PASSES"] = "0"
    unfused, _ = run_with_stderr([str(SCRIPT), "--model", model, "--epochs", "2"], env, tmp_path)
    assert fused["weights_device"].endswith("WASM:0")
    assert fused["loss"] == unfused["loss"], (fused["loss"], unfused["loss"])
    assert fused["eval_loss"] == unfused["eval_loss"]
    assert fused["predict_sum"] == unfused["predict_sum"]
    counts = [line for line in fused_out.splitlines() if FUSED in line]
    assert counts, f"the {model}'s train step fused nothing"
    # Adam's variable updates became assignments of fused sums.
    assert any(UPDATED in line for line in fused_out.splitlines()), f"the {model}'s updates were not rewritten"


def run_with_stderr(args, env, tmp_path):
    done = subprocess.run(
        [sys.executable, *args], env=env, cwd=tmp_path, capture_output=True, text=True, errors="replace", timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-6000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]), done.stderr


def test_session_fetches_of_intermediates_survive(run_tf):
    """A TF1 session that fetches an intermediate of the tree: TensorFlow
    lists it among the nodes to preserve, so it stays a node (and its
    value is the unfused one) while the rest still fuses."""
    done = run_tf(
        """
        g = tf.Graph()
        with g.as_default(), tf.device("/device:WASM:0"):
            x = tf.compat.v1.placeholder(tf.float32, [None, 5])
            inner = tf.sqrt(x) * 3.0
            out = tf.exp(-inner) + 1.0
        with tf.compat.v1.Session(graph=g) as sess:
            value = np.arange(15, dtype=np.float32).reshape(3, 5)
            got_inner, got_out = sess.run([inner, out], {x: value})
        result("inner", float(np.max(np.abs(got_inner - np.sqrt(value) * 3.0))))
        result("out", float(np.max(np.abs(got_out - (np.exp(-np.sqrt(value) * 3.0) + 1.0)))))
        """
    )
    assert done.returncode == 0, done.describe()
    results = done.results()
    assert float(results["inner"]) <= 1e-5, done.describe()
    assert float(results["out"]) <= 1e-5, done.describe()


def test_a_malformed_fused_node_is_an_error_not_a_crash(run_tf):
    """Anyone can import a GraphDef with our op in it. A node whose program
    is malformed fails its own kernel with an error that names the op and
    says what is wrong; the process and other ops carry on."""
    done = run_tf(
        """
        from tensorflow.core.framework import types_pb2
        g = tf.Graph()
        with g.as_default():
            tf.compat.v1.placeholder(tf.float32, [3], name="x")
        graph_def = g.as_graph_def()
        node = graph_def.node.add(name="bad", op="_TfwasmFusedElementwise", input=["x", "x"], device="/device:WASM:0")
        node.attr["N"].i = 2
        node.attr["T"].type = types_pb2.DT_FLOAT
        node.attr["expr"].s = b"$0 Mul"
        imported = tf.Graph()
        with imported.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=imported) as sess:
            try:
                sess.run("bad:0", {"x:0": np.ones(3, np.float32)})
                result("error", "none")
            except tf.errors.InvalidArgumentError as e:
                result("error", e.message.replace("\\n", " "))
        result("after", float(tf.add(1.0, 2.0).numpy()))
        """
    )
    assert done.returncode == 0, done.describe()
    results = done.results()
    assert "_TfwasmFusedElementwise" in results["error"] and "pops an empty stack" in results["error"], done.describe()
    assert results["after"] == "3.0", done.describe()


def test_trees_inside_loops_and_branches_fuse_and_match_the_cpu(run_tf):
    """A while loop and a cond in a tf.function (TensorFlow lowers both to
    frames and switches): the trees in the loop body and the branches fuse
    within their frame and compute what the CPU device computes."""
    done = run_tf(
        """
        from tensorflow.python.eager import context

        @tf.function
        def f(x, n):
            def body(i, y):
                return i + 1, tf.sqrt(tf.abs(y) * 0.5 + 1.0) - 0.25 * y
            _, y = tf.while_loop(lambda i, y: i < n, body, (tf.constant(0), x))
            return tf.cond(tf.reduce_sum(y) > 0, lambda: tf.exp(-y) * 2.0 + 1.0, lambda: tf.tanh(y) - 3.0)

        x = np.random.default_rng(0).standard_normal((7, 13)).astype(np.float32)
        context.context().enable_run_metadata()
        with tf.device("/device:WASM:0"):
            wasm = f(tf.constant(x), tf.constant(5)).numpy()
        graphs = context.context().export_run_metadata().function_graphs
        context.context().disable_run_metadata()
        with tf.device("/device:CPU:0"):
            cpu = f(tf.constant(x), tf.constant(5)).numpy()
        fused = sum(n.op == "_TfwasmFusedElementwise" for g in graphs for n in g.post_optimization_graph.node)
        result("fused", fused)
        result("max_rel", float(np.max(np.abs(wasm - cpu) / (np.abs(cpu) + 1e-30))))
        """
    )
    assert done.returncode == 0, done.describe()
    results = done.results()
    assert int(results["fused"]) >= 2, done.describe()
    assert float(results["max_rel"]) <= 1e-5, done.describe()


# Keras' Adam writes `m.assign_add((g - m)·c)` and `w.assign_sub(...)`; the
# pass makes each an assignment of `m + (g - m)·c`, fused into one node.
# Variables on WASM of odd shapes (empty, 1×1, primes); the expected values
# are NumPy's float32 arithmetic, which rounds each operation as TensorFlow
# does, so the bits must match. Then an update whose shape does not fit the
# variable: an error, the variable unchanged, the process and the CPU fine.
UPDATES = """
import json
from tensorflow.python.eager import context
SHAPES = [(0,), (1, 1), (13, 17), (3, 257)]
rng = np.random.default_rng(5)
out = {}
for i, shape in enumerate(SHAPES):
    m0, w0, g = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
    c = np.float32(0.1)
    with tf.device("/device:WASM:0"):
        m = tf.Variable(m0)
        w = tf.Variable(w0)

    @tf.function
    def step(g):
        m.assign_add((g - m) * c)
        w.assign_sub(m * 0.5)
        m.assign_add(g)

    context.context().enable_run_metadata()
    with tf.device("/device:WASM:0"):
        step(tf.constant(g))
    graphs = context.context().export_run_metadata().function_graphs
    context.context().disable_run_metadata()
    m1 = m0 + (g - m0) * c
    w1 = w0 - m1 * np.float32(0.5)
    m2 = m1 + g
    out[i] = {
        "ran": sorted({n.op for gr in graphs for n in gr.post_optimization_graph.node if "device:WASM:" in n.device}),
        "m": m.numpy().view(np.uint32).tolist(), "m_expected": m2.view(np.uint32).tolist(),
        "w": w.numpy().view(np.uint32).tolist(), "w_expected": w1.view(np.uint32).tolist(),
        "device": m.device,
    }

with tf.device("/device:WASM:0"):
    v = tf.Variable(np.arange(3, dtype=np.float32))

@tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
def bad(x):
    v.assign_add(x)

try:
    bad(tf.ones([2, 2]))
    error = "none"
except tf.errors.InvalidArgumentError as e:
    error = type(e).__name__
out["bad"] = {"error": error, "v": v.numpy().tolist(), "after": float(tf.add(1.0, 2.0).numpy())}
result("cases", json.dumps(out))
"""


def test_variable_updates_fuse_into_assignments_with_the_same_bits(run_tf):
    fused, fused_run = run_cases(run_tf, UPDATES, {"TFWASM_PASSES": "1"})
    unfused, unfused_run = run_cases(run_tf, UPDATES, {"TFWASM_PASSES": "0"})
    for mode, cases, run in (("fused", fused, fused_run), ("unfused", unfused, unfused_run)):
        bad = cases.pop("bad")
        # A value of the wrong shape fails in both modes and changes nothing.
        assert bad == {"error": "InvalidArgumentError", "v": [0.0, 1.0, 2.0], "after": 3.0}, f"{mode}: {bad}"
        for i, case in cases.items():
            assert case["device"].endswith("WASM:0"), case["device"]
            assert case["m"] == case["m_expected"], f"{mode} case {i}: m differs from NumPy"
            assert case["w"] == case["w_expected"], f"{mode} case {i}: w differs from NumPy"
    for i, case in fused.items():
        # The updates became assignments of fused sums.
        assert {"AssignVariableOp", "_TfwasmFusedElementwise"} <= set(case["ran"]), f"case {i}: ran {case['ran']}"
        assert not {"AssignAddVariableOp", "AssignSubVariableOp"} & set(case["ran"]), f"case {i}: ran {case['ran']}"
        # Turned off, TensorFlow's own updates run.
        assert {"AssignAddVariableOp", "AssignSubVariableOp"} <= set(unfused[i]["ran"]), unfused_run.describe()


# A Keras LSTM's train step. Its gradient loop computes, on every step, each
# gate's gradient as a SigmoidGrad or TanhGrad of a product (`dc·g`, `dh·o`,
# ...), and the cell's TanhGrad is summed with the carried `dc`.
LSTM_STEP = """
import json
import keras
from tensorflow.python.eager import context
keras.utils.set_random_seed(3)
rng = np.random.default_rng(3)
x = rng.standard_normal((48, 7, 5)).astype(np.float32)
y = rng.integers(0, 4, size=48)
net = keras.Sequential([keras.Input((7, 5)), keras.layers.LSTM(12), keras.layers.Dense(4)])
net.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
context.context().enable_run_metadata()
losses = net.fit(x, y, batch_size=16, epochs=3, verbose=0, shuffle=False).history["loss"]
graphs = context.context().export_run_metadata().function_graphs
context.context().disable_run_metadata()
exprs = [n.attr["expr"].s.decode() for g in graphs for n in g.post_optimization_graph.node
         if n.op == "_TfwasmFusedElementwise"]
result("cases", json.dumps({"losses": losses, "exprs": exprs, "device": net.weights[0].value.device}))
"""


def test_lstm_gate_gradients_fuse_with_the_same_bits(run_tf):
    """The LSTM's gate gradients fuse with the products they read
    (`SigmoidGrad(i, dc·g)`), and training gives the same losses, to the
    bit, with fusion on and off, and the CPU device's within the training
    tolerance."""
    fused, fused_run = run_cases(run_tf, LSTM_STEP, {"TFWASM_PASSES": "1"})
    unfused, _ = run_cases(run_tf, LSTM_STEP, {"TFWASM_PASSES": "0"})
    done = run_tf(LSTM_STEP, policy=make_policy(reference_guest_path(), count=0))
    assert done.returncode == 0, done.describe()
    cpu = json.loads(done.results()["cases"])
    assert fused["device"].endswith("WASM:0") and cpu["device"].endswith("CPU:0")
    for grad in ["SigmoidGrad", "TanhGrad"]:
        assert any(expr.endswith(f"Mul {grad}") for expr in fused["exprs"]), fused_run.describe()
    assert not any("Grad" in expr for expr in unfused["exprs"])
    assert fused["losses"] == unfused["losses"]
    np.testing.assert_allclose(fused["losses"], cpu["losses"], rtol=LOSS_RTOL)
