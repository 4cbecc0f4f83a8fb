"""Data-movement and stateless-random kernels on WASM against TensorFlow's CPU device.

Data movement copies values, so results must be exactly equal (AddN too: it
sums left to right like TensorFlow's CPU kernel). The stateless random ops must
be bit-identical to the CPU's for the same seeds: that is what makes Keras
initializers and dropout masks reproducible across devices.
"""

import numpy as np
import pytest

from tfwasm_support import WASM, on_wasm, ops_on_wasm, run_on_wasm
from versions import TENSORFLOW
from tfwasm_support import random_data as data

CPU = "/CPU:0"


def on_device(tf, mode, fn, *args):
    """``fn(*args)`` with every op pinned to WASM (soft placement off in
    function mode, so a missing WASM kernel fails instead of falling back)."""
    if mode == "eager":
        # The inputs are made inside the device scope too.
        return run_on_wasm(tf, mode, lambda *a: fn(*[tf.constant(x) for x in a]), *args, scope_eager=True)
    return run_on_wasm(tf, mode, fn, *args)


def on_cpu(tf, fn, *args, mode="eager"):
    """The reference: ``fn(*args)`` on the CPU, eagerly or as a tf.function
    (graph rewrites, e.g. of AddN, then apply on both devices alike)."""
    if mode == "eager":
        with tf.device(CPU):
            return fn(*[tf.constant(a) for a in args])

    @tf.function
    def pinned(*inner):
        with tf.device(CPU):
            return fn(*inner)

    return pinned(*args)


def check_same(tf, mode, fn, *args):
    """Runs on both devices; results must be equal bit for bit."""
    expected = on_cpu(tf, fn, *args, mode=mode)
    got = on_device(tf, mode, fn, *args)
    if not isinstance(expected, (list, tuple)):
        expected, got = [expected], [got]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert on_wasm(g), g.device
        assert g.shape == e.shape
        assert g.dtype == e.dtype
        np.testing.assert_array_equal(g.numpy(), e.numpy())
    return got


# ------------------------------------------------------------- transpose


@pytest.mark.parametrize(
    "shape,perm",
    [
        ([], []),
        ([0, 3], [1, 0]),
        ([1, 1], [1, 0]),
        ([7, 13], [1, 0]),
        ([3, 5, 7], [2, 0, 1]),
        ([3, 5, 7], [1, 0, 2]),
        ([2, 3, 4, 5], [3, 2, 1, 0]),
        ([4, 67, 131], [0, 2, 1]),
        ([301, 257], [1, 0]),
    ],
)
def test_transpose(tf, mode, shape, perm):
    x = data(shape, 1)
    check_same(tf, mode, lambda t: tf.transpose(t, perm), x)


@pytest.mark.parametrize("shape,perm", [([0, 3], [1, 0]), ([1, 1], [1, 0]), ([7, 13], [1, 0]), ([3, 5, 7], [2, 0, 1])])
def test_transpose_int32(tf, mode, shape, perm):
    x = np.random.default_rng(5).integers(-(2**31), 2**31 - 1, shape).astype(np.int32)
    check_same(tf, mode, lambda t: tf.transpose(t, perm), x)


