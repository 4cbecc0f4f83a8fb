"""Elementwise kernels (binary.rs, unary.rs) on the WASM device against TensorFlow's CPU device.

Tolerances: ops that are one IEEE operation per element (add, mul, div, max,
relu, floor, casts, comparisons, …) must match exactly; transcendental ones
(exp, log, tanh, sigmoid, erf, erfc, softplus, pow, …) use the C library
where TF's CPU kernels use Eigen's vectorised approximations, so they are
compared with rtol=1e-5 and atol=1e-6 (elu/selu/expm1-like ``exp(x) - 1``
cancels near 0, hence the absolute part).
"""

import math

import numpy as np
import pytest

from tfwasm_support import WASM, binary_shapes, on_wasm, ops_on_wasm, run_on_wasm
from tfwasm_support import random_data as data

CPU = "/device:CPU:0"
BINARY_SHAPES = binary_shapes()
RTOL, ATOL = 1e-5, 1e-6

UNARY_SHAPES = [
    pytest.param([0, 4], id="empty"),
    pytest.param([], id="scalar"),
    pytest.param([7, 13], id="primes"),
    pytest.param([257, 131], id="large"),
]

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 6.0, 20.0, -20.0], np.float32)


def coarse(shape, seed):
    """Multiples of 0.5, so comparisons often see equal operands."""
    return (np.round(data(shape, seed) * 2) / 2).astype(np.float32)


def run(tf, mode, fn, *args):
    return run_on_wasm(tf, mode, fn, *args)


def compare(tf, mode, fn, arrays, exact=False, rtol=RTOL, atol=ATOL):
    """Runs ``fn`` on WASM and on the CPU; checks placement, dtype, shape, values."""
    result = run(tf, mode, fn, *[tf.constant(a) for a in arrays])
    with tf.device(CPU):
        expected = fn(*[tf.constant(a) for a in arrays])
    assert on_wasm(result), f"ran on {result.device}"
    assert result.dtype == expected.dtype
    assert tuple(result.shape) == tuple(expected.shape)
    got, want = result.numpy(), expected.numpy()
    if exact or got.dtype != np.float32:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


# ------------------------------------------------------------------ binary

ARITH = {
    "Add": True,
    "AddV2": True,
    "Sub": True,
    "Mul": True,
    "RealDiv": True,
    "DivNoNan": True,
    "Maximum": True,
    "Minimum": True,
    "Pow": False,
    "SquaredDifference": True,
}


@pytest.mark.parametrize("op", sorted(ARITH))
@pytest.mark.parametrize("shape_a,shape_b", BINARY_SHAPES)
def test_arithmetic(tf, mode, op, shape_a, shape_b):
    a, b = coarse(shape_a, 1), coarse(shape_b, 2)
    if op == "Pow":
        a, b = np.abs(a) + np.float32(0.25), data(shape_b, 2, 1.5)
    raw = getattr(tf.raw_ops, op)
    compare(tf, mode, lambda x, y: raw(x=x, y=y), [a, b], exact=ARITH[op])


@pytest.mark.parametrize("op", sorted(ARITH))
def test_arithmetic_special_values(tf, op):
    a = np.repeat(SPECIAL, SPECIAL.size)
    b = np.tile(SPECIAL, SPECIAL.size)
    raw = getattr(tf.raw_ops, op)
    compare(tf, "eager", lambda x, y: raw(x=x, y=y), [a, b], exact=ARITH[op])


def test_incompatible_shapes_are_invalid_argument(tf):
    with tf.device(WASM):
        with pytest.raises(tf.errors.InvalidArgumentError, match="Sub"):
            tf.raw_ops.Sub(x=tf.ones([2, 3]), y=tf.ones([4]))


COMPARISONS = ["Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual"]


