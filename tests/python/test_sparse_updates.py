"""Sparse (scatter) updates of variables on the WASM device.

TensorFlow's ``ResourceScatterAdd``/``ResourceScatterSub`` kernels exist for
the CPU only (they need variable internals the wheel's C API does not
export), so a variable on WASM updated that way used to make placement fail
— every Keras ``Embedding`` trained with plain SGD, RMSprop, Adagrad or
Adadelta. tfwasm's graph pass now turns each into an assignment of an
updated copy (``_TfwasmScatterAdd``/``_TfwasmScatterSub``); these tests hold
that to the CPU device's results, bit for bit where the arithmetic is the
same, and check the errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from tfwasm_support import run_cases
from test_training import SCRIPT, LOSS_RTOL, env_with_package, run

SCATTERS = """
import json
from tensorflow.python.eager import context
rng = np.random.default_rng(3)
CASES = [
    # variable shape, indices (duplicates included), index dtype
    ((5, 3), [4, 0, 4, 2], np.int32),
    ((7,), [6, 6, 0], np.int64),
    ((1, 1), [0], np.int32),
    ((6, 2, 3), [[1, 5], [5, 1]], np.int64),
    ((4, 3), [], np.int32),
]
out = {}
for i, (shape, indices, index_type) in enumerate(CASES):
    v0 = rng.standard_normal(shape).astype(np.float32)
    idx = np.array(indices, index_type).reshape(np.shape(indices))
    upd = rng.standard_normal(idx.shape + shape[1:]).astype(np.float32)
    results = {}
    for device in ("/device:WASM:0", "/CPU:0"):
        with tf.device(device):
            v = tf.Variable(v0)

        @tf.function
        def step(idx, upd):
            v.scatter_sub(tf.IndexedSlices(upd, idx))
            v.scatter_add(tf.IndexedSlices(upd * 0.5, idx))

        context.context().enable_run_metadata()
        step(tf.constant(idx), tf.constant(upd))
        graphs = context.context().export_run_metadata().function_graphs
        context.context().disable_run_metadata()
        ran = sorted({n.op for g in graphs for n in g.post_optimization_graph.node if "device:WASM:" in n.device})
        results[device] = {"bits": v.numpy().view(np.uint32).ravel().tolist(), "device": v.device, "ran": ran}
    out[i] = results

# An index out of range fails the step and leaves the variable as it was.
with tf.device("/device:WASM:0"):
    v = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))

@tf.function
def bad(idx):
    v.scatter_add(tf.IndexedSlices(tf.ones([1, 2]), idx))

try:
    bad(tf.constant([3]))
    error = ("none", "")
except tf.errors.OpError as e:
    error = (type(e).__name__, e.message)

# Eagerly there is no graph pass: the kernel says what to do instead.
try:
    v.scatter_sub(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0])))
    eager = ("none", "")
except tf.errors.OpError as e:
    eager = (type(e).__name__, e.message)
out["errors"] = {
    "bad": error, "eager": eager, "v": v.numpy().ravel().tolist(),
    "after": float(tf.add(1.0, 2.0).numpy()),
}
result("cases", json.dumps(out))
"""


def test_scatter_updates_in_a_function_match_the_cpu_bit_for_bit(run_tf):
    cases, run_ = run_cases(run_tf, SCATTERS, {})
    errors = cases.pop("errors")
    for i, results in cases.items():
        wasm, cpu = results["/device:WASM:0"], results["/CPU:0"]
        assert wasm["device"].endswith("WASM:0"), wasm["device"]
        assert wasm["bits"] == cpu["bits"], f"case {i}: WASM and CPU variables differ"
        assert {"_TfwasmScatterSub", "_TfwasmScatterAdd", "AssignVariableOp"} <= set(wasm["ran"]), wasm["ran"]
        assert not {"ResourceScatterSub", "ResourceScatterAdd"} & set(wasm["ran"]), wasm["ran"]
    kind, message = errors["bad"]
    assert kind == "InvalidArgumentError" and "indices[0] = 3 is not in [0, 3)" in message, errors["bad"]
    kind, message = errors["eager"]
    assert kind == "UnimplementedError" and "inside a tf.function" in message and "tfwasm" in message, errors["eager"]
    # Neither failure changed the variable, and the process computes on.
    assert errors["v"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert errors["after"] == 3.0


@pytest.mark.parametrize("optimizer", ["sgd", "rmsprop", "adadelta"])
def test_embedding_trains_with_sparse_optimizers_like_the_cpu(optimizer, tmp_path, cpu_policy):
    """Keras' Embedding with optimizers that scatter its sparse gradient
    (ResourceScatterSub for SGD and RMSprop, ResourceScatterAdd for
    Adadelta): same losses as on the CPU device over 3 epochs."""
    args = [str(SCRIPT), "--model", "embedding", "--optimizer", optimizer]
    wasm, _ = run(args, env_with_package(), tmp_path, f"embedding/{optimizer} on WASM")
    cpu, _ = run(args, env_with_package(cpu_policy), tmp_path, f"embedding/{optimizer} on CPU")
    assert wasm["weights_device"].endswith("WASM:0")
    assert cpu["devices"] == ["CPU"]
    np.testing.assert_allclose(wasm["loss"], cpu["loss"], rtol=LOSS_RTOL, err_msg=f"{optimizer}: losses per epoch")
    np.testing.assert_allclose(wasm["eval_loss"], cpu["eval_loss"], rtol=LOSS_RTOL)
