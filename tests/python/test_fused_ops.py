"""TensorFlow's fused products ``_FusedMatMul`` and ``_FusedConv2D`` on WASM vs TF's CPU.

A graph pass rewrites ``MatMul``/``Conv2D`` + ``BiasAdd`` (+ an activation)
into these ops; they have no Python wrapper, so the tests call them through
TensorFlow's op registry: eagerly with ``execute``, and inside a
tf.function pinned to the WASM device with soft placement off (a node
without a WASM kernel fails rather than running on the CPU), where the run
metadata must show the op on WASM.

Every ``fused_ops`` list the WASM kernels implement is compared with the CPU
device on odd shapes (1×1, primes, a batch of 0, an empty inner dimension,
every transpose; strides, dilations and SAME/VALID/EXPLICIT padding for the
convolution), against the CPU's own fused op where it implements the list,
else (``_FusedConv2D`` with ``Tanh``/``Sigmoid``) against the unfused ops.
TensorFlow registers no gradient for either op, so only forward values are
compared (``test_tensorflow_has_no_gradient_for_them`` notices the day one
appears). Lists the kernels do not implement, and channels-first data, are
refused when the kernel is built.

Tolerance: as ``test_ops_conv.py``, rtol=1e-4 with atol=1e-4 × the largest
expected magnitude (sums in a different order).
"""

import numpy as np
import pytest

from tfwasm_support import WASM, on_wasm, ops_on_wasm, run_on_wasm
from tfwasm_support import random_data as data

CPU = "/CPU:0"
ALPHA = 0.3  # LeakyRelu's slope: not TensorFlow's default, so the attribute must be read

ACTIVATIONS = ["Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid"]
BIAS_LISTS = [["BiasAdd"]] + [["BiasAdd", a] for a in ACTIVATIONS]
#: What TensorFlow's CPU ``_FusedConv2D`` implements (no Tanh, no Sigmoid).
CPU_CONV_ACTIVATIONS = ["Relu", "Relu6", "Elu", "LeakyRelu"]


def list_id(fused_ops):
    return "+".join(fused_ops)


def fused_op(tf, op, inputs, args, fused_ops, **attrs):
    """``op`` (``_FusedMatMul`` or ``_FusedConv2D``) on ``inputs`` and the
    extra inputs ``args``: eagerly through ``execute``, or, while a
    tf.function is traced, as a node of its graph."""
    from tensorflow.python.eager import context, execute
    from tensorflow.python.framework import op_def_library

    attrs = dict(attrs, fused_ops=list(fused_ops), epsilon=1e-3, leakyrelu_alpha=ALPHA)
    if not tf.executing_eagerly():
        names = ("a", "b") if op == "_FusedMatMul" else ("input", "filter")
        kwargs = dict(zip(names, inputs), args=list(args), **attrs)
        if op == "_FusedConv2D":
            # `args` is typed by a list (TArgs), so num_args is not inferred;
            # the helper fills in none of these ops' defaults.
            kwargs.update(host_args=[], num_args=len(args), filter_format="HWIO", use_cudnn_on_gpu=False)
        _, _, _, outputs = op_def_library._apply_op_helper(op, name=op.lstrip("_"), **kwargs)
        return outputs[0]
    dtype = tf.float32.as_datatype_enum
    flat = ["T", dtype, "num_args", len(args)]
    if op == "_FusedConv2D":
        flat += ["TArgs", [dtype] * len(args), "num_host_args", 0]
    for key, value in attrs.items():
        flat += [key, value]
    return execute.execute(op, 1, list(inputs) + list(args), tuple(flat), context.context())[0]


def close(got, expected, rtol=1e-4, what=""):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape, f"{what}: {got.shape} vs {expected.shape}"
    atol = rtol * max(1.0, float(np.max(np.abs(expected)))) if expected.size else 0.0
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, err_msg=what)


