"""The contraction pass (``guest/contraction-pass``, ``fuse-contraction``)
in TensorFlow's graph optimizer, ahead of the elementwise pass.

Every test runs fresh interpreters with a policy whose ``[[pass]]`` entries
are the two reference passes as built in ``target/``: ``fuse-contraction``
first, then ``fuse-elementwise`` (which would otherwise take each
``BiasAdd`` and its activation into an elementwise group).

- Keras ``fit`` with ``compile()``'s defaults (``jit_compile="auto"``) of
  an MLP with every activation the fused kernels implement and of a small
  CNN: the losses match TensorFlow's CPU device, and the graphs TensorFlow
  got back from the plugin's optimizer (its own graph dumps after
  ``PluggableGraphOptimizer``) hold ``_FusedMatMul``/``_FusedConv2D`` with
  the expected ``fused_ops``: in the train step ``LeakyRelu`` stays apart
  (its gradient reads the sum before it), in ``predict`` it fuses too.
- A tf.function with ``MatMul``/``Conv2D`` + ``BiasAdd`` + activation
  chains on odd shapes (1×1, primes, a batch of 0): forward values and
  gradients against the CPU device, and the fused nodes in the function's
  optimized graph (run metadata).
- The pass's ``[pass.config]`` reaches it: ``activations`` narrows what
  fuses.

Tolerances: the training losses as ``test_training.py``; values as
``test_fused_ops.py`` (rtol 1e-4, atol 1e-4 × the largest magnitude).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from test_training import LOSS_RTOL
from tfwasm_support import GUEST_BUILD_DIR, REPO_ROOT, make_policy, reference_guest_path
from versions import keras_eager_xla_step

CONTRACTION_PASS = GUEST_BUILD_DIR / "tfwasm_contraction_pass.wasm"
ELEMENTWISE_PASS = GUEST_BUILD_DIR / "tfwasm_fuse_pass.wasm"
TIMEOUT = 900


@pytest.fixture(scope="module", autouse=True)
def passes_built():
    missing = [p.relative_to(REPO_ROOT) for p in (CONTRACTION_PASS, ELEMENTWISE_PASS) if not p.is_file()]
    if missing:
        pytest.fail(
            f"not built: {', '.join(map(str, missing))}; run host/scripts/setup.sh or cargo build "
            "--target wasm32-wasip2 --profile guest -p tfwasm-contraction-pass -p tfwasm-fuse-pass",
            pytrace=False,
        )


def pipeline_policy(contraction_config: dict | None = None, count: int = 1) -> dict:
    """The reference device with both reference passes, contraction first."""
    policy = make_policy(reference_guest_path(), count=count)
    contraction = {"name": "fuse-contraction", "path": str(CONTRACTION_PASS)}
    if contraction_config:
        contraction["config"] = dict(contraction_config)
    policy["pass"] = [contraction, {"name": "fuse-elementwise", "path": str(ELEMENTWISE_PASS)}]
    return policy


def run_cases(run_tf, program: str, env: dict, policy: dict, timeout: float = TIMEOUT) -> tuple:
    """Runs ``program`` under ``policy``; its ``result("cases", json)``, decoded, and the run."""
    done = run_tf(program, env=env, policy=policy, timeout=timeout)
    assert done.returncode == 0, done.describe()
    return json.loads(done.results()["cases"]), done


# --------------------------------------------------------------- Keras fit

# Runs MODEL's fit, evaluate and predict with TensorFlow's graph dumps on;
# reports the losses and, per graph TensorFlow got back from the plugin's
# optimizer, the fused nodes on WASM ("op[fused_ops]", leakyrelu_alpha)
# and the activations left standing there.
KERAS = """
import glob
import json
import os
import keras
from keras import layers
from google.protobuf import text_format
from tensorflow.core.framework import graph_pb2

MODEL = os.environ["CONTRACTION_MODEL"]
keras.utils.set_random_seed(1234)
rng = np.random.default_rng(1234)
if MODEL == "mlp":
    x = rng.standard_normal((256, 20)).astype(np.float32)
    y = np.argmax(x @ rng.standard_normal((20, 10)), axis=1).astype(np.int64)
    activations = ["relu", "tanh", "sigmoid", "elu", "leaky_relu", "relu6"]
    net = keras.Sequential([keras.Input((20,))] + [layers.Dense(24, activation=a) for a in activations]
                           + [layers.Dense(10)])
