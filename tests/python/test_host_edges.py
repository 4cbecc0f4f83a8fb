"""Tensors cross between the CPU device and WASM in host memory.

The graph pass marks the inputs of our kernels that come from CPU nodes
(``_input_hostmem``), and the outputs only CPU nodes read
(``_output_hostmem``). TensorFlow then partitions those edges into
``_HostRecv``/``_HostSend`` nodes that pass the tensor by reference instead
of copying it through the device's streams. It also marks the int32 side
of every ``Cast`` of ours, so int32 stays in host memory between our
kernels instead of being copied from WASM to WASM. Each case runs in a fresh
interpreter with the pass on (the default) and off (``TFWASM_HOST_EDGES=0``):
the results must be the same bits, agree with NumPy, and the partition
graphs must show which way the edges went.

The pass also marks TensorFlow's ``Identity`` on WASM when only the CPU
reads it, and moves a ``_Retval`` of a variant made on the CPU (Keras'
train step returns its logs in an ``Optional``) to that CPU.
"""

from __future__ import annotations

import json

from tfwasm_support import run_cases
from versions import keras_eager_xla_step

PROGRAM = """
import json
from tensorflow.python.eager import context

# Odd shapes: empty, 1×1, primes, a row that broadcasts.
SHAPES = [(0, 5), (1, 1), (13, 17), (1, 17)]

@tf.function
def step(x, y, begin):
    # `x` and `y` come from the CPU; `x` feeds a product, an add and
    # slices that take all of it, so their kernels forward the input: a
    # host tensor, which must be copied into device memory instead. (The
    # start is an argument, so grappler cannot drop the slices.)
    with tf.device("/device:WASM:0"):
        whole = tf.strided_slice(x, begin, tf.shape(x)) + tf.slice(x, begin, [-1, -1])
        prod = tf.matmul(x, x, transpose_b=True)
        total = tf.reduce_sum(x + y)
    # Read only on the CPU: produced in host memory.
    with tf.device("/device:CPU:0"):
        shifted = total + 1.0
    return whole, prod, shifted

rng = np.random.default_rng(7)
out = {}
for i, shape in enumerate(SHAPES):
    with tf.device("/device:CPU:0"):
        x = tf.constant(rng.standard_normal(shape).astype(np.float32))
        y = tf.constant(rng.standard_normal((1, shape[1])).astype(np.float32))
        begin = tf.constant([0, 0])
    context.context().enable_run_metadata()
    whole, prod, shifted = [t.numpy() for t in step(x, y, begin)]
    graphs = context.context().export_run_metadata().function_graphs
    context.context().disable_run_metadata()
    ops = sorted({(n.op, n.device.rsplit(":", 2)[-2]) for g in graphs for p in g.partition_graphs for n in p.node})
    xn, yn = x.numpy(), y.numpy()
    out[i] = {
        "ops": ops,
        "bits": [a.view(np.uint32).tolist() for a in (whole, prod, shifted)],
        "whole": bool(np.array_equal(whole, xn + xn)),
        "prod": float(np.max(np.abs(prod - xn @ xn.T), initial=0.0)),
        "shifted": abs(float(shifted) - float(np.sum(xn + yn, dtype=np.float64) + 1.0)),
    }
result("cases", json.dumps(out))
"""


def test_cpu_edges_cross_in_host_memory_and_nothing_changes(run_tf):
    marked, marked_run = run_cases(run_tf, PROGRAM, {"TFWASM_HOST_EDGES": "1"})
    plain, plain_run = run_cases(run_tf, PROGRAM, {"TFWASM_HOST_EDGES": "0"})
    for i, case in marked.items():
        ops = {tuple(op) for op in case["ops"]}
        # On: every CPU input arrives in host memory on WASM, the sum leaves in it.
        assert ("_HostRecv", "WASM") in ops and ("_HostSend", "WASM") in ops, f"case {i}: {sorted(ops)}\n{marked_run.describe()}"
        assert not {("_Recv", "WASM"), ("_Send", "WASM")} & ops, f"case {i}: {sorted(ops)}"
        # Off: the float edges go through device memory (`begin` is a host
        # argument of the slices either way).
        plain_ops = {tuple(op) for op in plain[i]["ops"]}
        assert {("_Recv", "WASM"), ("_Send", "WASM")} <= plain_ops, plain_run.describe()
        assert ("_HostSend", "WASM") not in plain_ops, plain_run.describe()
        assert case["bits"] == plain[i]["bits"], f"case {i}: results differ with the pass on and off"
        assert case["whole"], f"case {i}: the forwarded slices are not the input"
        assert case["prod"] <= 1e-5, f"case {i}: product off by {case['prod']}"
        assert case["shifted"] <= 1e-3, f"case {i}: sum off by {case['shifted']}"


