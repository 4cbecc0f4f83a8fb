"""Integer bookkeeping kernels on the WASM device against TensorFlow's CPU device.

Keras' train step keeps an int64 step counter and int64 seed-generator
state, reads the bits of a float32 output, and does int32 shape arithmetic.
These are the kernels that keep those ops on WASM: int64 AddV2/Mul/FloorMod,
int32 BitwiseAnd, int32 ↔ int64 Cast, float32 → int32 Bitcast, int32 Prod,
int32 Pack and StridedSlice (in host memory), and bool Pack; and int64
Less and int32/int64 SelectV2, with which Keras' ``ops.take`` (an
``Embedding``) wraps negative indices. Integers must match exactly, overflow included (TensorFlow's CPU
kernels wrap).
"""

import numpy as np
import pytest

from tfwasm_support import WASM, binary_shapes, on_wasm, run_on_wasm

CPU = "/device:CPU:0"
BINARY_SHAPES = binary_shapes()


def ints(shape, seed, dtype, lo=-1000, hi=1000):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def with_extremes(x):
    """The type's maximum and minimum at a few places, so Add and Mul overflow."""
    x = x.copy()
    info = np.iinfo(x.dtype)
    if x.size:
        x.flat[:: max(1, x.size // 3)] = info.max
        x.flat[1 :: max(2, x.size // 2)] = info.min
    return x


def compare(tf, mode, fn, arrays):
    """Runs ``fn`` on WASM (pinned, soft placement off in function mode) and on the CPU; equal bit for bit."""
    result = run_on_wasm(tf, mode, fn, *[tf.constant(a) for a in arrays])
    with tf.device(CPU):
        expected = fn(*[tf.constant(a) for a in arrays])
    assert on_wasm(result), f"ran on {result.device}"
    assert result.dtype == expected.dtype
    assert tuple(result.shape) == tuple(expected.shape)
    np.testing.assert_array_equal(result.numpy(), expected.numpy())
    return result


@pytest.mark.parametrize("op", ["add", "multiply"])
@pytest.mark.parametrize("a_shape,b_shape", BINARY_SHAPES)
def test_int64_add_mul_wrap_like_the_cpu(tf, mode, op, a_shape, b_shape):
    fn = getattr(tf.math, op)
    compare(tf, mode, fn, [with_extremes(ints(a_shape, 1, np.int64)), ints(b_shape, 2, np.int64)])


@pytest.mark.parametrize("a_shape,b_shape", BINARY_SHAPES)
def test_int64_floormod_takes_the_divisor_sign(tf, mode, a_shape, b_shape):
    y = ints(b_shape, 4, np.int64, -50, 50)
    y[y == 0] = -7
    compare(tf, mode, tf.math.floormod, [ints(a_shape, 3, np.int64), y])


def test_floormod_of_the_keras_seed(tf, mode):
    # Keras' _cast_seed: floormod(seed, int32.max - 1) then cast to int32.
    seed = np.array([2**40 + 12345, -(2**35) - 3], np.int64)
    compare(tf, mode, lambda s: tf.cast(tf.math.floormod(s, np.int64(2**31 - 2)), tf.int32), [seed])


def test_int64_floormod_by_zero_is_an_error(tf):
    x, y = np.array([5, 6], np.int64), np.array([1, 0], np.int64)
    with tf.device(CPU), pytest.raises(tf.errors.InvalidArgumentError, match="division by zero"):
        tf.math.floormod(x, y)
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError, match="Integer division by zero"):
        tf.math.floormod(x, y)


@pytest.mark.parametrize("a_shape,b_shape", BINARY_SHAPES)
def test_int32_bitwise_and(tf, mode, a_shape, b_shape):
    lo, hi = -(2**31), 2**31 - 1
    compare(tf, mode, tf.bitwise.bitwise_and, [ints(a_shape, 5, np.int32, lo, hi), ints(b_shape, 6, np.int32, lo, hi)])


@pytest.mark.parametrize(
    "x,dst",
    [
        pytest.param(np.array([0, -1, 2**31 - 1, -(2**31)], np.int32), "int64", id="int32-to-int64"),
        pytest.param(np.array([0, -1, 2**31, 2**32 + 5, -(2**31) - 1, 2**63 - 1, -(2**63)], np.int64), "int32", id="int64-to-int32"),
        pytest.param(np.zeros((0, 3), np.int64), "int32", id="empty"),
        pytest.param(np.array(7, np.int32), "int64", id="scalar"),
    ],
)
def test_integer_casts(tf, mode, x, dst):
    compare(tf, mode, lambda t: tf.cast(t, dst), [x])


@pytest.mark.parametrize("shape", [[0, 4], [], [7, 13], [257, 131]])
def test_bitcast_float32_to_int32(tf, mode, shape):
    x = (np.random.default_rng(7).standard_normal(shape) * 3).astype(np.float32)
    compare(tf, mode, lambda t: tf.bitcast(t, tf.int32), [x])


def test_bitcast_keeps_nan_and_signed_zero_bits(tf, mode):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45], np.float32)
    got = compare(tf, mode, lambda t: tf.bitcast(t, tf.int32), [x])
    np.testing.assert_array_equal(got.numpy(), x.view(np.int32))


@pytest.mark.parametrize(
    "shape,axes",
    [([4], [0]), ([2, 3, 5], [0, 2]), ([7, 13], [1]), ([0, 3], [0]), ([64, 1031], [1]), ([3, 4], [])],
)
def test_int32_prod(tf, mode, shape, axes):
    # Values in [-3, 3]: the long rows overflow int32 and wrap on both devices.
    compare(tf, mode, lambda t: tf.reduce_prod(t, axis=axes), [ints(shape, 8, np.int32, -3, 4)])


@pytest.mark.parametrize("dtype", [np.int32, np.bool_])
@pytest.mark.parametrize("shape,n,axis", [([], 2, 0), ([], 14, 0), ([2, 3], 3, 1), ([0, 3], 2, 0), ([7, 13], 2, -1)])
def test_int32_and_bool_pack(tf, mode, dtype, shape, n, axis):
    arrays = [ints(shape, 9 + i, np.int32, -2, 2).astype(dtype) for i in range(n)]
    compare(tf, mode, lambda *ts: tf.stack(ts, axis=axis), arrays)


@pytest.mark.parametrize(
    "index",
    [
        pytest.param(lambda t: t[0], id="shape[0]"),
        pytest.param(lambda t: t[1:-1], id="shape[1:-1]"),
        pytest.param(lambda t: t[::-2], id="reversed"),
        pytest.param(lambda t: t[5:9], id="clamped-empty"),
    ],
)
def test_int32_strided_slice_of_a_shape(tf, mode, index):
    compare(tf, mode, index, [np.array([32, 28, 28, 1], np.int32)])


def test_int32_strided_slice_of_a_matrix(tf, mode):
    compare(tf, mode, lambda t: t[1:6:2, ::-3], [ints([7, 13], 11, np.int32)])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize(
    "shapes",
    [([], [], []), ([7, 13], [7, 13], [7, 13]), ([7, 1], [1, 13], []), ([0, 3], [1, 3], []), ([301, 1], [301, 257], [257])],
    ids=["scalars", "same", "three-way", "empty", "large"],
)
def test_integer_select_v2(tf, mode, dtype, shapes):
    # In function mode this is pinned to WASM with soft placement off: it
    # runs only because there is a WASM kernel, and TensorFlow 2.21 has no
    # DEVICE_DEFAULT int32 SelectV2 that ours could make ambiguous.
    c = ints(shapes[0], 12, np.int32) > 0
    t = with_extremes(ints(shapes[1], 13, dtype))
    e = ints(shapes[2], 14, dtype)
    compare(tf, mode, lambda c, t, e: tf.raw_ops.SelectV2(condition=c, t=t, e=e), [c, t, e])


@pytest.mark.parametrize("a_shape,b_shape", BINARY_SHAPES)
def test_int64_less(tf, mode, a_shape, b_shape):
    # keras.ops.take compares int64 ids with 0; extremes check no overflow.
    compare(tf, mode, tf.math.less, [with_extremes(ints(a_shape, 15, np.int64)), ints(b_shape, 16, np.int64)])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_keras_take_wraps_negative_indices(tf, dtype):
    # keras.ops.take: where(i < 0, i + n, i), then a gather.
    import keras

    params = np.arange(40, dtype=np.float32).reshape(10, 4)
    indices = np.array([[0, -1, 3], [-10, 9, -4]], dtype)
    with tf.device(WASM):
        taken = keras.ops.take(tf.constant(params), tf.constant(indices), axis=0)
    assert on_wasm(taken), taken.device
    np.testing.assert_array_equal(taken.numpy(), params[np.where(indices < 0, indices + 10, indices)])
