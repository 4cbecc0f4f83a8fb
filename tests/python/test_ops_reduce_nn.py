"""Reductions, the matmul family and the softmax losses on WASM against TensorFlow's CPU device.

Tolerances: reductions rtol 1e-5 (Prod 1e-4: a different product order),
matmul-like ops rtol 1e-5 with an atol scaled by the inner dimension,
softmax and the losses rtol 1e-5 / atol 1e-6, gradients rtol 1e-4 / atol 1e-5.
ArgMax/ArgMin, BiasAdd and All/Any must match exactly.
"""

import numpy as np
import pytest

from tfwasm_support import WASM, on_wasm, run_on_wasm
from tfwasm_support import random_data as data



def run(tf, mode, fn, *args):
    return run_on_wasm(tf, mode, fn, *args)


def on_cpu(tf, fn, *args):
    with tf.device("/CPU:0"):
        return fn(*args)


def assert_same(result, expected, rtol=1e-5, atol=1e-6):
    assert tuple(result.shape) == tuple(expected.shape)
    assert result.dtype == expected.dtype
    np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=rtol, atol=atol)


# ------------------------------------------------------------- reductions

REDUCE_CASES = [
    pytest.param([], [], id="scalar"),
    pytest.param([7], [0], id="vector"),
    pytest.param([7, 13], [1], id="rows"),
    pytest.param([7, 13], [0], id="cols"),
    pytest.param([7, 13], [-1, -2], id="all-negative"),
    pytest.param([7, 13], [], id="no-axes"),
    pytest.param([3, 1, 5], [1], id="size-1-axis"),
    pytest.param([3, 4, 5], [0, 2], id="outer-and-inner"),
    pytest.param([2, 3, 4, 5], [1, 3], id="interleaved"),
    pytest.param([0, 3], [0], id="empty-reduced"),
    pytest.param([0, 3], [1], id="empty-kept"),
    pytest.param([3, 0, 2], [1], id="empty-middle"),
    pytest.param([257, 131], [0], id="large-cols"),
    pytest.param([131, 257], [1], id="large-rows"),
    pytest.param([200000], [0], id="long-vector"),
    pytest.param([32, 28, 28, 3], [0, 1, 2], id="bias-grad-like"),
]

REDUCE_OPS = {
    "sum": "reduce_sum",
    "mean": "reduce_mean",
    "max": "reduce_max",
    "min": "reduce_min",
    "prod": "reduce_prod",
}


@pytest.mark.parametrize("keepdims", [False, True], ids=["drop", "keep"])
@pytest.mark.parametrize("shape,axes", REDUCE_CASES)
@pytest.mark.parametrize("op", list(REDUCE_OPS))
def test_reduction(tf, mode, op, shape, axes, keepdims):
    scale = 0.05 if op == "prod" else 3.0
    x = data(shape, 1, scale)
    if op == "prod":
        x = x + np.float32(1)
    fn = getattr(tf.math, REDUCE_OPS[op])
    axis_dtype = tf.int64 if len(axes) % 2 else tf.int32

    def reduce(t):
        return fn(t, axis=tf.constant(axes, axis_dtype), keepdims=keepdims)

    result = run(tf, mode, reduce, tf.constant(x))
    expected = on_cpu(tf, reduce, tf.constant(x))
    assert on_wasm(result), f"{op} ran on {result.device}"
    rtol = 1e-4 if op == "prod" else 1e-5
    # Sums cancel: scale the absolute tolerance by the summed magnitudes.
    atol = 1e-5 * max(1.0, float(np.abs(x).sum())) * 1e-2 if op in ("sum", "mean") else 1e-6
    assert_same(result, expected, rtol=rtol, atol=atol)


def test_reductions_over_nothing_give_the_identity(tf):
    x = tf.zeros([0, 3])
    expected = {"sum": 0.0, "mean": np.nan, "max": -np.inf, "min": np.inf, "prod": 1.0}
    for op, want in expected.items():
        result = getattr(tf.math, REDUCE_OPS[op])(x, axis=0)
        assert on_wasm(result)
        np.testing.assert_array_equal(result.numpy(), np.full([3], want, np.float32), err_msg=op)