@pytest.mark.parametrize("layer,shape", [("UpSampling2D", [2, 3, 5, 4]), ("UpSampling2D", [1, 1, 1, 1]), ("UpSampling2D", [0, 3, 5, 2]), ("RepeatVector", [7, 13])])
def test_repeat_gradient_runs_on_wasm(tf, layer, shape):
    """Keras' ``ops.repeat`` (``UpSampling2D``, ``RepeatVector``) with an
    unknown batch size: its gradient transposes int32 indices (and its
    int32-to-int32 cast is placed before grappler drops it; the sweep runs
    that one). Pinned to WASM with soft placement off, nothing falls back,
    and the gradient equals the CPU's."""
    import keras

    x = data(shape, 21)
    repeat = keras.layers.UpSampling2D() if layer == "UpSampling2D" else keras.layers.RepeatVector(3)

    def gradient(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = repeat(t)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, t)

    # The batch dimension unknown, as in a Keras step: the repeat's gradient
    # then gathers through a transpose of int32 indices.
    signature = [tf.TensorSpec([None] + shape[1:], tf.float32)]

    @tf.function(input_signature=signature)
    def reference(t):
        with tf.device(CPU):
            return gradient(t)

    @tf.function(input_signature=signature)
    def pinned(t):
        with tf.device(WASM):
            return gradient(t)

    expected = reference(tf.constant(x))
    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        got, ran = ops_on_wasm(tf, pinned, tf.constant(x))
    finally:
        tf.config.set_soft_device_placement(soft)
    assert "Transpose" in ran, sorted(ran)
    assert on_wasm(got), got.device
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_transpose_rejects_bad_perm(tf):
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError):
        tf.raw_ops.Transpose(x=tf.constant(data([2, 3], 1)), perm=tf.constant([0, 0]))


# ------------------------------------------------------ concat, pack, unpack


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(tf, mode, axis):
    parts = [data([2, 3], 1), data([2, 3], 2)] if axis == 0 else [data([2, 3], 1), data([2, 0], 2), data([2, 5], 3)]
    check_same(tf, mode, lambda *p: tf.concat(list(p), axis), *parts)


def test_concat_large(tf, mode):
    check_same(tf, mode, lambda a, b: tf.concat([a, b], 1), data([300, 70], 1), data([300, 131], 2))


def test_concat_rejects_mismatched_shapes(tf):
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError):
        tf.concat([tf.constant(data([2, 3], 1)), tf.constant(data([3, 3], 2))], 1)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_stack_unstack(tf, mode, axis):
    parts = [data([4, 3], i) for i in range(5)]
    check_same(tf, mode, lambda *p: tf.stack(list(p), axis), *parts)
    check_same(tf, mode, lambda t: tf.unstack(t, axis=axis), data([3, 4, 2], 9))


# ----------------------------------------------------------- slice family


@pytest.mark.parametrize(
    "begin,size", [([0, 0, 0], [-1, -1, -1]), ([1, 2, 0], [3, -1, 2]), ([5, 0, 0], [0, 7, 3]), ([4, 6, 2], [1, 1, 1])]
)
def test_slice(tf, mode, begin, size):
    check_same(tf, mode, lambda t: tf.slice(t, begin, size), data([5, 7, 3], 2))


def test_slice_out_of_range(tf):
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError):
        tf.slice(tf.constant(data([5, 7], 1)), [4, 0], [2, 7])


STRIDED = [
    pytest.param(lambda t: t[1:-1:2, ::-1, 4], id="mixed"),
    pytest.param(lambda t: t[..., 0], id="ellipsis-shrink"),
    pytest.param(lambda t: t[:, None, -1], id="newaxis"),
    pytest.param(lambda t: t[3:1:-1, 1:3, -100:2], id="clamped"),
    pytest.param(lambda t: t[::-2, ::3, ::-4], id="negative-strides"),
    pytest.param(lambda t: t[2], id="index"),
    pytest.param(lambda t: t[-1, ..., None, 1:], id="ellipsis-newaxis"),
    pytest.param(lambda t: t[:, 10:], id="empty"),
    pytest.param(lambda t: t[:], id="identity"),
]


@pytest.mark.parametrize("index", STRIDED)
def test_strided_slice(tf, mode, index):
    check_same(tf, mode, index, data([4, 5, 6], 3))


@pytest.mark.parametrize("index", STRIDED)
def test_strided_slice_gradient(tf, index):
    x = data([4, 5, 6], 3)

    def grad(t):
        t = tf.constant(t)
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = index(t)
            loss = tf.reduce_sum(y * tf.constant(data(y.shape, 4)))
        return tape.gradient(loss, t)

    expected = on_cpu(tf, grad, x)
    with tf.device(WASM):
        got = grad(x)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_strided_slice_grad_raw(tf, mode):
    dy = data([1, 5], 6)
    fn = lambda d: tf.raw_ops.StridedSliceGrad(  # noqa: E731
        shape=[4, 5, 6], begin=[1, 0, 4], end=[-1, 0, 5], strides=[2, -1, 1], dy=d, begin_mask=2, end_mask=2, shrink_axis_mask=4
    )
    check_same(tf, mode, fn, dy)