else:
    x = rng.random((128, 12, 12, 1)).astype(np.float32)
    y = (x[:, 3:9, 3:9, 0].mean(axis=(1, 2)) * 10).astype(np.int64) % 10
    net = keras.Sequential([
        keras.Input((12, 12, 1)),
        layers.Conv2D(6, 3, activation="relu", padding="same"),
        layers.MaxPooling2D(),
        layers.Conv2D(8, 3, activation="sigmoid"),
        layers.Flatten(),
        layers.Dense(10),
    ])
# compile()'s defaults: jit_compile="auto" among them.
net.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
history = net.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0)
eval_loss = net.evaluate(x, y, batch_size=32, verbose=0)[0]
net.predict(x[:64], batch_size=32, verbose=0)

ACTIVATIONS = {"Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid"}
graphs = []
for path in sorted(glob.glob(os.path.join(os.environ["TF_DUMP_GRAPH_PREFIX"], "*PluggableGraphOptimizer*"))):
    with open(path) as f:
        graph = text_format.Parse(f.read(), graph_pb2.GraphDef())
    on_wasm = [n for n in graph.node if "device:WASM:" in n.device]
    fused = sorted(
        "%s[%s]" % (n.op, ",".join(s.decode() for s in n.attr["fused_ops"].list.s))
        for n in on_wasm if n.op in ("_FusedMatMul", "_FusedConv2D")
    )
    alphas = sorted({round(n.attr["leakyrelu_alpha"].f, 6) for n in on_wasm
                     if n.op == "_FusedMatMul" and b"LeakyRelu" in n.attr["fused_ops"].list.s})
    graphs.append({
        "train": any(n.name.startswith("gradient_tape/") for n in graph.node),
        "fused": fused,
        "alphas": alphas,
        "activations": sorted({n.op for n in on_wasm if n.op in ACTIVATIONS}),
        "products": sorted(n.op for n in on_wasm if n.op in ("MatMul", "Conv2D") and not n.name.startswith("gradient_tape/")),
    })
result("cases", json.dumps({
    "loss": [float(v) for v in history.history["loss"]],
    "eval_loss": float(eval_loss),
    "weights_device": net.trainable_variables[0].value.device,
    "graphs": graphs,
}))
"""

MLP_TRAIN = {
    "_FusedMatMul[BiasAdd,Relu]",
    "_FusedMatMul[BiasAdd,Tanh]",
    "_FusedMatMul[BiasAdd,Sigmoid]",
    "_FusedMatMul[BiasAdd,Elu]",
    "_FusedMatMul[BiasAdd,Relu6]",
    # leaky_relu (its gradient reads the sum) and the logits.
    "_FusedMatMul[BiasAdd]",
}
EXPECTED = {
    "mlp": {
        "train": MLP_TRAIN,
        "train_activations": {"LeakyRelu"},
        "predict": MLP_TRAIN | {"_FusedMatMul[BiasAdd,LeakyRelu]"},
    },
    "cnn": {
        "train": {"_FusedConv2D[BiasAdd,Relu]", "_FusedConv2D[BiasAdd,Sigmoid]", "_FusedMatMul[BiasAdd]"},
        "train_activations": set(),
        "predict": {"_FusedConv2D[BiasAdd,Relu]", "_FusedConv2D[BiasAdd,Sigmoid]", "_FusedMatMul[BiasAdd]"},
    },
}


@keras_eager_xla_step
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_keras_fit_fuses_contractions_and_matches_the_cpu(model, run_tf, tmp_path):
    dumps = tmp_path / f"dumps-{model}"
    dumps.mkdir()
    env = {
        "CONTRACTION_MODEL": model,
        "TF_DUMP_GRAPH_PREFIX": str(dumps),
        # The meta optimizer writes the graph after each of its passes.
        "TF_CPP_VMODULE": "meta_optimizer=4",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    wasm, wasm_run = run_cases(run_tf, KERAS, env, pipeline_policy())
    cpu_dumps = tmp_path / f"cpu-dumps-{model}"
    cpu_dumps.mkdir()
    cpu, _ = run_cases(run_tf, KERAS, dict(env, TF_DUMP_GRAPH_PREFIX=str(cpu_dumps)), pipeline_policy(count=0))

    assert wasm["weights_device"].endswith("WASM:0"), wasm_run.describe()
    np.testing.assert_allclose(wasm["loss"], cpu["loss"], rtol=LOSS_RTOL, err_msg=f"{model}: losses per epoch")
    np.testing.assert_allclose(wasm["eval_loss"], cpu["eval_loss"], rtol=LOSS_RTOL)
    assert wasm["loss"][-1] < wasm["loss"][0], "the model did not learn"

    expected = EXPECTED[model]
    # The train step: forward and backward in one graph.
    train = [g for g in wasm["graphs"] if g["train"] and (g["fused"] or g["products"])]
    assert train, f"{model}: no train step came back with a fused node\n{wasm_run.describe()}"
    for graph in train:
        assert set(graph["fused"]) == expected["train"], graph
        assert set(graph["activations"]) == expected["train_activations"], graph
        assert graph["products"] == [], f"{model}: a forward product was left unfused: {graph}"
    # Inference graphs (evaluate, predict): nothing reads the sums but the activation.
    inference = [set(g["fused"]) for g in wasm["graphs"] if not g["train"] and g["fused"]]
    assert expected["predict"] in inference, f"{model}: inference graphs fused {inference}"
    if model == "mlp":
        assert any(g["alphas"] == [0.2] for g in wasm["graphs"]), "LeakyRelu's alpha (Keras: 0.2) was not copied"


# -------------------------------------------------------- tf.function chains

# Each case: an op chain as a tf.function, on WASM and on the CPU device;
# forward values, gradients of every input, and the fused nodes on WASM in
# the optimized function graphs (run metadata) of each.
FUNCTIONS = """
import json
from tensorflow.python.eager import context