def test_max_and_min_propagate_nan(tf):
    x = np.array([[np.nan, 1, 2], [3, np.nan, -1], [1, 2, 3]], np.float32)
    for fn in (tf.math.reduce_max, tf.math.reduce_min):
        for axis in (0, 1, None):
            result = fn(tf.constant(x), axis=axis)
            expected = on_cpu(tf, fn, tf.constant(x), axis)
            assert on_wasm(result)
            np.testing.assert_array_equal(result.numpy(), expected.numpy())


@pytest.mark.parametrize("shape,axes", [([7, 13], [1]), ([7, 13], [0]), ([0, 4], [0]), ([2, 3, 4], [0, 2]), ([5], [])])
@pytest.mark.parametrize("op", ["all", "any"])
def test_bool_reduction(tf, mode, op, shape, axes):
    rng = np.random.default_rng(3)
    x = rng.random(shape) > (0.2 if op == "all" else 0.8)
    fn = {"all": tf.math.reduce_all, "any": tf.math.reduce_any}[op]

    def reduce(t):
        return fn(t, axis=axes)

    result = run(tf, mode, reduce, tf.constant(x))
    expected = on_cpu(tf, reduce, tf.constant(x))
    assert on_wasm(result)
    np.testing.assert_array_equal(result.numpy(), expected.numpy())