def test_strided_slice_shrink_out_of_range(tf):
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError):
        tf.constant(data([4, 5], 1))[7]


# ------------------------------------------------------- tile, pad, fill


@pytest.mark.parametrize(
    "shape,multiples", [([2, 3], [2, 3]), ([], []), ([3], [0]), ([1, 5, 1], [3, 1, 4]), ([60, 70], [3, 4])]
)
def test_tile(tf, mode, shape, multiples):
    check_same(tf, mode, lambda t: tf.tile(t, multiples), data(shape, 4))


@pytest.mark.parametrize(
    "shape,paddings",
    [([2, 3], [[1, 2], [0, 3]]), ([3], [[0, 0]]), ([0, 2], [[1, 1], [1, 0]]), ([200, 100], [[3, 5], [7, 1]]), ([2, 1, 3], [[1, 0], [2, 2], [0, 1]])],
)
def test_pad(tf, mode, shape, paddings):
    x = data(shape, 5)
    check_same(tf, mode, lambda t: tf.pad(t, paddings), x)
    check_same(tf, mode, lambda t: tf.pad(t, paddings, constant_values=2.5), x)


@pytest.mark.parametrize("dims", [[2, 0, 3], [7, 13], [], [3, 70000]])
def test_fill(tf, mode, dims):
    check_same(tf, mode, lambda v: tf.fill(dims, v), np.float32(1.25))


# --------------------------------------------------------- gather, one-hot


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize(
    "params_shape,indices,axis,batch_dims",
    [
        ([5, 3], [4, 0, 0, 2], 0, 0),
        ([7], [[6, 0], [3, 3], [1, 5]], 0, 0),
        ([3, 4], [3, 0, 1, 1], 1, 0),
        ([3, 4, 5], [[3, 0, 1], [1, 2, 3]], 1, 0),
        ([3, 4, 5], [[0, 3], [2, 2], [1, 0]], 1, 1),
        ([3, 4, 5], [[0, 3], [2, 2], [1, 0]], -1, 1),
        ([4, 2], np.zeros([0], np.int64), 0, 0),
        ([1000, 64], list(range(999, 0, -7)), 0, 0),
    ],
)
def test_gather(tf, mode, index_dtype, params_shape, indices, axis, batch_dims):
    idx = np.asarray(indices).astype(index_dtype)
    check_same(tf, mode, lambda p, i: tf.gather(p, i, axis=axis, batch_dims=batch_dims), data(params_shape, 6), idx)


def test_gather_out_of_range_is_invalid_argument(tf):
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1,1\] = 4 is not in \[0, 4\)"):
        tf.gather(tf.constant(data([4, 2], 1)), tf.constant([[0, 1], [2, 4]]))


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(tf, mode, index_dtype, axis):
    idx = np.array([[0, 3, -1], [2, 5, 1]], dtype=index_dtype)
    check_same(tf, mode, lambda i: tf.one_hot(i, 4, on_value=2.0, off_value=-1.0, axis=axis), idx)
    check_same(tf, mode, lambda i: tf.one_hot(i, 10), np.arange(1000, dtype=index_dtype) % 13)


# --------------------------------------------- unsorted segment sum, reverse


