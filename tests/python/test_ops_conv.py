"""Conv2D, Conv3D and DepthwiseConv2dNative (+ backprops), 2-D and 3-D
pooling (+ gradients) and FusedBatchNormV3 (+ gradient) on WASM vs TF's CPU.

Every op runs eagerly and inside a tf.function pinned to the WASM device
(soft placement off, so a missing kernel fails instead of falling back to the
CPU), and is compared with the same op on ``/CPU:0``.

Tolerances: convolutions and batch norm rtol=1e-4 with atol=1e-4 × the largest
expected magnitude (sums in a different order); pooling rtol=1e-5 (max pooling
and its gradient routing are exact; 3-D pooling is compared exactly).
"""

import numpy as np
import pytest

from tfwasm_support import WASM, on_wasm, run_on_wasm
from tfwasm_support import random_data as data

CPU = "/CPU:0"


def run(tf, mode, fn, *args):
    """``fn(*args)`` on the WASM device, eagerly or as a pinned tf.function."""
    return run_on_wasm(tf, mode, fn, *args, scope_eager=True)


def on_cpu(tf, fn, *args):
    with tf.device(CPU):
        return fn(*args)


def close(got, expected, rtol=1e-4, what=""):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, what
    atol = rtol * max(1.0, float(np.max(np.abs(expected)))) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=what)


def with_grads(tf, op):
    """``f(x, w, dy)`` → (op(x, w), d/dx, d/dw) of sum(op(x, w) * dy).

    ``dy`` enters as the output gradient, so no other op (Sum, Mul) runs.
    """

    def f(x, w, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = op(x, w)
        dx, dw = tape.gradient(y, [x, w], output_gradients=dy)
        return y, dx, dw

    return f


# ------------------------------------------------------------------ conv

CONV_CASES = [
    # input, filter, strides, padding, dilations
    pytest.param([1, 1, 1, 1], [1, 1, 1, 1], 1, "VALID", 1, id="1x1-single"),
    pytest.param([2, 7, 5, 3], [3, 3, 3, 4], 1, "SAME", 1, id="primes-same"),
    pytest.param([2, 7, 5, 3], [3, 3, 3, 4], 1, "VALID", 1, id="primes-valid"),
    pytest.param([3, 11, 13, 5], [1, 1, 5, 7], 1, "VALID", 1, id="pointwise"),
    pytest.param([3, 11, 13, 5], [1, 1, 5, 7], 2, "SAME", 1, id="pointwise-stride2"),
    pytest.param([2, 9, 8, 1], [2, 2, 1, 3], 1, "SAME", 1, id="even-kernel-same-channels1"),
    pytest.param([2, 9, 8, 2], [4, 2, 2, 3], [2, 3], "SAME", 1, id="even-kernel-stride23"),
    pytest.param([2, 13, 11, 3], [3, 3, 3, 2], 2, "SAME", 1, id="stride2-same"),
    pytest.param([2, 13, 11, 3], [3, 3, 3, 2], 2, "VALID", 1, id="stride2-valid"),
    pytest.param([1, 13, 11, 3], [3, 3, 3, 2], 1, "SAME", 2, id="dilation2-same"),
    pytest.param([1, 13, 11, 3], [3, 2, 3, 2], 1, "VALID", [2, 3], id="dilation23-valid"),
    pytest.param([0, 7, 7, 3], [3, 3, 3, 4], 1, "SAME", 1, id="batch0"),
    pytest.param([2, 5, 5, 2], [5, 5, 2, 3], 1, "VALID", 1, id="full-window"),
    pytest.param([2, 6, 5, 2], [3, 2, 2, 3], [2, 1], [[0, 0], [1, 2], [0, 3], [0, 0]], 1, id="explicit"),
    pytest.param([4, 28, 28, 1], [3, 3, 1, 8], 1, "SAME", 1, id="keras-conv1"),
    pytest.param([4, 14, 14, 8], [3, 3, 8, 16], 1, "VALID", 1, id="keras-conv2"),
]


def dilate(w, dilations):
    """The zero-stuffed filter whose undilated convolution equals the dilated one."""
    dh, dw = (dilations, dilations) if np.isscalar(dilations) else dilations
    kh, kw, ci, co = w.shape
    out = np.zeros([(kh - 1) * dh + 1, (kw - 1) * dw + 1, ci, co], np.float32)
    out[::dh, ::dw] = w
    return out, (dh, dw)


@pytest.mark.parametrize("input_shape,filter_shape,strides,padding,dilations", CONV_CASES)
def test_conv2d_and_gradients(tf, mode, input_shape, filter_shape, strides, padding, dilations):
    x = tf.constant(data(input_shape, 1))
    w_np = data(filter_shape, 2, scale=1.0)
    w = tf.constant(w_np)
    conv = lambda a, b: tf.nn.conv2d(a, b, strides=strides, padding=padding, dilations=dilations)
    y_cpu = on_cpu(tf, conv, x, w)
    dy = tf.constant(data(y_cpu.shape, 3))
    if dilations == 1:
        expected = on_cpu(tf, with_grads(tf, conv), x, w, dy)
    else:
        # TF's CPU backprops refuse dilations > 1; the same convolution with a
        # zero-stuffed filter gives the reference (and its filter gradient
        # at the stuffed positions).
        stuffed, (dh, dw) = dilate(w_np, dilations)
        plain = lambda a, b: tf.nn.conv2d(a, b, strides=strides, padding=padding)
        y, dx, dw_full = on_cpu(tf, with_grads(tf, plain), x, tf.constant(stuffed), dy)
        expected = [y, dx, dw_full[::dh, ::dw]]
    got = run(tf, mode, with_grads(tf, conv), x, w, dy)
    for name, g, e in zip(["conv2d", "d_input", "d_filter"], got, expected):
        if mode == "eager":
            assert on_wasm(g), f"{name} ran on {g.device}"
        close(g.numpy(), np.asarray(e), what=name)


def test_conv2d_backprops_as_raw_ops(tf, mode):
    x = tf.constant(data([2, 9, 7, 3], 4))
    w = tf.constant(data([3, 2, 3, 5], 5, scale=1.0))
    dy = tf.constant(data([2, 5, 7, 5], 6))
    kw = dict(strides=[1, 2, 1, 1], padding="SAME")

    def both(x, w, dy):
        dx = tf.raw_ops.Conv2DBackpropInput(input_sizes=tf.constant([2, 9, 7, 3]), filter=w, out_backprop=dy, **kw)
        dw = tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=tf.constant([3, 2, 3, 5]), out_backprop=dy, **kw)
        return dx, dw

    expected = on_cpu(tf, both, x, w, dy)
    got = run(tf, mode, both, x, w, dy)
    for g, e in zip(got, expected):
        close(g.numpy(), e.numpy())


