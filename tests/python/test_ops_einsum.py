"""Einsum on WASM vs TF's CPU device, forward and gradients. (Keras'
MultiHeadAttention, made of einsums, trains in test_training.py's
``transformer`` model.)

Every equation runs eagerly and inside a tf.function pinned to the WASM
device with soft placement off (so a missing kernel fails instead of falling
back to the CPU), and is compared with the same op on ``/CPU:0``. Tolerance
rtol=1e-5 with atol=1e-5 × the largest expected magnitude: sums run in a
different order.
"""

import numpy as np
import pytest

from tfwasm_support import WASM, run_on_wasm
from tfwasm_support import random_data as data

CPU = "/CPU:0"

CASES = [
    # equation, operand shapes
    pytest.param("ab,bc->ac", [[5, 7], [7, 3]], id="matmul"),
    pytest.param("ab,cb->ac", [[5, 7], [3, 7]], id="matmul-transposed"),
    pytest.param("abc,cde->abde", [[2, 7, 5], [5, 4, 3]], id="einsum-dense"),
    pytest.param("abde,cde->abc", [[2, 7, 4, 3], [5, 4, 3]], id="einsum-dense-out"),
    pytest.param("aecd,abcd->acbe", [[2, 5, 3, 4], [2, 7, 3, 4]], id="attention-scores"),
    pytest.param("acbe,aecd->abcd", [[2, 3, 7, 5], [2, 5, 3, 4]], id="attention-values"),
    pytest.param("...ab,bc->...ac", [[5, 2, 3], [3, 4]], id="ellipsis"),
    pytest.param("...ab,...bc->...ac", [[5, 1, 2, 3], [7, 3, 4]], id="ellipsis-broadcast"),
    pytest.param("ab,cd->abcd", [[2, 3], [4, 5]], id="outer"),
    pytest.param("ab,bc->a", [[2, 3], [3, 4]], id="sum-one-side"),
    pytest.param("iij,jk->ik", [[3, 3, 2], [2, 4]], id="diagonal"),
    pytest.param("ab->ba", [[3, 5]], id="transpose"),
    pytest.param("ab->", [[3, 5]], id="sum-all"),
    pytest.param("ii->i", [[4, 4]], id="diag-part"),
    pytest.param("i->ii", [[3]], id="diag-inflate"),
    pytest.param("ab,bc->ac", [[1, 1], [1, 1]], id="1x1"),
    pytest.param("ab,bc->ac", [[13, 11], [11, 17]], id="primes"),
    pytest.param("ab,bc->ac", [[2, 0], [0, 3]], id="empty-contraction"),
    pytest.param("abc,abd->acd", [[0, 2, 3], [0, 2, 4]], id="empty-summed-batch"),
    pytest.param("abc,acd->abd", [[0, 2, 3], [0, 3, 4]], id="empty-batch"),
]


def close(got, expected, what=""):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, what
    atol = 1e-5 * max(1.0, float(np.max(np.abs(expected)))) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=atol, err_msg=what)


def einsum_with_grads(tf, equation):
    """``f(*xs)`` → (einsum, gradient of sum(einsum * dy) for each operand).

    TensorFlow's gradient of an einsum is einsums (with reshapes and sums
    for broadcasting), so this also runs the gradient equations.
    """

    def f(dy, *xs):
        dy, xs = tf.convert_to_tensor(dy), [tf.convert_to_tensor(x) for x in xs]
        with tf.GradientTape() as tape:
            tape.watch(xs)
            y = tf.einsum(equation, *xs)
        return (y, *tape.gradient(y, xs, output_gradients=dy))

    return f


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("equation,shapes", CASES)
def test_einsum_matches_cpu(tf, mode, equation, shapes):
    xs = [data(s, seed=i + 3) for i, s in enumerate(shapes)]
    with tf.device(CPU):
        expected = tf.raw_ops.Einsum(inputs=xs, equation=equation)
    got = run_on_wasm(tf, mode, lambda *a: tf.raw_ops.Einsum(inputs=list(a), equation=equation), *xs)
    if mode == "eager":
        assert got.device.endswith("WASM:0"), got.device
    close(got, expected, equation)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize(
    "equation,shapes",
    [c for c in CASES if c.id in ("einsum-dense", "attention-scores", "attention-values", "ellipsis-broadcast", "diagonal")],
)
def test_einsum_gradients_match_cpu(tf, mode, equation, shapes):
    xs = [data(s, seed=i + 5) for i, s in enumerate(shapes)]
    f = einsum_with_grads(tf, equation)
    with tf.device(CPU):
        out_shape = tf.einsum(equation, *xs).shape
        dy = data(out_shape, seed=11)
        expected = f(dy, *xs)
    got = run_on_wasm(tf, mode, f, dy, *xs, scope_eager=True)
    for i, (g, e) in enumerate(zip(got, expected)):
        close(g, e, f"{equation}: output {i}")


@pytest.mark.parametrize(
    "equation,shapes,message",
    [
        ("ab,bc->ac", [[2, 3], [4, 5]], "label 'b' is 3 elsewhere"),
        ("...ab,...bc->ac", [[5, 2, 3], [5, 3, 4]], "no '...'"),
    ],
)
def test_einsum_shape_errors_are_clear(tf, equation, shapes, message):
    xs = [data(s, seed=1) for s in shapes]
    with pytest.raises(tf.errors.InvalidArgumentError, match="Einsum") as caught:
        with tf.device(WASM):
            tf.raw_ops.Einsum(inputs=xs, equation=equation)
    assert message in str(caught.value)
    # The device (and the CPU) keep working after the error.
    with tf.device(WASM):
        again = tf.raw_ops.Einsum(inputs=[data([2, 3], 1), data([3, 4], 2)], equation="ab,bc->ac")
    assert again.device.endswith("WASM:0")