@pytest.mark.parametrize("op", COMPARISONS)
@pytest.mark.parametrize("shape_a,shape_b", BINARY_SHAPES)
def test_comparison(tf, mode, op, shape_a, shape_b):
    a, b = coarse(shape_a, 3), coarse(shape_b, 4)
    if a.size:
        a.reshape(-1)[::7] = np.nan
    raw = getattr(tf.raw_ops, op)
    got = compare(tf, mode, lambda x, y: raw(x=x, y=y), [a, b])
    assert got.dtype == np.bool_


@pytest.mark.parametrize("op", ["Equal", "NotEqual"])
def test_int64_equality_runs_on_wasm(tf, mode, op):
    a = np.array([[3, 1 << 40, -5], [7, 0, 2]], np.int64)
    b = np.array([3, 1 << 40, 5], np.int64)
    raw = getattr(tf.raw_ops, op)
    compare(tf, mode, lambda x, y: raw(x=x, y=y), [a, b])


@pytest.mark.parametrize("op,expected", [("Equal", False), ("NotEqual", True)])
def test_incompatible_shape_error_attribute(tf, op, expected):
    raw = getattr(tf.raw_ops, op)
    with tf.device(WASM):
        result = raw(x=tf.ones([2]), y=tf.ones([3]), incompatible_shape_error=False)
        assert on_wasm(result)
        assert result.shape == () and bool(result.numpy()) is expected
        with pytest.raises(tf.errors.InvalidArgumentError):
            raw(x=tf.ones([2]), y=tf.ones([3]), incompatible_shape_error=True)


@pytest.mark.parametrize("op", ["LogicalAnd", "LogicalOr"])
@pytest.mark.parametrize("shape_a,shape_b", BINARY_SHAPES)
def test_logical(tf, mode, op, shape_a, shape_b):
    a, b = data(shape_a, 5) > 0, data(shape_b, 6) > 0
    raw = getattr(tf.raw_ops, op)
    compare(tf, mode, lambda x, y: raw(x=x, y=y), [a, b])


def test_logical_not(tf, mode):
    compare(tf, mode, lambda x: tf.raw_ops.LogicalNot(x=x), [data([7, 13], 7) > 0])


@pytest.mark.parametrize(
    "shapes",
    [
        ([], [], []),
        ([7, 13], [7, 13], [7, 13]),
        ([7, 1], [1, 13], []),
        ([3, 1, 5], [4, 1], [1, 4, 5]),
        ([0, 3], [1, 3], []),
        ([301, 1], [301, 257], [257]),
    ],
    ids=["scalars", "same", "three-way", "3d", "empty", "large"],
)
def test_select_v2(tf, mode, shapes):
    c, t, e = data(shapes[0], 8) > 0.5, data(shapes[1], 9), data(shapes[2], 10)
    compare(tf, mode, lambda c, t, e: tf.raw_ops.SelectV2(condition=c, t=t, e=e), [c, t, e], exact=True)


def test_select_v2_incompatible(tf):
    with tf.device(WASM):
        with pytest.raises(tf.errors.InvalidArgumentError, match="broadcastable"):
            tf.raw_ops.SelectV2(condition=tf.ones([2, 3], tf.bool), t=tf.ones([4]), e=tf.constant(1.0))


@pytest.mark.parametrize(
    "c_shape,shape",
    [
        ([7, 13], [7, 13]),
        ([0, 3], [0, 3]),
        ([1, 1], [1, 1]),
        ([7], [7]),
        ([7], [7, 13]),
        ([3], [3, 5, 2]),
        ([0], [0, 4]),
        ([2], [2, 0]),
        ([301], [301, 257]),
        ([], [7, 13]),
        ([], []),
    ],
    ids=["same", "same-empty", "1x1", "vectors", "rows", "rows-3d", "rows-empty", "rows-of-nothing", "rows-large", "scalar", "scalars"],
)
def test_select_v1(tf, mode, c_shape, shape):
    c, t, e = data(c_shape, 22) > 0.3, data(shape, 23), data(shape, 24)
    compare(tf, mode, lambda c, t, e: tf.raw_ops.Select(condition=c, x=t, y=e), [c, t, e], exact=True)