OPTIONAL_PROGRAM = """
import json
from tensorflow.python.eager import context

@tf.function
def step(x):
    with tf.device("/device:WASM:0"):
        prod = tf.matmul(x, x, transpose_b=True)
        # TensorFlow's Identity on WASM, read only on the CPU: of a device
        # tensor, and of a CPU tensor (a round trip).
        total = tf.identity(tf.reduce_sum(x))
        echo = tf.identity(x)
    # No kernel of ours reads a variant: the Optional is made on the CPU.
    return tf.experimental.Optional.from_value((prod, total, echo))

@tf.function
def rows(x):
    with tf.device("/device:WASM:0"):
        prod = tf.matmul(x, x, transpose_b=True)
    # Another variant: a TensorList of the product's rows.
    return tf.raw_ops.TensorListFromTensor(tensor=prod, element_shape=tf.constant([-1], tf.int32))

rng = np.random.default_rng(3)
out = {}
for i, shape in enumerate([(0, 5), (1, 1), (13, 17)]):
    x = tf.constant(rng.standard_normal(shape).astype(np.float32))
    context.context().export_run_metadata()  # drop what earlier calls left
    context.context().enable_run_metadata()
    optional = step(x)
    graphs = context.context().export_run_metadata().function_graphs
    context.context().disable_run_metadata()
    prod, total, echo = optional.get_value()
    xn = x.numpy()
    listed = rows(x)
    stacked = tf.raw_ops.TensorListStack(input_handle=listed, element_dtype=tf.float32, element_shape=tf.constant([shape[0]], tf.int32))
    out[i] = {
        "returned_on": optional._variant_tensor.backing_device.rsplit(":", 2)[-2],
        "has_value": bool(optional.has_value()),
        "ops": sorted({(n.op, n.device.rsplit(":", 2)[-2]) for g in graphs for p in g.partition_graphs for n in p.node}),
        "prod": float(np.max(np.abs(prod.numpy() - xn @ xn.T), initial=0.0)),
        "prod_shape": list(prod.shape),
        "total": abs(float(total) - float(np.sum(xn, dtype=np.float64))),
        "echo": bool(np.array_equal(echo.numpy(), xn)) and list(echo.shape) == list(shape),
        "list_on": listed.backing_device.rsplit(":", 2)[-2],
        "list": bool(np.array_equal(stacked.numpy(), prod.numpy())),
    }
result("cases", json.dumps(out))
"""


def test_an_optional_made_on_the_cpu_is_returned_there(run_tf):
    """A function returning an ``Optional`` (as Keras' train step does, every
    step): with the pass the variant is returned on the CPU where it was
    made, so neither the function nor the eager ops that open it copy its
    tensors through WASM memory, and the ``Identity`` nodes on WASM hand
    their values over in host memory; the values are right either way, on
    0-size, 1×1 and prime shapes."""
    runs = {flag: run_cases(run_tf, OPTIONAL_PROGRAM, {"TFWASM_HOST_EDGES": flag})[0] for flag in ("1", "0")}
    for i, case in runs["1"].items():
        plain = runs["0"][i]
        assert (case["returned_on"], plain["returned_on"]) == ("CPU", "WASM"), f"case {i}: {case} / {plain}"
        # TensorFlow builds this one with its own kernel on WASM: it stays.
        assert case["list_on"] == plain["list_on"] == "WASM", f"case {i}: {case} / {plain}"
        assert case["list"] and plain["list"], f"case {i}: the TensorList does not hold the product's rows"
        ops = {tuple(op) for op in case["ops"]}
        assert ("_Retval", "WASM") not in ops and ("_Recv", "WASM") not in ops, f"case {i}: {sorted(ops)}"
        assert ("_HostSend", "WASM") in ops, f"case {i}: {sorted(ops)}"
        assert ("_Retval", "WASM") in {tuple(op) for op in plain["ops"]}
        for run in (case, plain):
            assert run["has_value"] and run["prod"] <= 1e-5 and run["total"] <= 1e-3 and run["echo"], f"case {i}: {run}"
        assert case["prod_shape"] == [[0, 0], [1, 1], [13, 13]][int(i)]