@pytest.mark.parametrize("id_dtype,num_dtype", [("int32", "int32"), ("int64", "int64"), ("int32", "int64")])
@pytest.mark.parametrize(
    "data_shape,id_rank,num_segments",
    [
        ([7, 13], 1, 5),
        ([0, 3], 1, 4),
        ([1, 1], 1, 1),
        ([4, 3, 5], 2, 6),
        ([6], 1, 0),
        ([], 0, 3),
        ([3001, 67], 1, 1000),  # large: split by segments
        ([2000, 131], 1, 2),  # large, two segments: split by columns
    ],
)
def test_unsorted_segment_sum(tf, mode, id_dtype, num_dtype, data_shape, id_rank, num_segments):
    # Ids in [-1, num_segments): a negative id drops its row, as on the CPU.
    ids = np.random.default_rng(3).integers(-1, max(num_segments, 0), size=data_shape[:id_rank]).astype(id_dtype)
    num = np.array(num_segments, num_dtype)
    # Each segment is summed in the order of the ids on both devices: equal bits.
    check_same(tf, mode, lambda d, i, n: tf.math.unsorted_segment_sum(d, i, n), data(data_shape, 10), ids, num)


@pytest.mark.parametrize(
    "data_shape,ids,num_segments,message",
    [
        ([4, 3], [0, 3, 0, 1], 3, r"segment_ids\[1\] = 3 is not in \[0, 3\)"),
        ([2, 2], [[0, -1], [5, 0]], 2, r"segment_ids\[1,0\] = 5"),
        ([4, 3], [0, 0, 0, 0], -1, "negative"),
        ([4, 3], [0, 1, 0], 3, "does not start with"),
    ],
)
def test_unsorted_segment_sum_rejects_what_the_cpu_rejects(tf, data_shape, ids, num_segments, message):
    args = (data(data_shape, 1), np.array(ids, np.int32), np.int32(num_segments))
    with tf.device(CPU), pytest.raises(tf.errors.InvalidArgumentError):
        tf.raw_ops.UnsortedSegmentSum(data=args[0], segment_ids=args[1], num_segments=args[2])
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError, match=f"UnsortedSegmentSum.*{message}"):
        tf.raw_ops.UnsortedSegmentSum(data=args[0], segment_ids=args[1], num_segments=args[2])


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_gradient_densifies_on_wasm(tf, index_dtype):
    """An Embedding's gradient: tf.gather's is sparse (IndexedSlices), and
    densifying it, as Keras' optimizers do, is an UnsortedSegmentSum. Pinned
    to WASM with soft placement off, so nothing falls back."""
    table = data([50, 8], 11)
    ids = np.array([[3, 7, 3], [49, 0, 3], [7, 7, 7]], index_dtype)
    weights = data([3, 3, 8], 12)

    def dense_gradient(t, i):
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = tf.reduce_sum(tf.gather(t, i) * weights)
        return tf.convert_to_tensor(tape.gradient(y, t))

    expected = on_cpu(tf, dense_gradient, table, ids, mode="function")

    @tf.function
    def pinned(t, i):
        with tf.device(WASM):
            return dense_gradient(t, i)

    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        got, ran = ops_on_wasm(tf, pinned, tf.constant(table), tf.constant(ids))
    finally:
        tf.config.set_soft_device_placement(soft)
    assert "UnsortedSegmentSum" in ran, sorted(ran)
    np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert np.count_nonzero(got.numpy().any(axis=1)) == 4  # rows 0, 3, 7, 49


@pytest.mark.parametrize("axis_dtype", ["int32", "int64"])
@pytest.mark.parametrize(
    "shape,axes",
    [
        ([7, 13], [0]),
        ([7, 13], [-1]),
        ([7, 13], [0, 1]),
        ([7, 13], []),
        ([1, 1], [1]),
        ([0, 3], [0]),
        ([], []),
        ([2, 3, 5, 7], [1, 3]),
        ([4, 1, 6], [-3, 1]),
        ([301, 257], [1]),
        ([32, 20, 64], [1]),  # a batch of sequences, reversed in time (go_backwards)
    ],
)
def test_reverse(tf, mode, axis_dtype, shape, axes):
    check_same(tf, mode, lambda t, a: tf.reverse(t, a), data(shape, 13), np.array(axes, axis_dtype))


