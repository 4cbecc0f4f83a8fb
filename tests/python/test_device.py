"""The WASM device in one shared TensorFlow: listing, kernels, placement, threads, variables."""

import threading

import numpy as np
import pytest

from tfwasm_support import WASM, on_wasm, run_on_wasm
from tfwasm_support import random_data as data


BINARY_SHAPES = [
    pytest.param([0, 3], [0, 3], id="empty"),
    pytest.param([0, 3], [1, 3], id="empty-broadcast"),
    pytest.param([1, 1], [1, 1], id="1x1"),
    pytest.param([7, 13], [7, 13], id="primes"),
    pytest.param([3, 1, 5], [4, 1], id="broadcast-3d"),
    pytest.param([], [2, 3], id="scalar-left"),
    pytest.param([2, 3], [], id="scalar-right"),
    pytest.param([5], [3, 5], id="row-broadcast"),
    pytest.param([3, 1], [1, 4], id="outer"),
    pytest.param([1 << 20], [1 << 20], id="large"),
]

MATMUL_SHAPES = [
    pytest.param([0, 5], [5, 3], id="empty-rows"),
    pytest.param([1, 1], [1, 1], id="1x1"),
    pytest.param([7, 13], [13, 5], id="primes"),
    pytest.param([5, 0], [0, 3], id="empty-inner"),
    pytest.param([1, 9], [9, 1], id="dot"),
    pytest.param([67, 131], [131, 45], id="larger-primes"),
]


def run(tf, mode, fn, *args):
    return run_on_wasm(tf, mode, fn, *args)


# --------------------------------------------------------------- listing


def test_exactly_one_wasm_device_is_listed(tf):
    devices = tf.config.list_physical_devices("WASM")
    assert [d.name for d in devices] == ["/physical_device:WASM:0"]
    assert tf.config.list_physical_devices("CPU"), "the CPU device must still be there"
    logical = [d.name for d in tf.config.list_logical_devices("WASM")]
    assert logical == [WASM]


# --------------------------------------------------------- AddV2 and Mul


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("shape_a,shape_b", BINARY_SHAPES)
def test_binary_op(tf, mode, op, shape_a, shape_b):
    a, b = data(shape_a, 1), data(shape_b, 2)
    tf_op = {"add": tf.math.add, "mul": tf.math.multiply}[op]
    np_op = {"add": np.add, "mul": np.multiply}[op]
    # No tf.device: a plugin device outranks CPU for ops it has a kernel for.
    result = run(tf, mode, tf_op, tf.constant(a), tf.constant(b))
    expected = np_op(a, b)
    assert result.dtype == tf.float32
    assert tuple(result.shape) == expected.shape
    assert on_wasm(result), f"{op} ran on {result.device}, not on the WASM device"
    # One IEEE float32 operation per element: the result is exact.
    np.testing.assert_array_equal(result.numpy(), expected)


def test_add_of_a_tensor_with_itself(tf, mode):
    a = tf.constant(data([11, 3], 3))
    result = run(tf, mode, lambda x: x + x, a)
    assert on_wasm(result)
    np.testing.assert_array_equal(result.numpy(), a.numpy() * 2)


def test_chained_ops_stay_on_the_device(tf, mode):
    a, b, c = data([4, 6], 4), data([4, 6], 5), data([6], 6)

    def chain(x, y, z):
        return (x * y + z) * (x + 1.0)

    result = run(tf, mode, chain, tf.constant(a), tf.constant(b), tf.constant(c))
    assert on_wasm(result)
    np.testing.assert_allclose(result.numpy(), (a * b + c) * (a + np.float32(1)), rtol=1e-6)


def test_explicit_placement_on_wasm(tf):
    a, b = data([3, 5], 7), data([3, 5], 8)
    with tf.device(WASM):
        x, y = tf.constant(a), tf.constant(b)
        result = x * y + x
    assert on_wasm(result)
    np.testing.assert_array_equal(result.numpy(), a * b + a)


# ---------------------------------------------------------------- MatMul