def test_reduction_errors_match_tensorflow(tf):
    with pytest.raises(tf.errors.InvalidArgumentError, match="duplicate dimension: 1"):
        with tf.device(WASM):
            tf.raw_ops.Sum(input=tf.ones([2, 3]), axis=[1, -1])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Invalid reduction dimension \(2 for input with 2"):
        with tf.device(WASM):
            tf.raw_ops.Max(input=tf.ones([2, 3]), axis=[2])


# --------------------------------------------------------- ArgMax / ArgMin


@pytest.mark.parametrize("output_type", ["int32", "int64"])
@pytest.mark.parametrize("shape,axis", [([7], 0), ([7, 13], 1), ([7, 13], 0), ([3, 4, 5], -2), ([1, 1], 1), ([0, 3], 1), ([300, 200], 0)])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduction(tf, mode, op, shape, axis, output_type):
    x = np.round(data(shape, 4))  # coarse values: ties pick the first index
    fn = {"argmax": tf.math.argmax, "argmin": tf.math.argmin}[op]
    dtype = getattr(tf, output_type)

    def reduce(t):
        return fn(t, axis=axis, output_type=dtype)

    result = run(tf, mode, reduce, tf.constant(x))
    expected = on_cpu(tf, reduce, tf.constant(x))
    assert on_wasm(result)
    assert result.dtype == dtype
    np.testing.assert_array_equal(result.numpy(), expected.numpy())


def test_arg_reduction_nan_and_errors(tf):
    x = np.array([[np.nan, 1, 2], [3, np.nan, -1], [1, 3, 3], [np.nan, np.nan, np.nan]], np.float32)
    for fn in (tf.math.argmax, tf.math.argmin):
        for axis in (0, 1):
            result = fn(tf.constant(x), axis=axis)
            assert on_wasm(result)
            np.testing.assert_array_equal(result.numpy(), on_cpu(tf, fn, tf.constant(x), axis).numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Reduction axis 0 is empty in shape \[0,3\]"):
        with tf.device(WASM):
            tf.math.argmax(tf.zeros([0, 3]), axis=0)


# ----------------------------------------------------------- BatchMatMulV2

BATCH_MATMUL_SHAPES = [
    pytest.param([1, 1], [1, 1], id="1x1"),
    pytest.param([2, 3, 4], [2, 4, 5], id="batched"),
    pytest.param([2, 3, 4], [4, 5], id="broadcast-y"),
    pytest.param([3, 4], [2, 4, 5], id="broadcast-x"),
    pytest.param([2, 1, 3, 4], [1, 3, 4, 5], id="broadcast-both"),
    pytest.param([0, 3, 4], [4, 5], id="empty-batch"),
    pytest.param([2, 3, 0], [2, 0, 5], id="empty-inner"),
    pytest.param([64, 17, 13], [64, 13, 11], id="many-small"),
    pytest.param([3, 70, 90], [90, 80], id="few-large"),
]


@pytest.mark.parametrize("adj_y", [False, True], ids=["y", "yT"])
@pytest.mark.parametrize("adj_x", [False, True], ids=["x", "xT"])
@pytest.mark.parametrize("shape_x,shape_y", BATCH_MATMUL_SHAPES)
def test_batch_matmul(tf, mode, shape_x, shape_y, adj_x, adj_y):
    def stored(shape, adj):
        shape = list(shape)
        if adj:
            shape[-1], shape[-2] = shape[-2], shape[-1]
        return shape

    x, y = data(stored(shape_x, adj_x), 10), data(stored(shape_y, adj_y), 11)

    def matmul(a, b):
        return tf.raw_ops.BatchMatMulV2(x=a, y=b, adj_x=adj_x, adj_y=adj_y)

    result = run(tf, mode, matmul, tf.constant(x), tf.constant(y))
    expected = on_cpu(tf, matmul, tf.constant(x), tf.constant(y))
    assert on_wasm(result)
    k = shape_x[-1]
    assert_same(result, expected, rtol=1e-5, atol=1e-5 * 9 * max(k, 1))


# Large enough for BLIS (kernels/sgemm.rs: at least 256·256·1024
# multiply-adds, both output sides at least 256) on a CPU with AVX2 and FMA,
# with sides that end off BLIS's and gemm's register tiles; the wide one
# splits by columns. Compared with NumPy in float64, and with the CPU.
LARGE_PRODUCTS = [
    pytest.param(300, 1031, 269, id="tall"),
    pytest.param(260, 1009, 1283, id="wide"),
]


@pytest.mark.parametrize("transpose_b", [False, True], ids=["b", "bT"])
@pytest.mark.parametrize("transpose_a", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("m,k,n", LARGE_PRODUCTS)
def test_large_matmul_matches_numpy_and_the_cpu(tf, mode, m, k, n, transpose_a, transpose_b):
    a = data([k, m] if transpose_a else [m, k], 12)
    b = data([n, k] if transpose_b else [k, n], 13)

    def matmul(x, y):
        return tf.linalg.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)

    result = run(tf, mode, matmul, tf.constant(a), tf.constant(b))
    assert on_wasm(result)
    lhs = a.T if transpose_a else a
    rhs = b.T if transpose_b else b
    exact = lhs.astype(np.float64) @ rhs.astype(np.float64)
    atol = 1e-5 * 9 * k
    np.testing.assert_allclose(result.numpy(), exact, rtol=1e-5, atol=atol)
    assert_same(result, on_cpu(tf, matmul, tf.constant(a), tf.constant(b)), rtol=1e-5, atol=atol)


def test_batch_matmul_errors(tf):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"compatible batch dimensions: \[2,3,4\] vs. \[3,4,5\]"):
        with tf.device(WASM):
            tf.raw_ops.BatchMatMulV2(x=tf.zeros([2, 3, 4]), y=tf.ones([3, 4, 5]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Matrix size-incompatible"):
        with tf.device(WASM):
            tf.raw_ops.BatchMatMulV2(x=tf.zeros([2, 3, 4]), y=tf.ones([2, 3, 5]))


# ------------------------------------------------------ BiasAdd(Grad)

BIAS_SHAPES = [[1, 1], [7, 13], [2, 3, 5], [2, 3, 4, 5], [0, 3], [300, 3, 70], [9000, 7]]


@pytest.mark.parametrize("data_format", ["NHWC", "NCHW"])
@pytest.mark.parametrize("shape", BIAS_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bias_add_and_grad(tf, mode, shape, data_format):
    if mode == "function" and data_format == "NCHW" and len(shape) < 3:
        pytest.skip("BiasAdd's shape function wants rank >= 3 for NCHW in graphs (eager accepts rank 2)")
    channels = shape[1] if data_format == "NCHW" else shape[-1]
    x, b = data(shape, 12), data([channels], 13)

    def bias_add(t, bias):
        return tf.raw_ops.BiasAdd(value=t, bias=bias, data_format=data_format)

    def bias_grad(t):
        return tf.raw_ops.BiasAddGrad(out_backprop=t, data_format=data_format)

    result = run(tf, mode, bias_add, tf.constant(x), tf.constant(b))
    expected = on_cpu(tf, bias_add, tf.constant(x), tf.constant(b))
    assert on_wasm(result)
    np.testing.assert_array_equal(result.numpy(), expected.numpy())

    grad = run(tf, mode, bias_grad, tf.constant(x))
    expected = on_cpu(tf, bias_grad, tf.constant(x))
    assert on_wasm(grad)
    assert_same(grad, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(x).sum()) / max(channels, 1)) * 1e-2)


def test_bias_add_errors(tf):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Must provide as many biases .*\[4\] vs. \[2,3\]"):
        with tf.device(WASM):
            tf.raw_ops.BiasAdd(value=tf.zeros([2, 3]), bias=tf.ones([4]))


# ------------------------------------------------------- softmax and losses


@pytest.mark.parametrize("shape", [[1], [7], [3, 10], [2, 3, 17], [0, 5], [4, 1], [1000, 37]], ids=str)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(tf, mode, op, shape):
    x = data(shape, 14, 10.0)
    fn = {"softmax": tf.nn.softmax, "log_softmax": tf.nn.log_softmax}[op]
    result = run(tf, mode, fn, tf.constant(x))
    expected = on_cpu(tf, fn, tf.constant(x))
    assert on_wasm(result)
    assert_same(result, expected, rtol=1e-5, atol=1e-6)


def test_softmax_of_extreme_rows(tf):
    x = np.array([[np.nan, 1], [np.inf, 1], [-np.inf, -np.inf], [1000, -1000], [88, -88]], np.float32)
    for fn in (tf.nn.softmax, tf.nn.log_softmax):
        result = fn(tf.constant(x))
        assert on_wasm(result)
        np.testing.assert_allclose(result.numpy(), on_cpu(tf, fn, tf.constant(x)).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "logits_shape,labels_shape",
    [([3, 5], [3, 5]), ([1, 1], [1, 1]), ([3, 5], [5]), ([1, 5], [3, 5]), ([0, 4], [0, 4]), ([2000, 17], [2000, 17])],
    ids=str,
)
def test_softmax_cross_entropy(tf, mode, logits_shape, labels_shape):
    x = data(logits_shape, 15)
    y = np.random.default_rng(16).random(labels_shape).astype(np.float32)

    def xent(a, b):
        return tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=a, labels=b)

    loss, backprop = run(tf, mode, xent, tf.constant(x), tf.constant(y))
    want_loss, want_backprop = on_cpu(tf, xent, tf.constant(x), tf.constant(y))
    assert on_wasm(loss) and on_wasm(backprop)
    assert_same(loss, want_loss, rtol=1e-5, atol=1e-5)
    assert_same(backprop, want_backprop, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("label_dtype", ["int32", "int64"])
@pytest.mark.parametrize("batch,classes", [(1, 1), (3, 5), (0, 4), (2000, 17), (7, 1000)])
def test_sparse_softmax_cross_entropy(tf, mode, batch, classes, label_dtype):
    x = data([batch, classes], 17)
    labels = np.random.default_rng(18).integers(0, classes, [batch]).astype(label_dtype)

    def xent(a, b):
        return tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=a, labels=b)

    loss, backprop = run(tf, mode, xent, tf.constant(x), tf.constant(labels))
    want_loss, want_backprop = on_cpu(tf, xent, tf.constant(x), tf.constant(labels))
    assert on_wasm(loss) and on_wasm(backprop)
    assert_same(loss, want_loss, rtol=1e-5, atol=1e-5)
    assert_same(backprop, want_backprop, rtol=1e-5, atol=1e-6)


def test_sparse_softmax_cross_entropy_rejects_bad_labels(tf):
    message = r"Received a label value of 5 which is outside the valid range of \[0, 4\)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        with tf.device(WASM):
            tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=tf.zeros([3, 4]), labels=tf.constant([1, 5, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"label value of -1 "):
        with tf.device(WASM):
            tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
                features=tf.zeros([3, 4]), labels=tf.constant([1, 2, -1], tf.int64)
            )


def test_keras_losses_match_cpu(tf):
    keras = pytest.importorskip("keras")
    logits = data([16, 10], 19)
    labels = np.random.default_rng(20).integers(0, 10, [16]).astype(np.int64)
    onehot = np.eye(10, dtype=np.float32)[labels]
    losses = [
        (keras.losses.SparseCategoricalCrossentropy(from_logits=True), labels, logits),
        (keras.losses.SparseCategoricalCrossentropy(), labels, tf.nn.softmax(logits).numpy()),
        (keras.losses.CategoricalCrossentropy(from_logits=True), onehot, logits),
        (keras.losses.CategoricalCrossentropy(), onehot, tf.nn.softmax(logits).numpy()),
    ]
    for loss_fn, y, p in losses:
        with tf.device(WASM):
            result = loss_fn(tf.constant(y), tf.constant(p))
        expected = on_cpu(tf, loss_fn, tf.constant(y), tf.constant(p))
        np.testing.assert_allclose(result.numpy(), expected.numpy(), rtol=1e-5)


# --------------------------------------------------------------- gradients


def gradient_pairs(tf):
    """(name, fn of one or two float tensors, input shapes) Keras training goes through."""
    labels = tf.constant(np.random.default_rng(21).integers(0, 7, [5]).astype(np.int64))
    dense = tf.constant(np.random.default_rng(22).random([5, 7]).astype(np.float32))
    return [
        ("sum", lambda x: tf.reduce_sum(x * x, axis=1), [[5, 7]]),
        ("mean", lambda x: tf.reduce_mean(x * x), [[5, 7]]),
        ("max", lambda x: tf.reduce_max(x, axis=0), [[5, 7]]),
        ("softmax", lambda x: tf.nn.softmax(x) * tf.range(7, dtype=tf.float32), [[5, 7]]),
        ("log_softmax", lambda x: tf.nn.log_softmax(x) * tf.range(7, dtype=tf.float32), [[5, 7]]),
        ("sparse_xent", lambda x: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x), [[5, 7]]),
        ("xent", lambda x: tf.nn.softmax_cross_entropy_with_logits(labels=dense, logits=x), [[5, 7]]),
        ("batch_matmul", lambda x, y: tf.linalg.matmul(x, y), [[3, 4, 5], [3, 5, 2]]),
        ("batch_matmul_broadcast", lambda x, y: tf.linalg.matmul(x, y), [[3, 4, 5], [5, 2]]),
        ("bias_add", lambda x, b: tf.nn.bias_add(x, b) ** 2, [[4, 3, 3, 6], [6]]),
    ]


@pytest.mark.parametrize("index", range(10))
def test_gradients_match_cpu(tf, index):
    name, fn, shapes = gradient_pairs(tf)[index]
    inputs = [data(shape, 30 + i, 1.0) for i, shape in enumerate(shapes)]

    def grads(device):
        with tf.device(device):
            xs = [tf.constant(v) for v in inputs]
            with tf.GradientTape() as tape:
                for x in xs:
                    tape.watch(x)
                y = fn(*xs)
            return y, tape.gradient(y, xs)

    y, got = grads(WASM)
    want_y, want = grads("/CPU:0")
    assert on_wasm(y), f"{name} forward ran on {y.device}"
    np.testing.assert_allclose(y.numpy(), want_y.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