@pytest.mark.parametrize("shape,axes", [([2, 3], [1, 1]), ([2, 3], [1, -1]), ([2, 3], [2]), ([2, 3], [-3])])
def test_reverse_rejects_what_the_cpu_rejects(tf, shape, axes):
    for device in (CPU, WASM):
        with tf.device(device), pytest.raises(tf.errors.InvalidArgumentError):
            tf.raw_ops.ReverseV2(tensor=data(shape, 1), axis=np.array(axes, np.int32))


def test_reverse_of_an_empty_tensor_ignores_its_axes(tf):
    # Nothing to reverse, so no axis is checked, as 2.21's CPU kernel does.
    # TensorFlow 2.22's CPU kernel refuses the repeated axis even here; the
    # WASM kernel keeps 2.21's answer, never failing where 2.21 ran.
    empty, axes = np.zeros([0, 3], np.float32), np.array([0, 0, 5], np.int32)
    with tf.device(WASM):
        assert tf.raw_ops.ReverseV2(tensor=empty, axis=axes).shape == (0, 3)
    with tf.device(CPU):
        if TENSORFLOW >= (2, 22):
            with pytest.raises(tf.errors.InvalidArgumentError, match="specified more than once"):
                tf.raw_ops.ReverseV2(tensor=empty, axis=axes)
        else:
            assert tf.raw_ops.ReverseV2(tensor=empty, axis=axes).shape == (0, 3)


def test_backwards_rnn_matches_cpu(tf):
    """Keras' go_backwards recurrence reverses its input in time (ReverseV2)."""
    import keras

    x = data([4, 9, 3], 14)
    layer = keras.layers.SimpleRNN(5, go_backwards=True, return_sequences=True, seed=1)
    layer.build(x.shape)
    with tf.device(CPU):
        expected = layer(tf.constant(x))
    with tf.device(WASM):
        got = layer(tf.constant(x))
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------ add_n, broadcast_to


@pytest.mark.parametrize("count", [1, 2, 3, 9, 11])
@pytest.mark.parametrize("shape", [[0, 3], [7, 13], [70000]])
def test_add_n(tf, mode, count, shape):
    parts = [data(shape, i) for i in range(count)]
    check_same(tf, mode, lambda *p: tf.add_n(list(p)), *parts)


def test_add_n_of_large_tensors_in_a_function(tf):
    """Grappler's memory optimizer rewrites an AddN of more than two inputs
    into reference-typed TemporaryVariable/Assign/AssignAdd ops, which have
    no WASM kernels, once it estimates the graph's peak memory above 80% of
    a device limit (the CPU's 256 MB counts). The plugin turns that rewrite
    off; without that this program fails with "No registered 'Assign'
    OpKernel for 'WASM' devices"."""
    n = 16_000_000  # 64 MB per tensor; six of them live at the peak
    with tf.device(WASM):
        a = tf.random.stateless_uniform([n], seed=[1, 2])
        b, c = a + 1.0, a * 0.5

        @tf.function
        def sums(a, b, c):
            return tf.add_n([a * 2.0, b * 3.0, c * 4.0])

        got = sums(a, b, c)
    assert on_wasm(got), got.device
    np.testing.assert_allclose(got.numpy(), a.numpy() * 2.0 + b.numpy() * 3.0 + c.numpy() * 4.0, rtol=1e-6)


@pytest.mark.parametrize("shape,target", [([3, 1], [2, 3, 4]), ([], [0, 4]), ([5], [300, 5]), ([1, 7], [1, 7])])
def test_broadcast_to(tf, mode, shape, target):
    check_same(tf, mode, lambda t: tf.broadcast_to(t, target), data(shape, 7))


def test_broadcast_to_incompatible(tf):
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError):
        tf.broadcast_to(tf.constant(data([3], 1)), [2, 4])


# ------------------------------------------------------ gradients (eager)

GRADIENTS = [
    pytest.param(lambda t: tf_mod().transpose(t, [2, 0, 1]), id="transpose"),
    pytest.param(lambda t: tf_mod().concat([t, t[:, :2]], 1), id="concat"),
    pytest.param(lambda t: tf_mod().stack([t, 2 * t], 1), id="stack"),
    pytest.param(lambda t: tf_mod().slice(t, [1, 0, 2], [2, -1, 3]), id="slice"),
    pytest.param(lambda t: tf_mod().pad(t, [[1, 0], [0, 2], [3, 1]]), id="pad"),
    pytest.param(lambda t: tf_mod().gather(t, [2, 0, 2], axis=1), id="gather"),
    pytest.param(lambda t: tf_mod().reverse(t, [0, -1]), id="reverse"),
]