def on_device(tf, mode, fn, *args):
    """``fn(*args)`` on WASM (eagerly, or as a pinned tf.function whose
    graph must hold the fused op on WASM) and the op's result."""
    if mode == "eager":
        with tf.device(WASM):
            result = fn(*args)
        assert on_wasm(result), f"ran on {result.device}"
        return result
    result = run_on_wasm(tf, mode, fn, *args)
    return result


def ran_on_wasm(tf, fn, *args):
    """The op types a pinned tf.function of ``fn`` ran on WASM."""

    @tf.function
    def pinned(*inner):
        with tf.device(WASM):
            return fn(*inner)

    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        return ops_on_wasm(tf, pinned, *args)[1]
    finally:
        tf.config.set_soft_device_placement(soft)


def activation(tf, name, x):
    return {
        None: lambda v: v,
        "Relu": tf.nn.relu,
        "Relu6": tf.nn.relu6,
        "Elu": tf.nn.elu,
        "LeakyRelu": lambda v: tf.nn.leaky_relu(v, alpha=ALPHA),
        "Tanh": tf.tanh,
        "Sigmoid": tf.sigmoid,
    }[name](x)


def test_tensorflow_has_no_gradient_for_them(tf):
    from tensorflow.python.framework import ops

    for op in ("_FusedMatMul", "_FusedConv2D"):
        with pytest.raises(LookupError):
            ops.gradient_registry.lookup(op)


# ----------------------------------------------------------- _FusedMatMul

MATMUL_SHAPES = [
    # m, k, n
    (1, 1, 1),
    (0, 5, 3),  # a batch of 0
    (7, 13, 5),
    (3, 0, 4),  # an empty inner dimension: the bias through the activation
    (31, 17, 1),
    (151, 97, 109),  # split across the pool by rows
    (41, 181, 233),  # by columns
]


def matmul_inputs(m, k, n, transpose_a, transpose_b, seed=1):
    a = data([k, m] if transpose_a else [m, k], seed, scale=1.0)
    b = data([n, k] if transpose_b else [k, n], seed + 1, scale=1.0)
    return a, b, data([n], seed + 2)


@pytest.mark.parametrize("fused_ops", BIAS_LISTS, ids=list_id)
def test_fused_matmul_matches_cpu(tf, mode, fused_ops):
    for m, k, n in MATMUL_SHAPES:
        for transpose_a in (False, True):
            for transpose_b in (False, True):
                a, b, bias = (tf.constant(v) for v in matmul_inputs(m, k, n, transpose_a, transpose_b))
                flags = dict(transpose_a=transpose_a, transpose_b=transpose_b)

                def op(a, b, bias):
                    return fused_op(tf, "_FusedMatMul", [a, b], [bias], fused_ops, **flags)

                with tf.device(CPU):
                    if k == 0:
                        # The CPU's fused kernel returns zeros for an empty
                        # inner dimension, skipping the bias and activation
                        # its unfused ops apply to the zero product; the
                        # node stands for those ops, so they are the reference.
                        name = fused_ops[1] if len(fused_ops) > 1 else None
                        expected = activation(tf, name, tf.nn.bias_add(tf.matmul(a, b, **flags), bias))
                    else:
                        expected = op(a, b, bias)
                got = on_device(tf, mode, op, a, b, bias)
                close(got.numpy(), expected.numpy(), what=f"{m}x{k}x{n} {flags} {fused_ops}")
    if mode == "function":
        assert "_FusedMatMul" in ran_on_wasm(tf, op, a, b, bias)


def test_fused_matmul_is_matmul_bias_add_activation(tf):
    """The fused node against the three ops it replaces, all on WASM: the
    same kernels' arithmetic, so the values agree to the last bit."""
    a, b, bias = (tf.constant(v) for v in matmul_inputs(64, 784, 128, False, False, seed=7))
    with tf.device(WASM):
        for fused_ops in BIAS_LISTS:
            name = fused_ops[1] if len(fused_ops) > 1 else None
            fused = fused_op(tf, "_FusedMatMul", [a, b], [bias], fused_ops)
            unfused = activation(tf, name, tf.nn.bias_add(tf.matmul(a, b), bias))
            assert on_wasm(fused) and on_wasm(unfused)
            np.testing.assert_array_equal(fused.numpy(), unfused.numpy(), err_msg=str(fused_ops))