@pytest.mark.parametrize("transpose_b", [False, True], ids=["b", "bT"])
@pytest.mark.parametrize("transpose_a", [False, True], ids=["a", "aT"])
@pytest.mark.parametrize("shape_a,shape_b", MATMUL_SHAPES)
def test_matmul(tf, mode, shape_a, shape_b, transpose_a, transpose_b):
    a, b = data(shape_a, 10), data(shape_b, 11)
    # Store the operands transposed when the op is asked to transpose them back.
    stored_a = np.ascontiguousarray(a.T) if transpose_a else a
    stored_b = np.ascontiguousarray(b.T) if transpose_b else b

    def matmul(x, y):
        return tf.linalg.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b)

    result = run(tf, mode, matmul, tf.constant(stored_a), tf.constant(stored_b))
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert tuple(result.shape) == expected.shape
    assert on_wasm(result), f"MatMul ran on {result.device}, not on the WASM device"
    got = result.numpy()
    if expected.size and shape_a[1] == 0:
        # An empty inner dimension must yield zeros, not uninitialised memory.
        np.testing.assert_array_equal(got, np.zeros(expected.shape, np.float32))
    tol = 1e-5 * max(1, shape_a[1])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=tol)


def test_empty_inner_matmul_overwrites_recycled_memory(tf):
    # Fill the device with non-zero results first, so a kernel that leaves a
    # [5,0]x[0,3] output untouched would hand back stale values.
    for seed in range(4):
        junk = tf.linalg.matmul(tf.constant(data([5, 7], seed)), tf.constant(data([7, 3], seed + 1)))
        assert on_wasm(junk)
        del junk
    result = tf.linalg.matmul(tf.zeros([5, 0]), tf.zeros([0, 3]))
    assert on_wasm(result)
    np.testing.assert_array_equal(result.numpy(), np.zeros([5, 3], np.float32))


# --------------------------------------------------------------- threads


def test_ops_from_four_threads_at_once(tf):
    iterations = 40
    failures = []
    start = threading.Barrier(4)

    def worker(index):
        try:
            rng = np.random.default_rng(100 + index)
            m, k, n = 17 + index, 23 + 2 * index, 11 + 3 * index
            start.wait()
            for i in range(iterations):
                a = rng.standard_normal([m, k]).astype(np.float32)
                b = rng.standard_normal([k, n]).astype(np.float32)
                c = rng.standard_normal([n]).astype(np.float32)
                result = tf.linalg.matmul(tf.constant(a), tf.constant(b)) + tf.constant(c)
                if not on_wasm(result):
                    failures.append(f"thread {index} iteration {i}: ran on {result.device}")
                    return
                expected = a.astype(np.float64) @ b.astype(np.float64) + c
                if not np.allclose(result.numpy(), expected, rtol=1e-4, atol=1e-4):
                    failures.append(f"thread {index} iteration {i}: wrong values")
                    return
        except Exception as e:  # reported below, with the thread it came from
            failures.append(f"thread {index}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------- variables


def test_variable_on_wasm_with_assign_add_and_sub(tf):
    initial = data([6, 5], 20)
    delta_add, delta_sub = data([6, 5], 21), data([6, 5], 22)
    with tf.device(WASM):
        v = tf.Variable(initial)
    assert v.device.endswith("WASM:0"), v.device
    np.testing.assert_array_equal(v.numpy(), initial)

    v.assign_add(tf.constant(delta_add))
    expected = initial + delta_add
    np.testing.assert_array_equal(v.numpy(), expected)

    v.assign_sub(tf.constant(delta_sub))
    expected = expected - delta_sub
    np.testing.assert_array_equal(v.numpy(), expected)

    # A variable read feeds our kernels like any other device tensor.
    result = v * 2.0
    assert on_wasm(result)
    np.testing.assert_array_equal(result.numpy(), expected * 2)

    v.assign(tf.zeros([6, 5]))
    np.testing.assert_array_equal(v.numpy(), np.zeros([6, 5], np.float32))


def test_variable_updates_inside_tf_function(tf):
    with tf.device(WASM):
        v = tf.Variable(np.zeros([3, 4], np.float32))
    step = data([3, 4], 30)

    @tf.function
    def train(x):
        for _ in tf.range(5):
            v.assign_add(x)
        v.assign_sub(x * 2.0)
        return v.read_value()

    result = train(tf.constant(step))
    expected = np.zeros([3, 4], np.float32)
    for _ in range(5):
        expected += step
    expected -= step * np.float32(2)
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), expected, rtol=1e-6)