def tf_mod():
    import tensorflow

    return tensorflow


@pytest.mark.parametrize("fn", GRADIENTS)
def test_gradients_match_cpu(tf, fn):
    x = data([3, 4, 5], 8)

    def grad(t):
        t = tf.constant(t)
        with tf.GradientTape() as tape:
            tape.watch(t)
            y = fn(t)
            loss = tf.reduce_sum(y * tf.constant(data(y.shape, 9)))
        return tape.gradient(loss, t)

    expected = on_cpu(tf, grad, x)
    with tf.device(WASM):
        got = grad(x)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-6, atol=0)


# ------------------------------------------------------- stateless random

SEEDS = [[7, 11], [0, 0], [-1, 5], [123456789, -987654321]]
SHAPES = [[0], [1], [7], [5, 3], [4, 4], [101, 97], [3, 0, 2]]


def bits(t):
    return t.numpy().view(np.uint32)


def raw_random(tf, dist):
    """The raw op chain the public API emits: GetKeyCounter, then the V2 op
    (the public wrappers add Sub/Mul/AddV2, which belong to other kernels)."""
    from tensorflow.python.ops import gen_stateless_random_ops_v2 as v2

    op = {
        "uniform": v2.stateless_random_uniform_v2,
        "normal": v2.stateless_random_normal_v2,
        "truncated_normal": v2.stateless_truncated_normal_v2,
    }[dist]

    def sample(shape, seed):
        key, counter = v2.stateless_random_get_key_counter(seed)
        return op(shape, key, counter, alg=3, dtype=tf.float32)

    return sample