@keras_eager_xla_step
def test_keras_training_marks_the_batch_and_matches(run_tf):
    """A Keras fit: the batch from the CPU iterator reaches the model in host
    memory (the debug log says how many inputs were marked), the step's
    result is returned on the CPU without a device copy, and the losses are
    the same floats with the pass on and off."""
    program = """
        import keras
        from tensorflow.python.eager import context
        keras.utils.set_random_seed(1)
        x = np.random.default_rng(0).standard_normal((96, 11)).astype(np.float32)
        y = (x.sum(axis=1) > 0).astype(np.int32)
        model = keras.Sequential([keras.Input((11,)), keras.layers.Dense(7, activation="relu"), keras.layers.Dense(2)])
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
        context.context().enable_run_metadata()
        history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
        graphs = context.context().export_run_metadata().function_graphs
        context.context().disable_run_metadata()
        # The train step: the function whose partitions read the iterator.
        steps = [g for g in graphs if any(n.op == "IteratorGetNext" for p in g.partition_graphs for n in p.node)]
        ops = sorted({(n.op, n.device.rsplit(":", 2)[-2]) for g in steps for p in g.partition_graphs for n in p.node})
        result("ops", json.dumps(ops))
        result("loss", json.dumps(history.history["loss"]))
        result("device", model.weights[0].value.device)
    """
    runs = {}
    for flag in ("1", "0"):
        done = run_tf("import json\n" + __import__("textwrap").dedent(program), env={"TFWASM_HOST_EDGES": flag, "TFWASM_LOG": "debug"})
        assert done.returncode == 0, done.describe()
        runs[flag] = done
    assert runs["1"].results()["device"].endswith("WASM:0")
    assert runs["1"].results()["loss"] == runs["0"].results()["loss"]
    assert "cross from and to the CPU in host memory" in runs["1"].stderr, runs["1"].describe()
    assert "returned from there" in runs["1"].stderr, runs["1"].describe()
    assert "cross from and to the CPU in host memory" not in runs["0"].stderr
    # On: data crosses only in host memory, and the Optional with the logs
    # is returned from the CPU. Off: the step receives and returns through
    # device memory.
    ops = {tuple(op) for op in json.loads(runs["1"].results()["ops"])}
    plain = {tuple(op) for op in json.loads(runs["0"].results()["ops"])}
    assert ("IteratorGetNext", "CPU") in ops and ("_HostRecv", "WASM") in ops and ("_HostSend", "WASM") in ops, sorted(ops)
    assert not {("_Recv", "WASM"), ("_Retval", "WASM")} & ops, sorted(ops)
    assert {("_Recv", "WASM"), ("_Retval", "WASM")} <= plain, sorted(plain)