def test_conv2d_nchw_is_refused_like_cpu(tf):
    x = tf.constant(data([1, 3, 5, 5], 1))
    w = tf.constant(data([3, 3, 3, 4], 2))
    with pytest.raises(tf.errors.UnimplementedError, match="NHWC"):
        with tf.device(WASM):
            tf.nn.conv2d(x, w, 1, "SAME", data_format="NCHW")


def test_conv2d_shape_errors(tf):
    x = tf.constant(data([1, 5, 5, 2], 1))
    w = tf.constant(data([3, 3, 3, 4], 2))
    with pytest.raises(tf.errors.InvalidArgumentError):
        with tf.device(WASM):
            tf.raw_ops.Conv2D(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME")


# ------------------------------------------------------------- depthwise

DEPTHWISE_CASES = [
    # input, filter [kh, kw, channels, multiplier], strides, padding, dilations
    pytest.param([1, 1, 1, 1], [1, 1, 1, 1], 1, "VALID", 1, id="1x1-single"),
    pytest.param([2, 1, 1, 2], [1, 1, 2, 3], 1, "SAME", 1, id="1x1-multiplier3"),
    pytest.param([2, 7, 5, 3], [3, 3, 3, 1], 1, "SAME", 1, id="primes-same"),
    pytest.param([2, 7, 5, 3], [3, 3, 3, 3], 1, "VALID", 1, id="primes-valid-multiplier3"),
    pytest.param([2, 9, 8, 5], [4, 2, 5, 2], 1, "SAME", 1, id="even-kernel"),
    pytest.param([2, 13, 11, 3], [3, 3, 3, 1], 2, "SAME", 1, id="stride2-same"),
    pytest.param([2, 13, 11, 3], [3, 3, 3, 2], 2, "VALID", 1, id="stride2-valid-multiplier2"),
    pytest.param([2, 6, 5, 2], [3, 2, 2, 3], 2, [[0, 0], [1, 2], [0, 3], [0, 0]], 1, id="explicit"),
    pytest.param([1, 13, 11, 3], [3, 3, 3, 2], 1, "SAME", 2, id="dilation2-same"),
    pytest.param([1, 13, 11, 3], [3, 2, 3, 1], 1, "VALID", [2, 3], id="dilation23-valid"),
    pytest.param([0, 7, 7, 3], [3, 3, 3, 1], 1, "SAME", 1, id="batch0"),
    pytest.param([2, 5, 5, 0], [3, 3, 0, 2], 1, "SAME", 1, id="channels0"),
    pytest.param([2, 0, 5, 3], [3, 3, 3, 1], 1, "SAME", 1, id="height0"),
    pytest.param([4, 28, 28, 32], [3, 3, 32, 1], 1, "SAME", 1, id="mobilenet"),
    pytest.param([4, 29, 29, 8], [3, 3, 8, 4], 2, "SAME", 1, id="multiplier4-stride2"),
]


def four(value):
    """A strides/dilations argument as the raw op's 4 values."""
    rows, cols = (value, value) if np.isscalar(value) else value
    return [1, rows, cols, 1]


def depthwise(tf, strides, padding, dilations):
    """The raw op, which takes dilations directly (``tf.nn.depthwise_conv2d``
    runs an undilated op between SpaceToBatchND and BatchToSpaceND); its
    registered gradient calls both backprops."""
    if isinstance(padding, str):
        pads = {"padding": padding}
    else:
        pads = {"padding": "EXPLICIT", "explicit_paddings": [p for pair in padding for p in pair]}
    return lambda a, b: tf.raw_ops.DepthwiseConv2dNative(
        input=a, filter=b, strides=four(strides), dilations=four(dilations), **pads
    )


@pytest.mark.parametrize("input_shape,filter_shape,strides,padding,dilations", DEPTHWISE_CASES)
def test_depthwise_conv2d_and_gradients(tf, mode, input_shape, filter_shape, strides, padding, dilations):
    x = tf.constant(data(input_shape, 31))
    w_np = data(filter_shape, 32, scale=1.0)
    w = tf.constant(w_np)
    op = depthwise(tf, strides, padding, dilations)
    if dilations == 1:
        y_cpu = on_cpu(tf, op, x, w)
        dy = tf.constant(data(y_cpu.shape, 33))
        expected = list(on_cpu(tf, with_grads(tf, op), x, w, dy))
    else:
        # The CPU forward refuses dilations > 1 and its backprops ignore
        # them: a zero-stuffed filter gives the reference.
        stuffed, (dh, dw) = dilate(w_np, dilations)
        plain = depthwise(tf, strides, padding, 1)
        dy = tf.constant(data(on_cpu(tf, plain, x, tf.constant(stuffed)).shape, 33))
        y, dx, dw_full = on_cpu(tf, with_grads(tf, plain), x, tf.constant(stuffed), dy)
        expected = [y, dx, dw_full[::dh, ::dw]]
    if not np.asarray(dy).size:
        # No output terms: the CPU leaves the filter gradient uninitialised;
        # it is a sum of nothing.
        expected[2] = np.zeros(filter_shape, np.float32)
    got = run(tf, mode, with_grads(tf, op), x, w, dy)
    for name, g, e in zip(["depthwise", "d_input", "d_filter"], got, expected):
        if mode == "eager":
            assert on_wasm(g), f"{name} ran on {g.device}"
        close(g.numpy(), np.asarray(e), what=name)


def test_depthwise_unequal_strides_beyond_cpu(tf, mode):
    """Row and column strides may differ on WASM (the CPU refuses). With
    VALID padding a strided convolution is the stride-1 one sampled, so the
    reference is the CPU's stride-1 op, its output gradient zero-stuffed."""
    x = tf.constant(data([2, 11, 9, 3], 34))
    w = tf.constant(data([3, 2, 3, 2], 35, scale=1.0))
    op = depthwise(tf, [2, 3], "VALID", 1)
    plain = depthwise(tf, 1, "VALID", 1)
    full = on_cpu(tf, plain, x, w).numpy()
    dy_np = data(full[:, ::2, ::3].shape, 36)
    dy_full = np.zeros(full.shape, np.float32)
    dy_full[:, ::2, ::3] = dy_np
    _, dx, dw = on_cpu(tf, with_grads(tf, plain), x, w, tf.constant(dy_full))
    expected = [full[:, ::2, ::3], dx, dw]
    got = run(tf, mode, with_grads(tf, op), x, w, tf.constant(dy_np))
    for name, g, e in zip(["depthwise", "d_input", "d_filter"], got, expected):
        close(g.numpy(), np.asarray(e), what=name)


def test_depthwise_backprops_as_raw_ops(tf, mode):
    x = tf.constant(data([2, 9, 7, 3], 37))
    w = tf.constant(data([3, 2, 3, 2], 38, scale=1.0))
    dy = tf.constant(data([2, 5, 4, 6], 39))
    kw = dict(strides=[1, 2, 2, 1], padding="SAME")

    def both(x, w, dy):
        dx = tf.raw_ops.DepthwiseConv2dNativeBackpropInput(
            input_sizes=tf.constant([2, 9, 7, 3]), filter=w, out_backprop=dy, **kw
        )
        dw = tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(
            input=x, filter_sizes=tf.constant([3, 2, 3, 2]), out_backprop=dy, **kw
        )
        return dx, dw

    expected = on_cpu(tf, both, x, w, dy)
    got = run(tf, mode, both, x, w, dy)
    for g, e in zip(got, expected):
        close(g.numpy(), e.numpy())


def test_depthwise_nchw_is_refused_like_cpu(tf):
    x = tf.constant(data([1, 3, 5, 5], 1))
    w = tf.constant(data([3, 3, 3, 1], 2))
    with pytest.raises(tf.errors.UnimplementedError, match="NHWC"):
        with tf.device(WASM):
            tf.raw_ops.DepthwiseConv2dNative(input=x, filter=w, strides=[1, 1, 1, 1], padding="SAME", data_format="NCHW")


def test_depthwise_shape_errors(tf):
    x = tf.constant(data([1, 5, 5, 2], 1))
    w = tf.constant(data([3, 3, 3, 1], 2))
    dy = tf.constant(data([1, 5, 5, 2], 3))
    kw = dict(strides=[1, 1, 1, 1], padding="SAME")
    with tf.device(WASM):
        with pytest.raises(tf.errors.InvalidArgumentError, match="DepthwiseConv2dNative: input and filter must have the same depth"):
            tf.raw_ops.DepthwiseConv2dNative(input=x, filter=w, **kw)
        with pytest.raises(tf.errors.InvalidArgumentError, match="DepthwiseConv2dNativeBackpropInput: .*same depth"):
            tf.raw_ops.DepthwiseConv2dNativeBackpropInput(input_sizes=tf.constant([1, 5, 5, 2]), filter=w, out_backprop=dy, **kw)
        with pytest.raises(tf.errors.InvalidArgumentError, match="DepthwiseConv2dNativeBackpropFilter: out_backprop"):
            tf.raw_ops.DepthwiseConv2dNativeBackpropFilter(input=x, filter_sizes=tf.constant([3, 3, 2, 2]), out_backprop=dy, **kw)


# --------------------------------------------------------------- pooling

POOL_CASES = [
    pytest.param([1, 1, 1, 1], 1, 1, "VALID", id="1x1"),
    pytest.param([2, 7, 5, 3], 2, 2, "VALID", id="primes-valid"),
    pytest.param([2, 7, 5, 3], 2, 2, "SAME", id="primes-same"),
    pytest.param([2, 7, 5, 3], 3, 1, "SAME", id="overlap-same"),
    pytest.param([1, 11, 13, 2], [3, 2], [2, 3], "SAME", id="rect"),
    pytest.param([0, 4, 4, 2], 2, 2, "VALID", id="batch0"),
    pytest.param([4, 28, 28, 8], 2, 2, "VALID", id="keras"),
]


@pytest.mark.parametrize("pool", ["max", "avg"])
@pytest.mark.parametrize("shape,ksize,strides,padding", POOL_CASES)
@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_pooling_and_gradients(tf, mode, pool, shape, ksize, strides, padding, ties):
    values = data(shape, 7)
    if ties:
        values = np.round(values / 3).astype(np.float32)  # mostly -1, 0, 1: many equal maxima
    x = tf.constant(values)
    op = tf.nn.max_pool2d if pool == "max" else tf.nn.avg_pool2d
    check_pool_and_gradient(tf, mode, lambda a: op(a, ksize=ksize, strides=strides, padding=padding), x, rtol=1e-5)


def check_pool_and_gradient(tf, mode, pool_fn, x, rtol):
    """``pool_fn(x)`` and its input gradient on WASM against the CPU."""
    dy = tf.constant(data(on_cpu(tf, pool_fn, x).shape, 8))

    def f(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = pool_fn(x)
        return y, tape.gradient(y, x, output_gradients=dy)

    expected = on_cpu(tf, f, x, dy)
    got = run(tf, mode, f, x, dy)
    for name, g, e in zip(["pool", "d_input"], got, expected):
        if mode == "eager":
            assert on_wasm(g), f"{name} ran on {g.device}"
        close(g.numpy(), e.numpy(), rtol=rtol, what=name)


def test_max_pool_grad_raw_op_routes_to_first_maximum(tf, mode):
    x = tf.constant(np.ones([1, 4, 4, 2], np.float32))
    y = tf.constant(np.ones([1, 2, 2, 2], np.float32))
    dy = tf.constant(data([1, 2, 2, 2], 9))
    f = lambda x, y, dy: tf.raw_ops.MaxPoolGrad(
        orig_input=x, orig_output=y, grad=dy, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID"
    )
    close(run(tf, mode, f, x, y, dy).numpy(), on_cpu(tf, f, x, y, dy).numpy(), rtol=0)


def test_avg_pool_grad_raw_op(tf, mode):
    dy = tf.constant(data([2, 4, 3, 3], 10))
    f = lambda dy: tf.raw_ops.AvgPoolGrad(
        orig_input_shape=tf.constant([2, 7, 5, 3]), grad=dy, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME"
    )
    close(run(tf, mode, f, dy).numpy(), on_cpu(tf, f, dy).numpy(), rtol=1e-5)


# ------------------------------------------------------------- 3-D

CONV3D_CASES = [
    # input, filter, strides, padding, dilations
    pytest.param([1, 1, 1, 1, 1], [1, 1, 1, 1, 1], 1, "VALID", 1, id="1x1x1-single"),
    pytest.param([2, 5, 7, 3, 2], [2, 3, 3, 2, 3], 1, "SAME", 1, id="primes-same"),
    pytest.param([2, 5, 7, 3, 2], [2, 3, 3, 2, 3], 1, "VALID", 1, id="primes-valid"),
    pytest.param([1, 7, 6, 5, 3], [3, 2, 3, 3, 2], [2, 1, 3], "SAME", 1, id="strided"),
    pytest.param([2, 3, 4, 5, 4], [1, 1, 1, 4, 3], 1, "VALID", 1, id="pointwise"),
    pytest.param([0, 4, 4, 4, 2], [2, 2, 2, 2, 3], 1, "SAME", 1, id="batch0"),
    pytest.param([2, 8, 12, 12, 3], [3, 3, 3, 3, 8], 1, "SAME", 1, id="pooled"),
    pytest.param([1, 7, 8, 6, 2], [2, 3, 2, 2, 3], 1, "SAME", [2, 1, 3], id="dilated"),
]


@pytest.mark.parametrize("input_shape,filter_shape,strides,padding,dilations", CONV3D_CASES)
def test_conv3d_and_gradients(tf, mode, input_shape, filter_shape, strides, padding, dilations):
    x = tf.constant(data(input_shape, 1))
    w_np = data(filter_shape, 2, scale=1.0)
    w = tf.constant(w_np)
    conv = lambda a, b: tf.nn.conv3d(a, b, strides=[1, *np.broadcast_to(strides, 3), 1], padding=padding,
                                     dilations=[1, *np.broadcast_to(dilations, 3), 1])
    if dilations == 1:
        plain, w_ref = conv, w
    else:
        # TF's CPU Conv3D refuses dilations > 1: the same convolution with a
        # zero-stuffed filter is the reference (its filter gradient taken at
        # the stuffed positions).
        steps = np.broadcast_to(dilations, 3)
        stuffed = np.zeros([(k - 1) * d + 1 for k, d in zip(filter_shape[:3], steps)] + filter_shape[3:], np.float32)
        stuffed[:: steps[0], :: steps[1], :: steps[2]] = w_np
        plain = lambda a, b: tf.nn.conv3d(a, b, strides=[1, *np.broadcast_to(strides, 3), 1], padding=padding)
        w_ref = tf.constant(stuffed)
    dy = tf.constant(data(on_cpu(tf, plain, x, w_ref).shape, 3))
    y, dx, dw = on_cpu(tf, with_grads(tf, plain), x, w_ref, dy)
    if dilations != 1:
        dw = np.asarray(dw)[:: steps[0], :: steps[1], :: steps[2]]
    got = run(tf, mode, with_grads(tf, conv), x, w, dy)
    for name, g, e in zip(["conv3d", "d_input", "d_filter"], got, [y, dx, dw]):
        if mode == "eager":
            assert on_wasm(g), f"{name} ran on {g.device}"
        close(g.numpy(), np.asarray(e), what=name)


def test_conv3d_transpose_and_gradients(tf, mode):
    """`Conv3DTranspose` runs Conv3DBackpropInputV2 forward, and Conv3D and
    Conv3DBackpropFilterV2 in its gradient."""
    x = tf.constant(data([2, 3, 5, 4, 3], 4))
    w = tf.constant(data([2, 3, 2, 4, 3], 5, scale=1.0))
    out_shape = [2, 6, 9, 8, 4]
    up = lambda a, b: tf.nn.conv3d_transpose(a, b, out_shape, strides=[1, 2, 2, 2, 1], padding="SAME")
    dy = tf.constant(data(out_shape, 6))
    expected = on_cpu(tf, with_grads(tf, up), x, w, dy)
    got = run(tf, mode, with_grads(tf, up), x, w, dy)
    for name, g, e in zip(["conv3d_transpose", "d_input", "d_filter"], got, expected):
        if mode == "eager":
            assert on_wasm(g), f"{name} ran on {g.device}"
        close(g.numpy(), e.numpy(), what=name)


def test_conv3d_ncdhw_is_refused_like_cpu(tf):
    x = tf.constant(data([1, 2, 4, 5, 5], 1))
    w = tf.constant(data([3, 3, 3, 2, 4], 2))
    with pytest.raises(tf.errors.UnimplementedError, match="NDHWC"):
        with tf.device(WASM):
            tf.nn.conv3d(x, w, [1, 1, 1, 1, 1], "SAME", data_format="NCDHW")


POOL3D_CASES = [
    pytest.param([1, 1, 1, 1, 1], 1, 1, "VALID", id="1x1x1"),
    pytest.param([2, 5, 7, 3, 3], 2, 2, "VALID", id="primes-valid"),
    pytest.param([2, 5, 7, 3, 3], 2, 2, "SAME", id="primes-same"),
    pytest.param([1, 5, 5, 5, 2], 3, 1, "SAME", id="overlap-same"),
    pytest.param([2, 4, 7, 5, 1], [1, 3, 2], [1, 2, 1], "VALID", id="rect"),
    pytest.param([0, 4, 4, 4, 2], 2, 2, "VALID", id="batch0"),
]


@pytest.mark.parametrize("pool", ["max", "avg"])
@pytest.mark.parametrize("shape,ksize,strides,padding", POOL3D_CASES)
@pytest.mark.parametrize("ties", [False, True], ids=["random", "ties"])
def test_pooling3d_and_gradients(tf, mode, pool, shape, ksize, strides, padding, ties):
    """Exact against the CPU, ties included: TensorFlow's 3-D max-pool
    gradient shares a window's gradient among its tied maxima."""
    values = data(shape, 7)
    if ties:
        values = np.round(values / 3).astype(np.float32)
    x = tf.constant(values)
    op = tf.nn.max_pool3d if pool == "max" else tf.nn.avg_pool3d
    check_pool_and_gradient(tf, mode, lambda a: op(a, ksize=ksize, strides=strides, padding=padding), x, rtol=0)


# ------------------------------------------------------------ batch norm

BN_SHAPES = [
    pytest.param([1, 1, 1, 1], id="1x1"),
    pytest.param([2, 3, 5, 7], id="primes"),
    pytest.param([3, 7, 11, 1], id="channels1"),
    pytest.param([32, 14, 14, 8], id="keras"),
]


@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize(
    "is_training,factor", [(True, 1.0), (True, 0.01), (False, 1.0)], ids=["train", "train-avg", "inference"]
)
def test_fused_batch_norm(tf, mode, shape, is_training, factor):
    depth = shape[-1]
    x = tf.constant(data(shape, 11) + 1.5)
    scale = tf.constant(data([depth], 12, 1.0))
    offset = tf.constant(data([depth], 13, 1.0))
    mean = tf.constant(data([depth], 14, 1.0))
    var = tf.constant(np.abs(data([depth], 15, 1.0)) + 0.5)
    dy = tf.constant(data(shape, 16))

    def forward(x, scale, offset, mean, var):
        return tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=1e-3,
            exponential_avg_factor=factor, data_format="NHWC", is_training=is_training,
        )

    def f(x, scale, offset, mean, var, dy):
        if mode == "eager":
            # Through the registered gradient, as Keras reaches it.
            with tf.GradientTape() as tape:
                tape.watch([x, scale, offset])
                out = forward(x, scale, offset, mean, var)
            grads = tape.gradient(out.y, [x, scale, offset], output_gradients=dy)
        else:
            # The graph gradient also needs ZerosLike for the unused outputs
            # (another kernel family): call the gradient op as it would.
            out = forward(x, scale, offset, mean, var)
            saved = (out.reserve_space_1, out.reserve_space_2) if is_training else (mean, var)
            g = tf.raw_ops.FusedBatchNormGradV3(
                y_backprop=dy, x=x, scale=scale, reserve_space_1=saved[0], reserve_space_2=saved[1],
                reserve_space_3=out.reserve_space_3, epsilon=1e-3, data_format="NHWC", is_training=is_training,
            )
            grads = [g.x_backprop, g.scale_backprop, g.offset_backprop]
        return [out.y, out.batch_mean, out.batch_variance, out.reserve_space_1, out.reserve_space_2] + list(grads)

    expected = on_cpu(tf, f, x, scale, offset, mean, var, dy)
    got = run(tf, mode, f, x, scale, offset, mean, var, dy)
    names = ["y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "dx", "dscale", "doffset"]
    for name, g, e in zip(names, got, expected):
        if not is_training and name.startswith("reserve"):
            continue  # TF's CPU kernel leaves them unwritten in inference mode
        if mode == "eager":
            assert on_wasm(g), f"{name} ran on {g.device}"
        close(g.numpy(), e.numpy(), what=name)


def test_fused_batch_norm_grad_raw_op(tf, mode):
    shape = [2, 5, 3, 4]
    x = tf.constant(data(shape, 21))
    dy = tf.constant(data(shape, 22))
    scale = tf.constant(data([4], 23, 1.0))
    mean = tf.constant(data([4], 24, 1.0))
    var = tf.constant(np.abs(data([4], 25, 1.0)) + 0.5)

    def f(dy, x, scale, mean, var):
        out = tf.raw_ops.FusedBatchNormGradV3(
            y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=var,
            reserve_space_3=tf.constant(0.0), epsilon=1e-3, data_format="NHWC", is_training=True,
        )
        return out.x_backprop, out.scale_backprop, out.offset_backprop, out.reserve_space_4, out.reserve_space_5

    expected = on_cpu(tf, f, dy, x, scale, mean, var)
    got = run(tf, mode, f, dy, x, scale, mean, var)
    for g, e in zip(got, expected):
        close(g.numpy(), e.numpy())