@pytest.mark.parametrize(
    "c_shape,t_shape,e_shape",
    [
        ([3], [2, 3], [2, 3]),  # one condition per row, wrong count
        ([2], [2, 3], [1, 3]),  # then and else differ
        ([], [2, 3], [3]),
        ([1], [], []),  # a vector condition for a scalar
        ([2, 1], [2, 3], [2, 3]),  # no broadcasting
        ([2], [3], [3]),
    ],
)
def test_select_v1_rejects_what_the_cpu_rejects(tf, c_shape, t_shape, e_shape):
    args = dict(condition=np.ones(c_shape, np.bool_), x=np.ones(t_shape, np.float32), y=np.ones(e_shape, np.float32))
    for device in (CPU, WASM):
        with tf.device(device), pytest.raises(tf.errors.InvalidArgumentError):
            tf.raw_ops.Select(**args)


def loss_and_gradient(tf, loss, device):
    """A tf.function of ``(x, labels)`` → ``(Σ loss·w, d/dx)`` for fixed
    weights ``w`` of both signs, pinned to ``device``."""

    @tf.function
    def run(x, labels):
        weights = tf.constant(np.linspace(-1.0, 1.0, x.shape.num_elements(), dtype=np.float32).reshape(x.shape))
        with tf.device(device):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(loss(x, labels) * weights)
            return y, tape.gradient(y, x)

    return run