# int32 between our kernels: casts to and from int32 next to int32
# arithmetic, the element count of a `reduce_mean` (a `Prod` of the shape,
# cast to float), and its gradient in a custom training step, on odd shapes.
INT32_PROGRAM = """
import json
from tensorflow.python.eager import context

SHAPES = [(0, 5), (1, 1), (13, 17), (3, 257)]
WASM = "/device:WASM:0"

@tf.function
def step(x):
    with tf.device(WASM):
        w = tf.ones_like(x) * 0.5
        with tf.GradientTape() as tape:
            tape.watch(w)
            loss = tf.reduce_mean(x * w)
        grad = tape.gradient(loss, w)
        ints = tf.cast(x * 4.0, tf.int32) * 3 - 1
        back = tf.cast(ints, tf.float32)
        count = tf.cast(tf.reduce_prod(tf.shape(x)), tf.float32)
    return grad, back, count

rng = np.random.default_rng(11)
out = {}
for i, shape in enumerate(SHAPES):
    with tf.device("/device:CPU:0"):
        x = tf.constant(rng.standard_normal(shape).astype(np.float32))
    context.context().enable_run_metadata()
    grad, back, count = [t.numpy() for t in step(x)]
    graphs = context.context().export_run_metadata().function_graphs
    context.context().disable_run_metadata()
    # Copies inside WASM: a send and a receive both on WASM.
    inside = sorted(
        n.op for g in graphs for p in g.partition_graphs for n in p.node
        if n.op in ("_Send", "_Recv", "_HostSend", "_HostRecv")
        and "WASM" in n.attr["send_device"].s.decode() and "WASM" in n.attr["recv_device"].s.decode()
    )
    xn = x.numpy()
    out[i] = {
        "inside": inside,
        # d mean(x·w) / dw = x / N, as TensorFlow rounds it: x · (1 / N).
        "grad": grad.shape == xn.shape and bool(np.allclose(grad, xn * (np.float32(1) / np.float32(max(xn.size, 1))), rtol=1e-6, atol=0)),
        "back": bool(np.array_equal(back, ((xn * 4.0).astype(np.int32) * 3 - 1).astype(np.float32))),
        "count": float(count) == float(xn.size),
        "bits": [a.view(np.uint32).tolist() for a in (grad, back, np.asarray(count))],
    }
result("cases", json.dumps(out))
"""


def test_int32_stays_in_host_memory_between_our_kernels(run_tf):
    marked, marked_run = run_cases(run_tf, INT32_PROGRAM, {"TFWASM_HOST_EDGES": "1"})
    plain, plain_run = run_cases(run_tf, INT32_PROGRAM, {"TFWASM_HOST_EDGES": "0"})
    for i, case in marked.items():
        # On: no tensor is copied from WASM to WASM; off: the casts' int32
        # edges go through the stream.
        assert case["inside"] == [], f"case {i}: copies inside WASM {case['inside']}\n{marked_run.describe()}"
        assert plain[i]["inside"], f"case {i}: expected copies inside WASM with the pass off\n{plain_run.describe()}"
        assert case["grad"] and case["back"] and case["count"], f"case {i}: {case}"
        assert case["bits"] == plain[i]["bits"], f"case {i}: results differ with the pass on and off"