@pytest.mark.parametrize("seed_dtype", ["int32", "int64"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dist", ["uniform", "normal", "truncated_normal"])
def test_stateless_random_is_bit_identical(tf, mode, seed_dtype, seed, dist):
    fn = raw_random(tf, dist)
    s = np.array(seed, dtype=seed_dtype)
    for shape in SHAPES:
        expected = on_cpu(tf, lambda x: fn(shape, x), s, mode=mode)
        got = on_device(tf, mode, lambda x: fn(shape, x), s)
        assert on_wasm(got)
        assert got.shape == expected.shape
        np.testing.assert_array_equal(bits(got), bits(expected))


@pytest.mark.parametrize("seed", SEEDS)
def test_public_stateless_api_matches_cpu(tf, seed):
    """tf.random.stateless_* (eager, soft placement: the affine tail may run
    wherever its kernels are)."""
    s = tf.constant(seed, dtype=tf.int32)
    for fn in [tf.random.stateless_uniform, tf.random.stateless_normal, tf.random.stateless_truncated_normal]:
        for shape in SHAPES:
            expected = on_cpu(tf, lambda x: fn(shape, seed=x, dtype=tf.float32), s)
            with tf.device(WASM):
                got = fn(shape, seed=s, dtype=tf.float32)
            np.testing.assert_array_equal(bits(got), bits(expected))


@pytest.mark.parametrize("seed", SEEDS)
def test_get_key_counter_matches_cpu(tf, mode, seed):
    from tensorflow.python.ops import gen_stateless_random_ops_v2 as v2

    for dtype in ["int32", "int64"]:
        s = np.array(seed, dtype=dtype)
        check_same(tf, mode, lambda x: v2.stateless_random_get_key_counter(x), s)
        check_same(tf, mode, lambda x: v2.stateless_random_get_key_counter_alg(x)[:2], s)


@pytest.mark.parametrize("dist", ["uniform", "normal", "truncated_normal"])
def test_v1_stateless_ops_are_bit_identical(tf, mode, dist):
    from tensorflow.python.ops import gen_stateless_random_ops as v1

    fn = {
        "uniform": v1.stateless_random_uniform,
        "normal": v1.stateless_random_normal,
        "truncated_normal": v1.stateless_truncated_normal,
    }[dist]
    for seed in SEEDS:
        s = np.array(seed, dtype=np.int64)
        got = check_same(tf, mode, lambda x: fn([33, 17], x, dtype=tf.float32), s)
        assert got[0].shape == [33, 17]


def test_large_random_outputs_use_the_pool_and_stay_identical(tf, mode):
    for dist in ["uniform", "normal", "truncated_normal"]:
        fn = raw_random(tf, dist)
        s = np.array([3, 4], dtype=np.int32)
        expected = on_cpu(tf, lambda x: fn([513, 257], x), s)
        got = on_device(tf, mode, lambda x: fn([513, 257], x), s)
        np.testing.assert_array_equal(bits(got), bits(expected))


def test_uniform_range_and_bad_alg(tf):
    from tensorflow.python.ops import gen_stateless_random_ops_v2 as v2

    with tf.device(WASM):
        key, counter = v2.stateless_random_get_key_counter(tf.constant([1, 2]))
        with pytest.raises((tf.errors.InvalidArgumentError, tf.errors.UnimplementedError)):
            v2.stateless_random_uniform_v2([3], key, counter, alg=2)


def test_keras_initializers_and_dropout_match_cpu(tf):
    keras = pytest.importorskip("keras")
    for init in [
        keras.initializers.GlorotUniform(seed=3),
        keras.initializers.HeNormal(seed=4),
        keras.initializers.TruncatedNormal(seed=5),
        keras.initializers.RandomUniform(-0.2, 0.3, seed=6),
    ]:
        expected = on_cpu(tf, lambda: init((37, 19)))
        with tf.device(WASM):
            got = init((37, 19))
        np.testing.assert_array_equal(bits(tf.convert_to_tensor(got)), bits(tf.convert_to_tensor(expected)))

    x = data([16, 33], 10)

    def dropped():
        layer = keras.layers.Dropout(0.3, seed=7)
        return tf.convert_to_tensor(layer(tf.constant(x), training=True))

    expected = on_cpu(tf, dropped)
    with tf.device(WASM):
        got = dropped()
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


# ------------------------------------------------------------ split, split_v


@pytest.mark.parametrize(
    "shape,parts,axis",
    [([6, 4], 2, 0), ([6, 4], 4, 1), ([6, 4], 1, -1), ([3, 10, 5], 5, 1), ([0, 6], 3, 1), ([4, 0], 2, 0), ([1, 1], 1, 0)],
)
def test_split(tf, mode, shape, parts, axis):
    check_same(tf, mode, lambda t: tf.split(t, parts, axis=axis), data(shape, 3))


@pytest.mark.parametrize(
    "shape,sizes,axis",
    [([7, 3], [2, 5], 0), ([7, 3], [1, -1, 1], 1), ([2, 11, 2], [3, 0, 8], 1), ([5], [5], 0), ([0, 4], [1, 3], 1)],
)
def test_split_v(tf, mode, shape, sizes, axis):
    check_same(tf, mode, lambda t: tf.split(t, sizes, axis=axis), data(shape, 4))


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda tf, t: tf.split(t, 4, axis=1), id="uneven"),
        pytest.param(lambda tf, t: tf.split(t, [2, 2], axis=1), id="sizes-do-not-add-up"),
        pytest.param(lambda tf, t: tf.split(t, [-1, -1, 1], axis=1), id="two-inferred"),
        pytest.param(lambda tf, t: tf.split(t, 2, axis=2), id="axis-out-of-range"),
    ],
)
def test_split_errors_match_the_cpu(tf, call):
    t = data([2, 6], 5)
    with tf.device(CPU), pytest.raises(tf.errors.InvalidArgumentError):
        call(tf, tf.constant(t))
    with tf.device(WASM), pytest.raises(tf.errors.InvalidArgumentError):
        call(tf, tf.constant(t))