def test_fused_matmul_refuses_unimplemented_lists(tf):
    a, b, bias = (tf.constant(v) for v in matmul_inputs(2, 3, 4, False, False))
    for fused_ops in (["BiasAdd", "Add"], ["BiasAdd", "GeluExact"], ["Relu"]):
        with pytest.raises(tf.errors.UnimplementedError, match=r"_FusedMatMul: fusion \[" + ",".join(fused_ops)):
            with tf.device(WASM):
                fused_op(tf, "_FusedMatMul", [a, b], [bias], fused_ops)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one extra argument"):
        with tf.device(WASM):
            fused_op(tf, "_FusedMatMul", [a, b], [bias, bias], ["BiasAdd", "Relu"])


def test_fused_matmul_checks_the_bias(tf):
    a, b, _ = (tf.constant(v) for v in matmul_inputs(2, 3, 4, False, False))
    with pytest.raises(tf.errors.InvalidArgumentError, match="bias must be a vector of 4 values"):
        with tf.device(WASM):
            fused_op(tf, "_FusedMatMul", [a, b], [tf.constant(data([3], 1))], ["BiasAdd", "Relu"])


# ----------------------------------------------------------- _FusedConv2D

CONV_CASES = [
    # input, filter, strides, padding (or explicit pairs), dilations
    pytest.param([1, 1, 1, 1], [1, 1, 1, 1], 1, "VALID", 1, id="1x1-single"),
    pytest.param([2, 7, 5, 3], [3, 3, 3, 4], 1, "SAME", 1, id="primes-same"),
    pytest.param([2, 7, 5, 3], [3, 3, 3, 4], 1, "VALID", 1, id="primes-valid"),
    pytest.param([3, 11, 13, 5], [1, 1, 5, 7], 1, "VALID", 1, id="pointwise"),
    pytest.param([3, 11, 13, 5], [1, 1, 5, 7], 2, "SAME", 1, id="pointwise-stride2"),
    pytest.param([2, 13, 11, 3], [3, 3, 3, 2], 2, "SAME", 1, id="stride2-same"),
    pytest.param([1, 13, 11, 3], [3, 3, 3, 2], 1, "SAME", 2, id="dilation2-same"),
    pytest.param([1, 13, 11, 3], [3, 2, 3, 2], [2, 1], "VALID", [2, 3], id="dilation23-valid"),
    pytest.param([0, 7, 7, 3], [3, 3, 3, 4], 1, "SAME", 1, id="batch0"),
    pytest.param([2, 6, 5, 2], [3, 2, 2, 3], [2, 1], [[0, 0], [1, 2], [0, 3], [0, 0]], 1, id="explicit"),
    pytest.param([4, 14, 14, 8], [3, 3, 8, 16], 1, "VALID", 1, id="keras-conv2"),
    pytest.param([4, 15, 17, 16], [1, 1, 16, 8], 1, "VALID", 1, id="pointwise-pool"),
]


def conv_attrs(strides, padding, dilations):
    pair = lambda v: [v, v] if np.isscalar(v) else list(v)
    attrs = dict(strides=[1, *pair(strides), 1], dilations=[1, *pair(dilations), 1], data_format="NHWC")
    if isinstance(padding, str):
        return dict(attrs, padding=padding, explicit_paddings=[])
    return dict(attrs, padding="EXPLICIT", explicit_paddings=[p for pair_ in padding for p in pair_])


def conv_args(fused_ops, channels, seed):
    if fused_ops[0] == "FusedBatchNorm":
        scale, offset, mean = (data([channels], seed + i) for i in range(3))
        variance = np.abs(data([channels], seed + 3)) + 0.5
        return [scale, offset, mean, variance]
    return [data([channels], seed)]