def leaky(v):
    return tf.nn.leaky_relu(v, alpha=0.3)  # not the default 0.2: the attribute must be copied

ACT = {"Relu": tf.nn.relu, "Relu6": tf.nn.relu6, "Elu": tf.nn.elu, "LeakyRelu": leaky,
       "Tanh": tf.nn.tanh, "Sigmoid": tf.nn.sigmoid, "": tf.identity}

def dense(x, w, b, act, transpose_b=False):
    return ACT[act](tf.nn.bias_add(tf.matmul(x, w, transpose_b=transpose_b), b))

def conv(x, f, b, act, strides, padding):
    return ACT[act](tf.nn.bias_add(tf.nn.conv2d(x, f, strides=strides, padding=padding), b))

def make(chain, grads):
    @tf.function
    def run(*inputs):
        if not grads:
            return [chain(*inputs)]
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            y = chain(*inputs)
        return [y] + tape.gradient(y, list(inputs), output_gradients=tf.ones_like(y) * 0.5)
    return run

rng = np.random.default_rng(11)
def data(*shape):
    return (rng.standard_normal(shape) * 2).astype(np.float32)

cases = []
# MatMul chains: (batch, in, out) 1×1, primes, a batch of 0, a transposed weight.
for act in ACT:
    for batch, k, n, transpose in [(1, 1, 1, False), (7, 13, 11, False), (0, 5, 3, False), (17, 3, 5, True)]:
        w = data(n, k) if transpose else data(k, n)
        chain = lambda x, w, b, act=act, t=transpose: dense(x, w, b, act, t)
        cases.append((f"matmul {act or 'none'} {batch}x{k}x{n}{' T' if transpose else ''}", act, chain,
                      [data(batch, k), w, data(n)]))
# Two layers: both fuse, the second reading the first's fused node.
cases.append(("two layers Relu>Tanh", "Relu", lambda x, w1, b1, w2, b2: dense(dense(x, w1, b1, "Relu"), w2, b2, "Tanh"),
              [data(5, 7), data(7, 3), data(3), data(3, 2), data(2)]))
# Conv2D chains: NHWC, 1×1 images, primes, a batch of 0, strides, SAME and VALID.
for act in ["Relu", "LeakyRelu", "Sigmoid", ""]:
    for shape, fshape, strides, padding in [((1, 1, 1, 1), (1, 1, 1, 1), 1, "VALID"), ((2, 7, 5, 3), (3, 2, 3, 5), 2, "SAME"),
                                            ((0, 5, 5, 2), (3, 3, 2, 3), 1, "VALID")]:
        chain = lambda x, f, b, act=act, s=strides, p=padding: conv(x, f, b, act, s, p)
        cases.append((f"conv {act or 'none'} {shape} {fshape} {padding}", act, chain, [data(*shape), data(*fshape), data(fshape[-1])]))

ctx = context.context()
out = []
for name, act, chain, inputs in cases:
    for grads in (False, True):
        fn = make(chain, grads)
        ctx.enable_run_metadata()
        ctx.export_run_metadata()
        with tf.device("/device:WASM:0"):
            wasm = [t.numpy() for t in fn(*[tf.constant(a) for a in inputs])]
        graphs = ctx.export_run_metadata().function_graphs
        ctx.disable_run_metadata()
        nodes = [n for g in graphs for n in g.post_optimization_graph.node if "device:WASM:" in n.device]
        with tf.device("/device:CPU:0"):
            cpu = [t.numpy() for t in fn(*[tf.constant(a) for a in inputs])]
        out.append({
            "name": name, "act": act, "grads": grads,
            "fused": sorted({"%s[%s]" % (n.op, ",".join(s.decode() for s in n.attr["fused_ops"].list.s))
                             for n in nodes if n.op in ("_FusedMatMul", "_FusedConv2D")}),
            "alphas": sorted({round(n.attr["leakyrelu_alpha"].f, 6) for n in nodes if n.op == "_FusedMatMul"
                              and b"LeakyRelu" in n.attr["fused_ops"].list.s}),
            "wasm": [w.tolist() for w in wasm], "cpu": [c.tolist() for c in cpu],
            "shapes": [list(w.shape) for w in wasm], "cpu_shapes": [list(c.shape) for c in cpu],
        })