def test_sigmoid_cross_entropy_and_its_gradient_run_select_on_wasm(tf):
    # Keras' binary_crossentropy: tf.nn.sigmoid_cross_entropy_with_logits,
    # whose forward and gradient are written with Select (v1 tf.where).
    x = np.concatenate([data([301, 17], 25).ravel() * 5, [0.0, -0.0, 30.0, -30.0]]).astype(np.float32)
    labels = (data(x.shape, 26) > 0).astype(np.float32)
    loss = lambda v, z: tf.nn.sigmoid_cross_entropy_with_logits(labels=z, logits=v)  # noqa: E731
    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        (got_y, got_dx), ran = ops_on_wasm(tf, loss_and_gradient(tf, loss, WASM), tf.constant(x), tf.constant(labels))
    finally:
        tf.config.set_soft_device_placement(soft)
    want_y, want_dx = loss_and_gradient(tf, loss, CPU)(tf.constant(x), tf.constant(labels))
    assert "Select" in ran, sorted(ran)
    np.testing.assert_allclose(got_y.numpy(), want_y.numpy(), rtol=1e-5)
    np.testing.assert_allclose(got_dx.numpy(), want_dx.numpy(), rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------- unary

# op → (input transform, exact)
UNARY = {
    "Neg": (None, True),
    "Abs": (None, True),
    "Exp": (None, False),
    "Log": (np.abs, False),
    "Log1p": (lambda x: np.abs(x) - np.float32(0.5), False),
    "Sqrt": (np.abs, True),
    "Rsqrt": (np.abs, False),
    "Square": (None, True),
    "Reciprocal": (None, False),
    "Inv": (None, False),
    "Tanh": (None, False),
    "Sigmoid": (None, False),
    "Relu": (None, True),
    "Relu6": (lambda x: x * np.float32(3), True),
    "Elu": (None, False),
    "Selu": (None, False),
    "Softplus": (lambda x: x * np.float32(6), False),
    "Softsign": (None, True),
    "Erf": (None, False),
    "Erfc": (None, False),
    "Sign": (None, True),
    "Floor": (None, True),
    "Ceil": (None, True),
    "Round": (lambda x: np.round(x * 2) / 2, True),
    "ZerosLike": (None, True),
    "OnesLike": (None, True),
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_unary(tf, mode, op, shape):
    transform, exact = UNARY[op]
    x = data(shape, 11)
    if transform is not None:
        x = transform(x).astype(np.float32)
    raw = getattr(tf.raw_ops, op)
    compare(tf, mode, lambda v: raw(x=v) if op not in ("Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign") else raw(features=v), [x], exact=exact)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_special_values(tf, op):
    _, exact = UNARY[op]
    raw = getattr(tf.raw_ops, op)
    fn = (lambda v: raw(features=v)) if op in ("Relu", "Relu6", "Elu", "Selu", "Softplus", "Softsign") else (lambda v: raw(x=v))
    got = compare(tf, "eager", fn, [SPECIAL], exact=exact)
    if op in ("Relu", "Relu6"):
        # -0 stays -0, as in TensorFlow.
        assert np.signbit(got[4])


def test_erfc_keeps_relative_precision_in_the_tail(tf, mode):
    # Exact GELU needs erfc where 1 - erf(x) cancels to 0 (from x ≈ 3.9 on).
    # Up to 9.1: below ~9.2 the results are normal floats on both devices.
    x = np.concatenate([np.linspace(-9.1, 9.1, 40_001, dtype=np.float32), np.float32([0.5, -0.5, 0.49999997, -0.49999997])])
    got = compare(tf, mode, lambda v: tf.math.erfc(v), [x], rtol=1e-5, atol=0.0)
    want = np.array([math.erfc(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0.0)
    assert got[np.argmin(np.abs(x - 9.0))] > 1e-37


def test_exact_gelu_fuses_and_matches_cpu(tf):
    # Keras' default gelu (approximate=False) is 0.5·x·erfc(-x/√2): one
    # fused node on WASM. With its gradient, erfc's output feeds both, so
    # it stays a node of its own (the pass copies no shared node) and the
    # rest fuses around it.
    x = np.concatenate([data([301, 17], 27).ravel(), [0.0, -0.0, 12.0, -12.0, 4.5, -4.5]]).astype(np.float32)
    gelu = lambda v, _: tf.nn.gelu(v, approximate=False)  # noqa: E731

    @tf.function
    def forward(v):
        with tf.device(WASM):
            return tf.nn.gelu(v, approximate=False)

    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        got, ran_forward = ops_on_wasm(tf, forward, tf.constant(x))
        (got_y, got_dx), ran = ops_on_wasm(tf, loss_and_gradient(tf, gelu, WASM), tf.constant(x), tf.constant(x))
    finally:
        tf.config.set_soft_device_placement(soft)
    assert "_TfwasmFusedElementwise" in ran_forward and "Erfc" not in ran_forward, sorted(ran_forward)
    assert "_TfwasmFusedElementwise" in ran, sorted(ran)
    with tf.device(CPU):
        expected = tf.nn.gelu(tf.constant(x), approximate=False)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=RTOL, atol=ATOL)
    want_y, want_dx = loss_and_gradient(tf, gelu, CPU)(tf.constant(x), tf.constant(x))
    np.testing.assert_allclose(got_y.numpy(), want_y.numpy(), rtol=1e-5)
    np.testing.assert_allclose(got_dx.numpy(), want_dx.numpy(), rtol=RTOL, atol=ATOL)


# op → (inputs that take the short path, the inputs that do not, NumPy's op)
BLOCK_EDGE_CASES = {
    "Log": (lambda x: np.abs(x) + np.float32(1e-3), [0.0, -0.0, -3.0, np.inf, -np.inf, np.nan], np.log),
    "Exp": (lambda x: x * np.float32(40), [100.0, -100.0, 88.8, np.inf, -np.inf, np.nan], np.exp),
}


@pytest.mark.parametrize("op", sorted(BLOCK_EDGE_CASES))
def test_special_values_at_block_edges(tf, mode, op):
    # Log and Exp compute blocks of 256 inputs that need no special case by
    # a shorter path; put each input that does at both ends of a block, in a
    # tensor large enough for the compute pool.
    # (Subnormals are left out: TensorFlow runs kernels with subnormals
    # flushed to zero, and in that mode neither device's Log of one is exact
    # nor do they agree; see docs/kernels.md. The unit tests cover them.)
    transform, specials, numpy_op = BLOCK_EDGE_CASES[op]
    x = transform(data([256 * 211 + 37], 21))
    for i, special in enumerate(specials):
        x[(5 + 2 * i) * 256] = special
        x[(6 + 2 * i) * 256 - 1] = special
    x[-1] = specials[0]
    raw = getattr(tf.raw_ops, op)
    got = compare(tf, mode, lambda v: raw(x=v), [x], exact=False)
    with np.errstate(all="ignore"):
        want = numpy_op(x)
    # Both devices flush results below the smallest normal float to zero.
    want = np.where(np.abs(want) < np.finfo(np.float32).tiny, np.float32(0), want)
    for i in range(len(specials)):
        for at in ((5 + 2 * i) * 256, (6 + 2 * i) * 256 - 1):
            assert np.array_equal(got[at], want[at], equal_nan=True), f"{op}({x[at]}) = {got[at]}, want {want[at]}"


@pytest.mark.parametrize("alpha", [0.2, 0.01, 1.5])
def test_leaky_relu(tf, mode, alpha):
    x = np.concatenate([data([300, 131], 12).ravel(), SPECIAL])
    compare(tf, mode, lambda v: tf.raw_ops.LeakyRelu(features=v, alpha=alpha), [x], exact=True)
    g = data(x.shape, 13)
    compare(tf, mode, lambda a, b: tf.raw_ops.LeakyReluGrad(gradients=a, features=b, alpha=alpha), [g, x], exact=True)


@pytest.mark.parametrize("op", ["IsNan", "IsFinite"])
def test_predicates(tf, mode, op):
    x = np.concatenate([data([50], 14), SPECIAL])
    raw = getattr(tf.raw_ops, op)
    compare(tf, mode, lambda v: raw(x=v), [x])


# activation gradients: op → (argument names, transform of the second input, exact)
GRADS = {
    "ReluGrad": (("gradients", "features"), None, True),
    "Relu6Grad": (("gradients", "features"), lambda x: x * np.float32(3), True),
    "EluGrad": (("gradients", "outputs"), None, True),
    "SeluGrad": (("gradients", "outputs"), None, True),
    "SoftplusGrad": (("gradients", "features"), None, False),
    "SoftsignGrad": (("gradients", "features"), None, True),
    # dy·y·(1−y) and dy·(1−y²): Eigen's vectorised path may contract these
    # into FMAs, so large tensors differ from ours by an ulp here and there.
    "TanhGrad": (("y", "dy"), None, False),
    "SigmoidGrad": (("y", "dy"), None, False),
    "RsqrtGrad": (("y", "dy"), None, False),
    "SqrtGrad": (("y", "dy"), None, False),
    "ReciprocalGrad": (("y", "dy"), None, False),
    "InvGrad": (("y", "dy"), None, False),
}


@pytest.mark.parametrize("op", sorted(GRADS))
@pytest.mark.parametrize("shape", UNARY_SHAPES)
def test_gradient_ops(tf, mode, op, shape):
    (first, second), transform, exact = GRADS[op]
    a, b = data(shape, 15), data(shape, 16)
    if transform is not None:
        b = transform(b).astype(np.float32)
    if b.size > 3:
        b.reshape(-1)[:3] = [0.0, 6.0, -0.0]
    raw = getattr(tf.raw_ops, op)
    compare(tf, mode, lambda x, y: raw(**{first: x, second: y}), [a, b], exact=exact)


def test_gradient_op_shape_checks(tf):
    with tf.device(WASM):
        with pytest.raises(tf.errors.InvalidArgumentError, match="same size and shape"):
            tf.raw_ops.ReluGrad(gradients=tf.ones([2, 3]), features=tf.ones([6]))
        # The cwise gradients only need equal element counts (as on the CPU).
        result = tf.raw_ops.TanhGrad(y=tf.ones([2, 3]), dy=tf.ones([6]))
        assert on_wasm(result) and result.shape == (2, 3)
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.raw_ops.TanhGrad(y=tf.ones([2, 3]), dy=tf.ones([4]))


# -------------------------------------------------------------------- Cast

CAST_INPUTS = {
    "float32": np.concatenate([data([300, 111], 17).ravel() * 1000, SPECIAL, np.array([3e9, -3e9, 1e20, 2.7, -2.7], np.float32)]),
    "int32": np.array([0, 1, -7, 16_777_217, -(2**31), 2**31 - 1], np.int32),
    "int64": np.array([0, 1, -7, 2**53 + 1, -(2**40) - 3, 2**62], np.int64),
    "bool": np.array([True, False, True, True], np.bool_),
}
CASTS = [("float32", "float32"), ("int32", "float32"), ("int64", "float32"), ("bool", "float32"),
         ("float32", "int32"), ("float32", "int64"), ("float32", "bool")]


@pytest.mark.parametrize("src,dst", CASTS, ids=[f"{s}-{d}" for s, d in CASTS])
def test_cast(tf, mode, src, dst):
    x = CAST_INPUTS[src]
    compare(tf, mode, lambda v: tf.cast(v, getattr(tf, dst)), [x])


# -------------------------------------------------------------- gradients

ACTIVATIONS = {
    "relu": lambda tf: tf.nn.relu,
    "relu6": lambda tf: tf.nn.relu6,
    "elu": lambda tf: tf.nn.elu,
    "selu": lambda tf: tf.nn.selu,
    "softplus": lambda tf: tf.nn.softplus,
    "softsign": lambda tf: tf.nn.softsign,
    "tanh": lambda tf: tf.math.tanh,
    "sigmoid": lambda tf: tf.math.sigmoid,
    "leaky_relu": lambda tf: (lambda x: tf.nn.leaky_relu(x, alpha=0.3)),
    "sqrt": lambda tf: (lambda x: tf.math.sqrt(tf.math.abs(x) + 0.1)),
    "rsqrt": lambda tf: (lambda x: tf.math.rsqrt(tf.math.abs(x) + 0.1)),
    "reciprocal": lambda tf: (lambda x: tf.math.reciprocal(x + 10.0)),
    "square": lambda tf: tf.math.square,
    "exp": lambda tf: tf.math.exp,
    "maximum": lambda tf: (lambda x: tf.maximum(x, 0.5)),
    "where": lambda tf: (lambda x: tf.where(x > 0, x * 2.0, x * x)),
}


def gradient(tf, fn, x):
    v = tf.Variable(x)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(fn(v) * tf.constant(np.linspace(-1, 1, x.size, dtype=np.float32).reshape(x.shape)))
    return tape.gradient(y, v)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_gradients_match_cpu(tf, name):
    fn = ACTIVATIONS[name](tf)
    x = data([37, 19], 18)
    with tf.device(WASM):
        got = gradient(tf, fn, x)
    with tf.device(CPU):
        want = gradient(tf, fn, x)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "sqdiff"])
def test_broadcast_binary_gradients_match_cpu(tf, op):
    fn = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / (b * b + 1.0),
        "pow": lambda a, b: tf.pow(tf.abs(a) + 0.5, b),
        "sqdiff": lambda a, b: tf.math.squared_difference(a, b),
    }[op]
    a, b = data([13, 7], 19), data([7], 20)

    def grads():
        va, vb = tf.Variable(a), tf.Variable(b)
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(fn(va, vb))
        return [g.numpy() for g in tape.gradient(y, [va, vb])]

    with tf.device(WASM):
        got = grads()
    with tf.device(CPU):
        want = grads()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