CONV_LISTS = BIAS_LISTS + [["FusedBatchNorm"]] + [["FusedBatchNorm", a] for a in ACTIVATIONS]


@pytest.mark.parametrize("input_shape,filter_shape,strides,padding,dilations", CONV_CASES)
def test_fused_conv2d_matches_cpu(tf, mode, input_shape, filter_shape, strides, padding, dilations):
    x = tf.constant(data(input_shape, 1))
    w = tf.constant(data(filter_shape, 2, scale=1.0))
    attrs = conv_attrs(strides, padding, dilations)
    for fused_ops in CONV_LISTS:
        args = [tf.constant(v) for v in conv_args(fused_ops, filter_shape[3], 3)]

        def op(x, w, *args):
            return fused_op(tf, "_FusedConv2D", [x, w], args, fused_ops, **attrs)

        with tf.device(CPU):
            if len(fused_ops) == 1 or fused_ops[1] in CPU_CONV_ACTIVATIONS:
                expected = op(x, w, *args)
            else:
                # The CPU's fused op refuses Tanh and Sigmoid: the ops the
                # fused node stands for.
                expected = activation(tf, fused_ops[1], op_without_activation(tf, fused_ops[0], x, w, args, attrs))
        got = on_device(tf, mode, op, x, w, *args)
        close(got.numpy(), expected.numpy(), what=f"{fused_ops}")
    if mode == "function":
        assert "_FusedConv2D" in ran_on_wasm(tf, op, x, w, *args)


def op_without_activation(tf, first, x, w, args, attrs):
    """The CPU's ``_FusedConv2D`` with ``fused_ops = [first]``."""
    return fused_op(tf, "_FusedConv2D", [x, w], args, [first], **attrs)


def test_fused_conv2d_is_conv2d_bias_add_activation(tf):
    """As for the product: fused and unfused on WASM agree to the last bit."""
    x = tf.constant(data([4, 28, 28, 3], 4))
    w = tf.constant(data([3, 3, 3, 16], 5, scale=1.0))
    bias = tf.constant(data([16], 6))
    with tf.device(WASM):
        for fused_ops in BIAS_LISTS:
            name = fused_ops[1] if len(fused_ops) > 1 else None
            fused = fused_op(tf, "_FusedConv2D", [x, w], [bias], fused_ops, **conv_attrs(1, "SAME", 1))
            unfused = activation(tf, name, tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), bias))
            assert on_wasm(fused) and on_wasm(unfused)
            np.testing.assert_array_equal(fused.numpy(), unfused.numpy(), err_msg=str(fused_ops))


def test_fused_conv2d_refuses_what_it_does_not_implement(tf):
    x = tf.constant(data([1, 5, 5, 3], 1))
    w = tf.constant(data([3, 3, 3, 4], 2))
    bias = tf.constant(data([4], 3))
    attrs = conv_attrs(1, "SAME", 1)
    with pytest.raises(tf.errors.UnimplementedError, match=r"_FusedConv2D: fusion \[BiasAdd,Add,Relu\]"):
        with tf.device(WASM):
            fused_op(tf, "_FusedConv2D", [x, w], [bias], ["BiasAdd", "Add", "Relu"], **attrs)
    with pytest.raises(tf.errors.UnimplementedError, match="NHWC"):
        with tf.device(WASM):
            nchw = tf.constant(data([1, 3, 5, 5], 1))
            fused_op(tf, "_FusedConv2D", [nchw, w], [bias], ["BiasAdd"], **dict(attrs, data_format="NCHW"))
    with pytest.raises(tf.errors.InvalidArgumentError, match="bias must be a vector of 4 values"):
        with tf.device(WASM):
            fused_op(tf, "_FusedConv2D", [x, w], [tf.constant(data([5], 3))], ["BiasAdd"], **attrs)
    with pytest.raises(tf.errors.InvalidArgumentError, match="four extra arguments"):
        with tf.device(WASM):
            fused_op(tf, "_FusedConv2D", [x, w], [bias], ["FusedBatchNorm"], **attrs)