result("cases", json.dumps(out))
"""


def close(got, expected, rtol=1e-4, what=""):
    got, expected = np.asarray(got, np.float32), np.asarray(expected, np.float32)
    atol = rtol * max(1.0, float(np.max(np.abs(expected)))) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=what)


def expected_fused(case) -> list[str]:
    """What the optimized graph must hold for a case's chain."""
    if case["name"].startswith("two layers"):
        return ["_FusedMatMul[BiasAdd,Relu]", "_FusedMatMul[BiasAdd,Tanh]"]
    op = "_FusedConv2D" if case["name"].startswith("conv") else "_FusedMatMul"
    act = case["act"]
    # LeakyRelu's gradient reads its input, the BiasAdd's output: that must
    # stay, so only the product and the bias fuse. (The other activations'
    # gradients read their output, in TensorFlow 2.21 Relu6's too.)
    if not act or (case["grads"] and act == "LeakyRelu"):
        return [f"{op}[BiasAdd]"]
    return [f"{op}[BiasAdd,{act}]"]


def test_chains_fuse_and_match_the_cpu_forward_and_backward(run_tf):
    cases, done = run_cases(run_tf, FUNCTIONS, {"TF_CPP_MIN_LOG_LEVEL": "2"}, pipeline_policy())
    assert len(cases) == 2 * (7 * 4 + 1 + 4 * 3)
    for case in cases:
        what = f"{case['name']}{' with gradients' if case['grads'] else ''}"
        assert case["fused"] == expected_fused(case), f"{what}: fused {case['fused']}\n{done.describe()}"
        if case["act"] == "LeakyRelu" and not case["grads"] and case["name"].startswith("matmul"):
            assert case["alphas"] == [0.3], f"{what}: leakyrelu_alpha {case['alphas']}"
        assert case["shapes"] == case["cpu_shapes"], what
        labels = ["output"] + [f"gradient {i}" for i in range(len(case["wasm"]) - 1)]
        for label, got, want in zip(labels, case["wasm"], case["cpu"]):
            close(got, want, what=f"{what}: {label}")


OPTION = """
import json
from tensorflow.python.eager import context

@tf.function
def f(x, w, b):
    return tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b)), tf.tanh(tf.nn.bias_add(tf.matmul(x, w * 2.0), b))

x, w, b = np.ones((3, 4), np.float32), np.full((4, 2), 0.25, np.float32), np.array([-2.0, 0.5], np.float32)
ctx = context.context()
ctx.enable_run_metadata()
with tf.device("/device:WASM:0"):
    relu, tanh = f(tf.constant(x), tf.constant(w), tf.constant(b))
graphs = ctx.export_run_metadata().function_graphs
nodes = [n for g in graphs for n in g.post_optimization_graph.node if "device:WASM:" in n.device]
result("cases", json.dumps({
    "fused": sorted({"%s[%s]" % (n.op, ",".join(s.decode() for s in n.attr["fused_ops"].list.s))
                     for n in nodes if n.op == "_FusedMatMul"}),
    "relu": relu.numpy().tolist(), "tanh": tanh.numpy().tolist(),
}))
"""


def test_the_policy_config_reaches_the_pass(run_tf):
    """``activations = "Tanh"`` in ``[pass.config]``: the Tanh chain fuses
    whole, the Relu chain only up to its bias (the Relu then runs as its own
    node or in the elementwise pass's group); the values are unchanged."""
    found, done = run_cases(run_tf, OPTION, {"TF_CPP_MIN_LOG_LEVEL": "2"}, pipeline_policy({"activations": "Tanh"}))
    assert found["fused"] == ["_FusedMatMul[BiasAdd,Tanh]", "_FusedMatMul[BiasAdd]"], done.describe()
    np.testing.assert_allclose(found["relu"], [[0.0, 1.5]] * 3, rtol=1e-6)
    np.testing.assert_allclose(found["tanh"], np.tanh([[0.0, 2.5]] * 3), rtol=1e-6)