# A loop whose condition joins two int32 comparisons with `logical_and`, as
# Keras' recurrent layers do (`time < steps and counter < maximum`): the
# comparisons are TensorFlow's own int32 kernels (host memory), `LogicalAnd`
# is ours, `LoopCond` reads its predicate in host memory. The body runs our
# float kernels on odd shapes, and a Keras LSTM trains through such a loop.
LOOP_PROGRAM = """
import json
from tensorflow.python.eager import context

SHAPES = [(0, 5), (1, 1), (13, 17), (3, 257)]
WASM = "/device:WASM:0"

@tf.function
def loop(x, n):
    with tf.device(WASM):
        def cond(i, h):
            return tf.logical_and(i < n, i < 7)
        def body(i, h):
            return i + 1, tf.tanh(h * 0.5 + x)
        steps, h = tf.while_loop(cond, body, (tf.constant(0), tf.zeros_like(x)))
    return steps, h

def inside_copies(graphs):
    # A send and a receive both on WASM: a copy between memory types.
    return sorted(
        n.op for g in graphs for p in g.partition_graphs for n in p.node
        if n.op in ("_Send", "_Recv", "_HostSend", "_HostRecv")
        and "WASM" in n.attr["send_device"].s.decode() and "WASM" in n.attr["recv_device"].s.decode()
    )

rng = np.random.default_rng(5)
out = {}
for i, shape in enumerate(SHAPES):
    x = rng.standard_normal(shape).astype(np.float32)
    n = tf.constant(5 + i)
    context.context().export_run_metadata()  # drop what earlier calls left
    context.context().enable_run_metadata()
    steps, h = loop(tf.constant(x), n)
    graphs = context.context().export_run_metadata().function_graphs
    context.context().disable_run_metadata()
    expect = np.zeros_like(x)
    for _ in range(min(5 + i, 7)):
        expect = np.tanh(expect * np.float32(0.5) + x)
    out[i] = {
        "inside": inside_copies(graphs),
        "ran_on": h.device.rsplit(":", 2)[-2],
        "steps": int(steps),
        "expect_steps": min(5 + i, 7),
        "error": float(np.max(np.abs(h.numpy() - expect), initial=0.0)),
        "bits": h.numpy().view(np.uint32).tolist(),
    }

import keras
keras.utils.set_random_seed(3)
data = rng.standard_normal((64, 9, 5)).astype(np.float32)
labels = rng.integers(0, 4, 64)
model = keras.Sequential([keras.Input((9, 5)), keras.layers.LSTM(6), keras.layers.Dense(4)])
# jit_compile=False: with "auto" the step is a nested function call, whose
# partition graphs the run metadata does not list.
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
context.context().enable_run_metadata()
history = model.fit(data, labels, batch_size=16, epochs=2, verbose=0)
graphs = context.context().export_run_metadata().function_graphs
context.context().disable_run_metadata()

# Keras' step around the model: its NaN check masks bits with an int32
# constant (our BitwiseAnd), the accuracy metric casts our ArgMax to float,
# and an Embedding's lookup selects int32 indices (our SelectV2) that
# TensorFlow's int32 Reshape reads.
tokens = rng.integers(0, 30, (64, 7)).astype(np.int32)
embedded = keras.Sequential([keras.Input((7,), dtype="int32"), keras.layers.Embedding(30, 4), keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4)])
embedded.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"], jit_compile=False)
context.context().enable_run_metadata()
embedded_history = embedded.fit(tokens, labels, batch_size=16, epochs=2, verbose=0)
step_graphs = context.context().export_run_metadata().function_graphs
context.context().disable_run_metadata()
train_steps = [g for g in step_graphs if any(n.op == "IteratorGetNext" for p in g.partition_graphs for n in p.node)]

def keras_case(graphs, fitted, history):
    return {
        "loops": len(graphs),
        "inside": inside_copies(graphs),
        "loss": history.history["loss"],
        "weights_on": fitted.weights[0].value.device.rsplit(":", 2)[-2],
    }

out["embedding"] = keras_case(train_steps, embedded, embedded_history)
# The functions that run the recurrence (Keras' one-off functions, such as
# variable-initialisation checks too small for graph passes, are not ours).
loops = [g for g in graphs if any(n.op == "LoopCond" for p in g.partition_graphs for n in p.node)]
out["lstm"] = keras_case(loops, model, history)
result("cases", json.dumps(out))
"""


@keras_eager_xla_step
def test_no_copies_between_memory_types_inside_the_device(run_tf):
    """No copy from WASM to WASM in a ``while`` loop whose condition joins
    int32 comparisons with our ``LogicalAnd``, in a Keras LSTM's train step
    (before the pass: three per iteration, each through the stream), nor in
    the int32 bookkeeping of a Keras step with an Embedding and an accuracy
    metric; results are the same bits with the pass on and off, and agree
    with NumPy on 0-size, 1×1 and prime shapes."""
    marked, marked_run = run_cases(run_tf, LOOP_PROGRAM, {"TFWASM_HOST_EDGES": "1"})
    plain, plain_run = run_cases(run_tf, LOOP_PROGRAM, {"TFWASM_HOST_EDGES": "0"})
    for i, case in marked.items():
        assert case["inside"] == [], f"case {i}: copies inside WASM {case['inside']}\n{marked_run.describe()}"
        assert plain[i]["inside"], f"case {i}: expected copies inside WASM with the pass off\n{plain_run.describe()}"
        if i in ("lstm", "embedding"):
            assert case["weights_on"] == "WASM" and case["loops"] > 0, case
            assert case["loss"] == plain[i]["loss"], f"losses differ with the pass on and off: {case} / {plain[i]}"
            continue
        assert case["ran_on"] == "WASM", case
        assert case["steps"] == case["expect_steps"], case
        assert case["error"] <= 1e-5, f"case {i}: off by {case['error']}"
        assert case["bits"] == plain[i]["bits"], f"case {i}: results differ with the pass on and off"