# -------------------------------------------------------------- fallback


def test_int32_add_still_works(tf):
    # There is no int32 kernel of ours. TensorFlow still has a way: its own
    # DEVICE_DEFAULT int32 AddV2 keeps the data in host memory (the result
    # may then report either device), or the op falls back to the CPU.
    a = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    b = np.arange(12, dtype=np.int32).reshape(3, 4) * 7
    for fn in (tf.math.add, tf.function(tf.math.add)):
        result = fn(tf.constant(a), tf.constant(b))
        assert result.dtype == tf.int32
        np.testing.assert_array_equal(result.numpy(), a + b)


def test_int32_add_under_wasm_scope(tf):
    a = np.array([1, -2, 3], np.int32)
    with tf.device(WASM):
        result = tf.constant(a) + tf.constant(a)
    np.testing.assert_array_equal(result.numpy(), a * 2)


def test_int64_add_runs_on_wasm(tf):
    # The optimizer's int64 step counter: values beyond 32 bits, on WASM.
    a = np.array([[3, -4, 5]], np.int64) << 40
    result = tf.constant(a) + tf.constant(a)
    assert result.device.endswith("WASM:0"), result.device
    np.testing.assert_array_equal(result.numpy(), a + a)


def test_int16_add_falls_back_to_cpu(tf):
    # Neither we nor TensorFlow's DEVICE_DEFAULT kernels cover int16 AddV2:
    # the op must quietly run on the CPU, with the right values.
    a = np.array([[3, -4, 5]], np.int16) << 12
    result = tf.constant(a) + tf.constant(a)
    assert result.device.endswith("CPU:0"), result.device
    np.testing.assert_array_equal(result.numpy(), a + a)


def test_float64_is_not_claimed_by_the_device(tf):
    a = np.linspace(-1, 1, 9).reshape(3, 3)
    result = tf.linalg.matmul(tf.constant(a), tf.constant(a))
    assert result.dtype == tf.float64
    assert not on_wasm(result), "the device has no float64 kernel"
    np.testing.assert_allclose(result.numpy(), a @ a)


def test_cpu_still_works_explicitly(tf):
    a, b = data([4, 4], 40), data([4, 4], 41)
    with tf.device("/device:CPU:0"):
        result = tf.linalg.matmul(tf.constant(a), tf.constant(b))
    assert result.device.endswith("CPU:0")
    np.testing.assert_allclose(result.numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_round_trip_through_device_memory(tf):
    # Host → device → host copies of odd sizes keep every byte.
    for n in [1, 3, 7, 4096 + 5, 1_000_003]:
        values = data([n], n)
        with tf.device(WASM):
            on_device = tf.identity(tf.constant(values))
        assert on_wasm(on_device), on_device.device
        np.testing.assert_array_equal(on_device.numpy(), values)


def test_loop_reads_tensor_array_elements_after_their_copies(tf):
    """TensorFlow copies TensorArray elements within the device with a
    memcpy_dtod on the compute stream and hands the copy to the next kernel
    at once, as it would on a GPU. Our kernels compute on the host, so they
    must wait for that stream first. Large elements make the copy slow
    enough that reading early gave wrong sums in most runs."""
    n = 1 << 21  # 8 MB per element
    x = data([6, n], 11)

    @tf.function
    def weighted_sum(x):
        elements = tf.TensorArray(tf.float32, size=6).unstack(x)

        def body(i, acc):
            return i + 1, acc + elements.read(i) * 2.0

        return tf.while_loop(lambda i, acc: i < 6, body, [0, tf.zeros([n])])[1]

    expected = (x * 2.0).sum(axis=0, dtype=np.float32)
    with tf.device(WASM):
        for _ in range(3):
            got = weighted_sum(tf.constant(x))
            assert on_wasm(got), got.device
            np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-4)
