"""The op sweep: every kernel tfwasm registers, on WASM and on TensorFlow's CPU device.

For each op the plugin registered for the device type (read back from
TensorFlow's own kernel registry, so nothing registered can be skipped),
the sweep builds inputs of several shapes (0-size, 1×1, primes,
broadcasting, larger), runs the op on ``/CPU:0`` and twice on
``/device:WASM:0`` with soft placement off (an op without a WASM kernel
fails rather than quietly running on CPU), and checks

* the result lives on the WASM device,
* it matches the CPU result within the op's stated tolerance
  (``|wasm - cpu| <= atol + rtol·|cpu|``; integers, booleans and the
  stateless random ops must match exactly),
* the two WASM runs are bit-identical (determinism).

Ops registered for float16/bfloat16 too (Keras' mixed precision) run
each of their float32 cases again with the ``T`` inputs in each narrow
type, within a tolerance widened by the narrow type's precision (see
``narrow_tolerance``). Ops that only move elements and are registered
for float64, int64, uint8, uint64 or bool too run them again in each of
those, exactly (see ``MOVED_TYPES``).

It prints one row per case: op, dtype, input shapes, max abs error, and
pass/FAIL, then a summary. A registered op with no case here is a
failure too ("no sweep case"), so every kernel added must come with one.

    python -m tfwasm sweep [--ops Conv2D,MaxPool] [--seed 0] [--quiet]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

#: Tolerances by kind of op (rtol, atol).
EXACT = (0.0, 0.0)
ELEMENTWISE = (1e-5, 1e-6)
TRANSCENDENTAL = (2e-5, 1e-6)
REDUCTION = (1e-5, 1e-4)  # sums that cancel lose relative precision
PRODUCT = (1e-4, 1e-4)  # matmul, convolution: summation order differs from oneDNN


@dataclass
class Case:
    """One invocation: raw-op keyword arguments (arrays become tensors)."""

    args: dict[str, Any]
    #: Which outputs to compare (None: all). Some outputs are scratch space
    #: whose content TensorFlow leaves unspecified.
    compare: tuple[int, ...] | None = None


@dataclass
class Spec:
    cases: Callable[[Any, np.random.Generator], list[Case]]
    tol: tuple[float, float] = ELEMENTWISE
    #: For an op TensorFlow has no ``tf.raw_ops`` entry for (our own, made
    #: by the graph pass): builds a ``tf.function`` of the case's arguments
    #: in which the pass creates the op on WASM. The CPU runs the same
    #: function unrewritten, and the case fails unless the op ran on WASM.
    via: Callable[[Any], Callable] | None = None
    #: For an op the graph pass always rewrites (``via`` drives it): the op
    #: that must run instead.
    runs_as: str | None = None


@dataclass
class Row:
    op: str
    dtype: str
    shapes: str
    error: float | None
    ok: bool
    note: str = ""


# ---------------------------------------------------------------------------
# Input helpers


def f32(rng, shape, lo=-3.0, hi=3.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def boolean(rng, shape):
    return rng.random(size=shape) < 0.5


def ints(rng, shape, lo, hi, dtype=np.int32):
    return rng.integers(lo, hi, size=shape).astype(dtype)


UNARY_SHAPES = [(0,), (1, 1), (7, 13), (3, 5, 17), (129, 257)]
BINARY_SHAPES = [
    ((0, 3), (0, 3)),
    ((0, 3), (1, 3)),
    ((1, 1), (1, 1)),
    ((7, 13), (7, 13)),
    ((3, 1, 5), (4, 1)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((5,), (3, 5)),
    ((3, 1), (1, 4)),
    ((129, 257), (257,)),
]
SAME_SHAPES = [(0, 4), (1, 1), (7, 13), (129, 257)]


def unary(lo=-3.0, hi=3.0, **attrs):
    def cases(tf, rng):
        return [Case({"x": f32(rng, s, lo, hi), **attrs}) for s in UNARY_SHAPES]

    return cases


def activation(lo=-3.0, hi=3.0, **attrs):
    def cases(tf, rng):
        return [Case({"features": f32(rng, s, lo, hi), **attrs}) for s in UNARY_SHAPES]

    return cases


def binary(x_range=(-3.0, 3.0), y_range=(-3.0, 3.0), rounded=False, make=None):
    def cases(tf, rng):
        out = []
        for sa, sb in BINARY_SHAPES:
            x, y = f32(rng, sa, *x_range), f32(rng, sb, *y_range)
            if rounded:  # so equal values occur
                x, y = np.round(x), np.round(y)
            if make:
                x, y = make(rng, x, y)
            out.append(Case({"x": x, "y": y}))
        return out

    return cases


def int_binary(dtype, lo=-50, hi=50, nonzero_y=False, extremes=True):
    """Integer operands; ``extremes`` puts the type's maximum and minimum
    into ``x`` so that Add and Mul overflow (TensorFlow's CPU kernels wrap)."""

    def cases(tf, rng):
        info = np.iinfo(dtype)
        out = []
        for sa, sb in BINARY_SHAPES:
            x, y = ints(rng, sa, lo, hi, dtype), ints(rng, sb, lo, hi, dtype)
            if nonzero_y:
                y = np.where(y == 0, dtype(7), y).astype(dtype)
            if extremes and x.size:
                x.flat[:: max(1, x.size // 3)] = info.max
                x.flat[1 :: max(2, x.size // 2)] = info.min
            out.append(Case({"x": x, "y": y}))
        return out

    return cases


def joined(*makers):
    """The cases of several makers, e.g. float32 and int64 ones of one op."""

    def cases(tf, rng):
        return [c for make in makers for c in make(tf, rng)]

    return cases


def logical_binary(tf, rng):
    return [Case({"x": boolean(rng, sa), "y": boolean(rng, sb)}) for sa, sb in BINARY_SHAPES]


def grad_pair(first, second, second_range=(-3.0, 3.0), **attrs):
    """Same-shape gradient ops: (upstream gradient, saved forward value)."""

    def cases(tf, rng):
        return [Case({first: f32(rng, s), second: f32(rng, s, *second_range), **attrs}) for s in SAME_SHAPES]

    return cases


def y_dy(y_range=(-3.0, 3.0)):
    def cases(tf, rng):
        return [Case({"y": f32(rng, s, *y_range), "dy": f32(rng, s)}) for s in SAME_SHAPES]

    return cases


def with_zeros(rng, x, y):
    y = y.copy()
    if y.size:
        y.flat[:: max(1, y.size // 5)] = 0.0
    return x, y


def away_from_zero(rng, x, y):
    return x, np.where(np.abs(y) < 0.25, np.float32(0.5), y).astype(np.float32)


# ---------------------------------------------------------------------------
# Op cases


#: float32 values at the edges of float16 and bfloat16: halfway between two
#: float16 values (1 + 2^-11, 1 + 3·2^-11) and two bfloat16 values
#: (1 + 2^-8), beyond float16's range, float16 subnormals and underflow.
NARROW_EDGES = np.array(
    [1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 3 * 2**-8, 65504, 65520, 70000, -1e30, 3e38,
     2**-24, 2**-25, 3 * 2**-26, 1e-40, 0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 0.1, -2.7],
    np.float32,
)


def cast_cases(tf, rng):
    x = f32(rng, (7, 13), -50, 50)
    return [
        Case({"x": x, "DstT": tf.int32}),
        Case({"x": x, "DstT": tf.int64}),
        Case({"x": np.round(f32(rng, (7, 13), -1, 1)), "DstT": tf.bool}),
        Case({"x": ints(rng, (7, 13), -100, 100, np.int64), "DstT": tf.float32}),
        Case({"x": ints(rng, (7, 13), -100, 100, np.int32), "DstT": tf.float32}),
        Case({"x": boolean(rng, (7, 13)), "DstT": tf.float32}),
        Case({"x": ints(rng, (7, 13), 0, 256, np.uint8), "DstT": tf.float32}),
        # float64 → float32: ties, overflow to infinity, subnormals, NaN.
        Case({"x": np.array([1 + 2**-24, 1 + 3 * 2**-24, 3.5e38, -1e300, 1e-40, 1e-50, np.nan, -0.0, 0.1], np.float64), "DstT": tf.float32}),
        Case({"x": rng.standard_normal((7, 13)), "DstT": tf.float32}),
        Case({"x": f32(rng, (0, 3)), "DstT": tf.int64}),
        # Keras' step counter (int32 → int64) and seed state (int64 → int32: the low 32 bits).
        Case({"x": ints(rng, (7, 13), -(2**31), 2**31 - 1, np.int32), "DstT": tf.int64}),
        Case({"x": np.array(7, np.int32), "DstT": tf.int64}),
        Case({"x": ints(rng, (7, 13), -(2**40), 2**40, np.int64), "DstT": tf.int32}),
        Case({"x": np.array([0, -1, 2**31, 2**32 + 5, -(2**31) - 1, 2**63 - 1], np.int64), "DstT": tf.int32}),
        Case({"x": ints(rng, (0, 3), 0, 1, np.int64), "DstT": tf.int32}),
        # Mixed precision: float32 to and from float16/bfloat16, rounding
        # to nearest (or, with Truncate, bfloat16 dropping the low bits);
        # ties, overflow to infinity, subnormals, NaN and signed zeros.
        *[Case({"x": x, "DstT": t}) for t in (tf.float16, tf.bfloat16)],
        *[Case({"x": NARROW_EDGES, "DstT": t}) for t in (tf.float16, tf.bfloat16)],
        Case({"x": NARROW_EDGES, "DstT": tf.bfloat16, "Truncate": True}),
        Case({"x": f32(rng, (0, 3)), "DstT": tf.float16}),
        *[Case({"x": f32(rng, (7, 13), -50, 50).astype(t), "DstT": tf.float32}) for t in (np.float16, tf.bfloat16.as_numpy_dtype)],
        *[Case({"x": NARROW_EDGES.astype(t), "DstT": tf.float32}) for t in (np.float16, tf.bfloat16.as_numpy_dtype)],
        # Labels to the narrow type (Keras' accuracy under mixed precision)
        # and back, through float32 as TensorFlow does: ints beyond 2048
        # round, NaN and infinities become the most negative int.
        *[Case({"x": ints(rng, (7, 13), -5000, 5000, t), "DstT": d}) for t in (np.int32, np.int64) for d in (tf.float16, tf.bfloat16)],
        *[Case({"x": boolean(rng, (7, 13)), "DstT": d}) for d in (tf.float16, tf.bfloat16)],
        *[Case({"x": NARROW_EDGES.astype(t), "DstT": d}) for t in (np.float16, tf.bfloat16.as_numpy_dtype) for d in (tf.int32, tf.int64, tf.bool)],
        # int32 to int32 (the gradient of Keras' ops.repeat): the input.
        Case({"x": ints(rng, (7, 13), -(2**31), 2**31 - 1, np.int32), "DstT": tf.int32}),
        Case({"x": ints(rng, (0, 3), 0, 1, np.int32), "DstT": tf.int32}),
    ]


def bitcast_cases(tf, rng):
    special = np.array([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, 1e-45, -3.5], np.float32)
    return [Case({"input": f32(rng, s), "type": tf.int32}) for s in UNARY_SHAPES] + [Case({"input": special, "type": tf.int32})]


SELECT_V2_SHAPES = [((0, 3), (0, 3), (0, 3)), ((7, 13), (7, 13), (7, 13)), ((7, 1), (1, 13), (7, 13)), ((), (2, 3), (2, 3)), ((5,), (3, 5), ()), ((129, 1), (129, 257), (257,))]


def select_v2_cases(tf, rng):
    out = [Case({"condition": boolean(rng, c), "t": f32(rng, t), "e": f32(rng, e)}) for c, t, e in SELECT_V2_SHAPES]
    # int32/int64: Keras' ops.take wraps negative indices with them.
    for dtype in (np.int32, np.int64):
        out += [Case({"condition": boolean(rng, c), "t": ints(rng, t, -1000, 1000, dtype), "e": ints(rng, e, -1000, 1000, dtype)}) for c, t, e in SELECT_V2_SHAPES]
    return out


def select_v1_cases(tf, rng):
    """``Select`` (v1): same shapes, a vector condition picking rows, or a scalar condition."""
    # (condition shape, then/else shape)
    shapes = [((0,), (0,)), ((1, 1), (1, 1)), ((7, 13), (7, 13)), ((7,), (7, 13)), ((3,), (3, 5, 2)), ((0,), (0, 4)), ((), (7, 13)), ((), ()), ((129,), (129, 257)), ((129, 257), (129, 257))]
    return [Case({"condition": boolean(rng, c), "x": f32(rng, t), "y": f32(rng, t)}) for c, t in shapes]


REDUCE_CASES = [
    ((7, 13), [0]),
    ((7, 13), [1]),
    ((7, 13), [-1]),
    ((7, 13), [0, 1]),
    ((7, 13), []),
    ((3, 0, 5), [1]),
    ((3, 0, 5), [0]),
    ((2, 3, 5, 7), [1, 3]),
    ((1, 1), [0]),
    ((64, 1031), [1]),
    ((1031, 64), [0]),
]


def reduce_cases(make=f32):
    def cases(tf, rng):
        out = []
        for shape, axes in REDUCE_CASES:
            for keep in (False, True):
                for idx_type in (np.int32, np.int64):
                    out.append(Case({"input": make(rng, shape), "axis": np.array(axes, idx_type), "keep_dims": keep}))
        return out

    return cases


def prod_values(rng, shape):
    return f32(rng, shape, 0.8, 1.2)


def prod_ints(rng, shape):
    # Long rows overflow int32; the product then wraps on both devices.
    return ints(rng, shape, -3, 4, np.int32)


def scan_cases(tf, rng):
    """Running sums/products: every axis (negative too), exclusive and
    reverse, 0-size, a scalar-like 1×1, primes and a large parallel case.
    Values near 1 keep long products finite."""
    out = []
    for shape, axis in [((0, 3), 0), ((1, 1), 1), ((7, 13), 0), ((7, 13), -1), ((3, 5, 17), 1), ((129, 257), 1), ((257, 129), 0), ((5,), 0)]:
        for exclusive in (False, True):
            for reverse in (False, True):
                t = np.int32 if (exclusive ^ reverse) else np.int64
                out.append(Case({"x": f32(rng, shape, 0.5, 1.5), "axis": t(axis), "exclusive": exclusive, "reverse": reverse}))
    return out


#: (image shape, output size) pairs: up, down, one way each, 1×1 in and
#: out, primes, an empty batch, and a large parallel case.
RESIZES = [((2, 4, 4, 3), (8, 8)), ((1, 7, 5, 2), (3, 11)), ((3, 1, 1, 1), (1, 1)), ((1, 1, 1, 4), (5, 3)),
           ((2, 13, 17, 5), (13, 17)), ((0, 4, 4, 1), (2, 2)), ((1, 9, 9, 3), (4, 4)), ((4, 32, 32, 8), (64, 48))]
#: (align_corners, half_pixel_centers): legacy, Keras' (`tf.image.resize`), corners.
RESIZE_MODES = [(False, False), (False, True), (True, False)]


def resize_bilinear_cases(tf, rng):
    out = []
    for i, (shape, size) in enumerate(RESIZES):
        for align, half in RESIZE_MODES:
            images = f32(rng, shape, 0, 255) if i % 2 else ints(rng, shape, 0, 256, np.uint8)
            out.append(Case({"images": images, "size": np.array(size, np.int32), "align_corners": align, "half_pixel_centers": half}))
    return out


def resize_nearest_cases(tf, rng):
    return [
        Case({"images": f32(rng, shape), "size": np.array(size, np.int32), "align_corners": align, "half_pixel_centers": half})
        for shape, size in RESIZES
        for align, half in RESIZE_MODES
    ]


def resize_nearest_grad_cases(tf, rng):
    """Gradients back to the image sizes of [`RESIZES`]: several outputs
    land on one pixel when the resize shrank."""
    return [
        Case({"grads": f32(rng, (shape[0], *size, shape[3])), "size": np.array(shape[1:3], np.int32),
              "align_corners": align, "half_pixel_centers": half})
        for shape, size in RESIZES
        for align, half in RESIZE_MODES
    ]


def projective_transforms(rng, n):
    """Transform rows: identity, a rotation about the centre with a shift, a
    zoom, a projective one, and random ones reaching far outside the image
    (the fill modes' wrap-arounds)."""
    a = 0.6
    rotate = [np.cos(a), -np.sin(a), 3.0, np.sin(a), np.cos(a), -2.0, 0.0, 0.0]
    return np.array([
        [1, 0, 0, 0, 1, 0, 0, 0],
        rotate,
        [0.7, 0, 1.5, 0, 1.3, -0.5, 0, 0],
        [1.1, 0.2, -1, -0.1, 0.9, 2, 0.01, -0.02],
        *[rng.uniform(-3, 3, 6).tolist() + [0, 0] for _ in range(max(0, n - 4))],
    ], np.float32)[:n] if n else np.zeros((0, 8), np.float32)


def projective_transform_cases(tf, rng):
    out = []
    for interpolation in ("NEAREST", "BILINEAR"):
        for mode in ("REFLECT", "WRAP", "CONSTANT", "NEAREST"):
            for images, rows, size in [((6, 7, 9, 3), 6, (7, 9)), ((2, 5, 4, 1), 1, (8, 3)), ((1, 1, 1, 2), 1, (3, 2))]:
                # One row for the batch: the rotation.
                transforms = projective_transforms(rng, rows) if rows > 1 else projective_transforms(rng, 2)[1:]
                out.append(Case({
                    "images": f32(rng, images), "transforms": transforms, "output_shape": np.array(size, np.int32),
                    "fill_value": np.float32(0.5), "interpolation": interpolation, "fill_mode": mode,
                }))
    # An empty batch, and a transform whose projection is 0 on one pixel.
    out.append(Case({
        "images": f32(rng, (0, 4, 4, 2)), "transforms": np.zeros((0, 8), np.float32),
        "output_shape": np.array([3, 3], np.int32), "fill_value": np.float32(0), "interpolation": "BILINEAR", "fill_mode": "REFLECT",
    }))
    out.append(Case({
        "images": f32(rng, (1, 4, 4, 2)), "transforms": np.array([[1, 0, 0, 0, 1, 0, -0.5, 0]], np.float32),
        "output_shape": np.array([4, 4], np.int32), "fill_value": np.float32(-1), "interpolation": "BILINEAR", "fill_mode": "CONSTANT",
    }))
    return out


def resize_bilinear_grad_cases(tf, rng):
    out = []
    for shape, size in RESIZES:
        for align, half in RESIZE_MODES:
            grads = f32(rng, (shape[0], *size, shape[3]))
            out.append(Case({"grads": grads, "original_image": f32(rng, shape), "align_corners": align, "half_pixel_centers": half}))
    return out


def in_top_k_cases(tf, rng):
    """Rounded predictions so ties straddle the k-th place; a NaN, an
    infinity, targets out of range, k of 0 and beyond the classes."""
    out = []
    for batch, classes, k in [(0, 5, 1), (1, 1, 1), (7, 13, 3), (16, 10, 5), (5, 4, 0), (5, 4, 9), (300, 37, 2)]:
        for t in (np.int32, np.int64):
            predictions = np.round(f32(rng, (batch, classes), -2, 2))
            if batch >= 5:
                predictions[1, 0] = np.nan
                predictions[2, -1] = np.inf
            targets = ints(rng, (batch,), -1, classes + 1, t)
            out.append(Case({"predictions": predictions, "targets": targets, "k": t(k)}))
    return out


def top_k_cases(tf, rng):
    """Rounded values so ties straddle the k-th place; k of 0, 1 and all;
    int32 and int64 k and indices (the attributes of TensorFlow 2.16+)."""
    out = []
    for shape, k in [((0,), 0), ((1, 1), 1), ((7, 13), 3), ((7, 13), 13), ((3, 5, 17), 0), ((129, 257), 5), ((4, 1000), 1)]:
        for t in (np.int32, np.int64):
            out.append(Case({"input": np.round(f32(rng, shape)), "k": t(k), "sorted": True, "index_type": tf.as_dtype(t)}))
    return out


def scatter_nd_cases(tf, rng):
    """Whole elements, rows and blocks; repeated indices (they add up);
    0-size updates; a scalar-sliced vector; int32 and int64 indices."""
    out = []
    for shape, depth, count in [((8,), 1, 5), ((8,), 1, 20), ((6, 4), 1, 9), ((5, 3, 4), 2, 7), ((4, 3), 2, 0), ((7, 13), 2, 40), ((4000, 16), 1, 3000)]:
        for t in (np.int32, np.int64):
            indices = np.stack([rng.integers(0, shape[d], count) for d in range(depth)], axis=-1).astype(t)
            out.append(Case({"indices": indices, "updates": f32(rng, (count, *shape[depth:])), "shape": np.array(shape, t)}))
    return out


def range_cases(tf, rng):
    """float32 and int64 ranges up, down, empty and of one element, with a
    step float32 cannot hold exactly (0.1), and 2700 steps of 0.37, where
    a running sum would drift from the CPU's ``start + i·delta``."""
    out = []
    for a, b, d in [(0, 5, 1), (5, 0, -1), (3, 3, 1), (0, 1, 2), (-7, 100, 3), (0, 2, 0.1), (1.5, -2.25, -0.3), (0, 1000, 0.37)]:
        t = np.float32 if any(isinstance(v, float) for v in (a, b, d)) else np.int64
        out.append(Case({"start": t(a), "limit": t(b), "delta": t(d)}))
        if t is np.int64:
            out.append(Case({"start": np.float32(a), "limit": np.float32(b), "delta": np.float32(d)}))
    return out


def arg_cases(tf, rng):
    out = []
    for shape, axis in [((7, 13), 0), ((7, 13), 1), ((7, 13), -1), ((1, 1), 0), ((2, 3, 5), 1), ((64, 1031), 1)]:
        x = np.round(f32(rng, shape) * 2) / 2  # ties happen
        for output_type in (tf.int64, tf.int32):
            out.append(Case({"input": x, "dimension": np.int32(axis), "output_type": output_type}))
    return out


def bool_reduce_cases(tf, rng):
    return reduce_cases(lambda r, s: r.random(size=s) < 0.9)(tf, rng)


def matmul_cases(tf, rng):
    out = []
    # The last is above the split threshold (matmul.rs PARALLEL_MIN_WORK): the pool computes it.
    for (m, k, n) in [(0, 5, 3), (1, 1, 1), (7, 13, 5), (5, 0, 3), (67, 131, 45), (131, 127, 97)]:
        for ta in (False, True):
            for tb in (False, True):
                a = f32(rng, (k, m) if ta else (m, k))
                b = f32(rng, (n, k) if tb else (k, n))
                out.append(Case({"a": a, "b": b, "transpose_a": ta, "transpose_b": tb}))
    return out


def batch_matmul_cases(tf, rng):
    out = []
    for xs, ys in [((2, 3, 5), (2, 5, 4)), ((1, 3, 5), (4, 5, 2)), ((3, 5), (2, 5, 7)), ((0, 3, 5), (0, 5, 2)), ((2, 2, 7, 13), (2, 1, 13, 5))]:
        for adj_x in (False, True):
            for adj_y in (False, True):
                x = f32(rng, xs[:-2] + (xs[-1], xs[-2]) if adj_x else xs)
                y = f32(rng, ys[:-2] + (ys[-1], ys[-2]) if adj_y else ys)
                out.append(Case({"x": x, "y": y, "adj_x": adj_x, "adj_y": adj_y}))
    return out


EINSUM_CASES = [
    ("ab,bc->ac", [(7, 13), (13, 5)]),
    ("abc,cde->abde", [(2, 7, 5), (5, 4, 3)]),
    ("aecd,abcd->acbe", [(2, 5, 3, 4), (2, 7, 3, 4)]),
    ("acbe,aecd->abcd", [(2, 3, 7, 5), (2, 5, 3, 4)]),
    ("...ab,...bc->...ac", [(5, 1, 2, 3), (7, 3, 4)]),
    ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
    ("ab,bc->a", [(2, 3), (3, 4)]),
    ("ab->ba", [(3, 5)]),
    ("i->ii", [(3,)]),
    ("ab,bc->ac", [(1, 1), (1, 1)]),
    ("ab,bc->ac", [(2, 0), (0, 3)]),
    ("abc,acd->abd", [(0, 2, 3), (0, 3, 4)]),
    ("abc,cd->abd", [(4, 64, 96), (96, 80)]),  # above the split threshold: the pool computes it
]


def einsum_cases(tf, rng):
    return [Case({"inputs": [f32(rng, s) for s in shapes], "equation": eq}) for eq, shapes in EINSUM_CASES]


def bias_add_cases(tf, rng):
    return [Case({"value": f32(rng, s), "bias": f32(rng, s[-1:])}) for s in [(4, 7), (2, 3, 5, 6), (0, 3), (1, 1), (129, 257)]]


def bias_add_grad_cases(tf, rng):
    return [Case({"out_backprop": f32(rng, s)}) for s in [(4, 7), (2, 3, 5, 6), (0, 3), (1, 1), (129, 257)]]


def softmax_cases(tf, rng):
    return [Case({"logits": f32(rng, s, -10, 10)}) for s in [(1, 1), (7, 13), (0, 5), (3, 4, 10), (64, 1000)]]


def xent_cases(tf, rng):
    out = []
    for s in [(1, 1), (7, 13), (0, 5), (64, 10)]:
        labels = rng.random(size=s).astype(np.float32)
        labels /= np.maximum(labels.sum(axis=-1, keepdims=True), 1e-6)
        out.append(Case({"features": f32(rng, s, -5, 5), "labels": labels}))
    return out


def sparse_xent_cases(tf, rng):
    out = []
    for s in [(1, 1), (7, 13), (0, 5), (64, 10)]:
        for t in (np.int32, np.int64):
            out.append(Case({"features": f32(rng, s, -5, 5), "labels": ints(rng, s[:1], 0, s[1], t)}))
    return out


CONV_CASES = [
    # input, filter, strides, padding, dilations
    ((2, 9, 11, 3), (3, 3, 3, 5), [1, 1, 1, 1], "SAME", [1, 1, 1, 1]),
    ((2, 9, 11, 3), (3, 3, 3, 5), [1, 1, 1, 1], "VALID", [1, 1, 1, 1]),
    ((2, 9, 11, 3), (3, 3, 3, 5), [1, 2, 2, 1], "SAME", [1, 1, 1, 1]),
    ((1, 13, 7, 2), (2, 4, 2, 3), [1, 1, 1, 1], "SAME", [1, 1, 1, 1]),
    ((2, 9, 11, 3), (3, 3, 3, 4), [1, 1, 1, 1], "SAME", [1, 2, 2, 1]),
    ((2, 8, 8, 4), (1, 1, 4, 6), [1, 1, 1, 1], "VALID", [1, 1, 1, 1]),
    ((0, 5, 5, 2), (3, 3, 2, 2), [1, 1, 1, 1], "SAME", [1, 1, 1, 1]),
    ((32, 28, 28, 1), (3, 3, 1, 8), [1, 1, 1, 1], "SAME", [1, 1, 1, 1]),
]


def conv_cases(tf, rng):
    return [
        Case({"input": f32(rng, i), "filter": f32(rng, f), "strides": s, "padding": p, "dilations": d})
        for i, f, s, p, d in CONV_CASES
    ]


def conv_output_shape(tf, i, f, s, p, d):
    with tf.device("/CPU:0"):
        return tuple(tf.raw_ops.Conv2D(input=np.zeros(i, np.float32), filter=np.zeros(f, np.float32), strides=s, padding=p, dilations=d).shape)


# TensorFlow's CPU backprops reject dilations > 1, so they have no reference there.
BACKPROP_CASES = [c for c in CONV_CASES if c[4] == [1, 1, 1, 1]]


def conv_input_grad_cases(tf, rng):
    return [
        Case({
            "input_sizes": np.array(i, np.int32), "filter": f32(rng, f),
            "out_backprop": f32(rng, conv_output_shape(tf, i, f, s, p, d)), "strides": s, "padding": p, "dilations": d,
        })
        for i, f, s, p, d in BACKPROP_CASES
    ]


def conv_filter_grad_cases(tf, rng):
    return [
        Case({
            "input": f32(rng, i), "filter_sizes": np.array(f, np.int32),
            "out_backprop": f32(rng, conv_output_shape(tf, i, f, s, p, d)), "strides": s, "padding": p, "dilations": d,
        })
        for i, f, s, p, d in BACKPROP_CASES
    ]


DEPTHWISE_CASES = [
    # input, filter [kh, kw, channels, multiplier], strides, padding (the CPU
    # refuses dilations > 1 and unequal strides; the unit tests cover them)
    ((1, 1, 1, 1), (1, 1, 1, 1), [1, 1, 1, 1], "VALID"),
    ((2, 9, 11, 3), (3, 3, 3, 1), [1, 1, 1, 1], "SAME"),
    ((2, 9, 11, 3), (3, 3, 3, 2), [1, 1, 1, 1], "VALID"),
    ((2, 9, 11, 3), (3, 3, 3, 1), [1, 2, 2, 1], "SAME"),
    ((1, 13, 7, 5), (2, 4, 5, 3), [1, 3, 3, 1], "SAME"),
    ((2, 6, 5, 2), (3, 2, 2, 3), [1, 2, 2, 1], [0, 0, 1, 2, 0, 3, 0, 0]),
    ((0, 5, 5, 2), (3, 3, 2, 1), [1, 1, 1, 1], "SAME"),
    ((2, 5, 5, 0), (3, 3, 0, 2), [1, 1, 1, 1], "SAME"),
    ((32, 28, 28, 16), (3, 3, 16, 1), [1, 1, 1, 1], "SAME"),
]


def depthwise_attrs(s, p):
    if isinstance(p, list):
        return {"strides": s, "padding": "EXPLICIT", "explicit_paddings": p}
    return {"strides": s, "padding": p}


def depthwise_cases(tf, rng):
    return [Case({"input": f32(rng, i), "filter": f32(rng, f), **depthwise_attrs(s, p)}) for i, f, s, p in DEPTHWISE_CASES]


def depthwise_output_shape(tf, i, f, s, p):
    with tf.device("/CPU:0"):
        zeros = tf.raw_ops.DepthwiseConv2dNative(
            input=np.zeros(i, np.float32), filter=np.zeros(f, np.float32), **depthwise_attrs(s, p)
        )
        return tuple(zeros.shape)


def depthwise_input_grad_cases(tf, rng):
    return [
        Case({
            "input_sizes": np.array(i, np.int32), "filter": f32(rng, f),
            "out_backprop": f32(rng, depthwise_output_shape(tf, i, f, s, p)), **depthwise_attrs(s, p),
        })
        for i, f, s, p in DEPTHWISE_CASES
    ]


# TensorFlow's CPU kernel leaves the filter gradient of an empty batch
# uninitialised (tfwasm returns zeros), so that case has no reference there.
DEPTHWISE_FILTER_GRAD_CASES = [c for c in DEPTHWISE_CASES if c[0][0] > 0]


def depthwise_filter_grad_cases(tf, rng):
    return [
        Case({
            "input": f32(rng, i), "filter_sizes": np.array(f, np.int32),
            "out_backprop": f32(rng, depthwise_output_shape(tf, i, f, s, p)), **depthwise_attrs(s, p),
        })
        for i, f, s, p in DEPTHWISE_FILTER_GRAD_CASES
    ]


POOL_CASES = [
    ((2, 9, 11, 3), [1, 2, 2, 1], [1, 2, 2, 1], "VALID"),
    ((2, 9, 11, 3), [1, 2, 2, 1], [1, 2, 2, 1], "SAME"),
    ((2, 9, 11, 3), [1, 3, 3, 1], [1, 1, 1, 1], "SAME"),
    ((1, 7, 5, 2), [1, 3, 2, 1], [1, 2, 1, 1], "VALID"),
    ((0, 4, 4, 2), [1, 2, 2, 1], [1, 2, 2, 1], "VALID"),
    ((32, 28, 28, 8), [1, 2, 2, 1], [1, 2, 2, 1], "VALID"),
]


def pool_cases(arg, geometries):
    """``geometries`` (input shape, ksize, strides, padding) as pooling cases,
    the input under the op's name for it (``input``, or AvgPool's ``value``)."""
    def cases(tf, rng):
        return [Case({arg: f32(rng, i), "ksize": k, "strides": s, "padding": p}) for i, k, s, p in geometries]

    return cases


def max_pool_grad_cases(pool, geometries):
    """Gradients of ``pool`` (MaxPool or MaxPool3D) with ties inside windows,
    its forward output from the CPU."""
    def cases(tf, rng):
        out = []
        for i, k, s, p in geometries:
            x = np.round(f32(rng, i) * 2) / 2
            with tf.device("/CPU:0"):
                y = getattr(tf.raw_ops, pool)(input=x, ksize=k, strides=s, padding=p).numpy()
            out.append(Case({"orig_input": x, "orig_output": y, "grad": f32(rng, y.shape), "ksize": k, "strides": s, "padding": p}))
        return out

    return cases


def avg_pool_grad_cases(pool, arg, geometries):
    """Gradients of ``pool`` (AvgPool, whose input is ``arg``, or AvgPool3D)."""
    def cases(tf, rng):
        out = []
        for i, k, s, p in geometries:
            with tf.device("/CPU:0"):
                shape = tuple(getattr(tf.raw_ops, pool)(**{arg: np.zeros(i, np.float32)}, ksize=k, strides=s, padding=p).shape)
            out.append(Case({"orig_input_shape": np.array(i, np.int32), "grad": f32(rng, shape), "ksize": k, "strides": s, "padding": p}))
        return out

    return cases


CONV3D_CASES = [
    # input, filter, strides, padding (the CPU refuses dilations > 1; the
    # unit tests cover them)
    ((1, 1, 1, 1, 1), (1, 1, 1, 1, 1), [1, 1, 1, 1, 1], "VALID"),
    ((2, 5, 6, 7, 3), (2, 3, 3, 3, 4), [1, 1, 1, 1, 1], "SAME"),
    ((2, 5, 6, 7, 3), (2, 3, 3, 3, 4), [1, 1, 1, 1, 1], "VALID"),
    ((1, 7, 5, 6, 2), (3, 2, 3, 2, 3), [1, 2, 1, 2, 1], "SAME"),
    ((1, 4, 5, 4, 2), (3, 3, 3, 2, 2), [1, 3, 3, 3, 1], "VALID"),
    ((2, 4, 4, 4, 4), (1, 1, 1, 4, 5), [1, 1, 1, 1, 1], "VALID"),
    ((0, 3, 3, 3, 2), (2, 2, 2, 2, 2), [1, 1, 1, 1, 1], "SAME"),
    ((4, 8, 16, 16, 3), (3, 3, 3, 3, 8), [1, 1, 1, 1, 1], "SAME"),
]


def conv3d_cases(tf, rng):
    return [Case({"input": f32(rng, i), "filter": f32(rng, f), "strides": s, "padding": p}) for i, f, s, p in CONV3D_CASES]


def conv3d_output_shape(tf, i, f, s, p):
    with tf.device("/CPU:0"):
        return tuple(tf.raw_ops.Conv3D(input=np.zeros(i, np.float32), filter=np.zeros(f, np.float32), strides=s, padding=p).shape)


def conv3d_input_grad_cases(tf, rng):
    return [
        Case({
            "input_sizes": np.array(i, t), "filter": f32(rng, f),
            "out_backprop": f32(rng, conv3d_output_shape(tf, i, f, s, p)), "strides": s, "padding": p,
        })
        for n, (i, f, s, p) in enumerate(CONV3D_CASES)
        for t in [(np.int32, np.int64)[n % 2]]
    ]


def conv3d_filter_grad_cases(tf, rng):
    return [
        Case({
            "input": f32(rng, i), "filter_sizes": np.array(f, np.int32),
            "out_backprop": f32(rng, conv3d_output_shape(tf, i, f, s, p)), "strides": s, "padding": p,
        })
        for i, f, s, p in CONV3D_CASES
    ]


POOL3D_CASES = [
    ((2, 5, 6, 7, 3), [1, 2, 2, 2, 1], [1, 2, 2, 2, 1], "VALID"),
    ((2, 5, 6, 7, 3), [1, 2, 2, 2, 1], [1, 2, 2, 2, 1], "SAME"),
    ((1, 5, 5, 5, 2), [1, 3, 3, 3, 1], [1, 1, 1, 1, 1], "SAME"),
    ((2, 4, 7, 5, 3), [1, 1, 3, 2, 1], [1, 1, 2, 1, 1], "VALID"),
    ((1, 1, 1, 1, 1), [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], "VALID"),
    ((0, 4, 4, 4, 2), [1, 2, 2, 2, 1], [1, 2, 2, 2, 1], "VALID"),
    ((8, 16, 16, 16, 4), [1, 2, 2, 2, 1], [1, 2, 2, 2, 1], "VALID"),
]


BN_SHAPES = [(2, 5, 7, 3), (1, 1, 1, 1), (4, 3, 3, 16), (0, 2, 2, 3)]


def batch_norm_cases(tf, rng):
    out = []
    for s in BN_SHAPES:
        c = s[-1]
        for training in (True, False):
            for factor in ((1.0, 0.5) if training else (1.0,)):
                out.append(Case({
                    "x": f32(rng, s), "scale": f32(rng, (c,), 0.5, 2), "offset": f32(rng, (c,)),
                    "mean": f32(rng, (c,)) if not training or factor != 1.0 else np.zeros(0 if factor == 1.0 else c, np.float32),
                    "variance": f32(rng, (c,), 0.5, 2) if not training or factor != 1.0 else np.zeros(0 if factor == 1.0 else c, np.float32),
                    "epsilon": 1e-3, "exponential_avg_factor": factor, "is_training": training,
                # In inference mode TensorFlow leaves the statistics outputs
                # unspecified; reserve spaces are checked through the gradient op.
                }, compare=(0, 1, 2) if training else (0,)))
    return out


def batch_norm_grad_cases(tf, rng):
    out = []
    for s in BN_SHAPES:
        c = s[-1]
        for training in (True, False):
            x, scale = f32(rng, s), f32(rng, (c,), 0.5, 2)
            mean, var = f32(rng, (c,)), f32(rng, (c,), 0.5, 2)
            with tf.device("/CPU:0"):
                fwd = tf.raw_ops.FusedBatchNormV3(
                    x=x, scale=scale, offset=np.zeros(c, np.float32), mean=mean if not training else np.zeros(0, np.float32),
                    variance=var if not training else np.zeros(0, np.float32), epsilon=1e-3, is_training=training)
            # In inference mode TF's CPU forward leaves reserve_space_1/2
            # uninitialised (garbage, sometimes below -epsilon, whose rsqrt is
            # NaN on both devices); its own gradient is then fed the
            # population statistics, as here.
            saved_mean, saved_var = (fwd[3].numpy(), fwd[4].numpy()) if training else (mean, var)
            out.append(Case({
                "y_backprop": f32(rng, s), "x": x, "scale": scale,
                "reserve_space_1": saved_mean, "reserve_space_2": saved_var, "reserve_space_3": fwd[5].numpy(),
                "epsilon": 1e-3, "is_training": training,
            }, compare=(0, 1, 2)))
    return out


def transpose_cases(tf, rng):
    cases = [((2, 3, 5, 7), [0, 2, 1, 3]), ((2, 3, 5, 7), [3, 2, 1, 0]), ((7, 13), [1, 0]), ((0, 3), [1, 0]), ((1, 1), [1, 0]),
             ((4, 1, 6), [1, 0, 2]), ((129, 257), [1, 0]), ((2, 3, 5), [0, 1, 2])]
    floats = [Case({"x": f32(rng, s), "perm": np.array(p, t)}) for s, p in cases for t in (np.int32, np.int64)]
    # int32 (the gradient of Keras' ops.repeat transposes int32 indices).
    return floats + [Case({"x": ints(rng, s, -(2**31), 2**31 - 1, np.int32), "perm": np.array(p, np.int32)}) for s, p in cases]


def concat_cases(tf, rng):
    cases = [([(2, 3), (2, 5)], 1), ([(2, 3), (4, 3), (0, 3)], 0), ([(2, 3, 5), (2, 1, 5)], -2), ([(1, 1), (1, 1)], 0), ([(7, 13), (7, 13), (7, 13)], 1)]
    return [Case({"values": [f32(rng, s) for s in shapes], "axis": np.int32(axis)}) for shapes, axis in cases]


def pack_cases(tf, rng):
    return [Case({"values": [f32(rng, s) for _ in range(n)], "axis": axis}) for s, n, axis in [((2, 3), 3, 0), ((2, 3), 2, 2), ((0, 3), 2, 1), ((), 4, 0), ((7, 13), 1, -1)]]


def pack_int_bool_cases(tf, rng):
    # int32: tf.stack of shape pieces; bool: Keras' "is initialized" flags.
    shapes = [((), 2, 0), ((), 14, 0), ((2, 3), 3, 1), ((0, 3), 2, 0), ((7, 13), 2, -1)]
    out = [Case({"values": [ints(rng, s, -100, 100) for _ in range(n)], "axis": axis}) for s, n, axis in shapes]
    out += [Case({"values": [boolean(rng, s) for _ in range(n)], "axis": axis}) for s, n, axis in shapes]
    return out


def unpack_cases(tf, rng):
    return [Case({"value": f32(rng, s), "num": s[axis], "axis": axis}) for s, axis in [((3, 2, 5), 0), ((3, 2, 5), 1), ((3, 2, 5), -1), ((2, 0), 0), ((1, 1), 1)]]


def split_cases(tf, rng):
    cases = [((6, 4), 2, 0), ((6, 4), 4, 1), ((3, 10, 5), 5, -2), ((0, 6), 3, 1), ((1, 1), 1, 0)]
    return [Case({"axis": np.array(axis, np.int32), "value": f32(rng, s), "num_split": n}) for s, n, axis in cases]


def split_v_cases(tf, rng):
    cases = [((7, 3), [2, 5], 0), ((7, 3), [1, -1, 1], 1), ((2, 11, 2), [3, 0, 8], 1), ((0, 4), [1, 3], -1), ((1, 1), [1], 0)]
    return [
        Case({"value": f32(rng, s), "size_splits": np.array(z, t), "axis": np.array(axis, np.int32), "num_split": len(z)})
        for s, z, axis in cases
        for t in (np.int32, np.int64)
    ]


def slice_cases(tf, rng):
    cases = [((7, 13), [1, 2], [3, 4]), ((7, 13), [0, 5], [-1, -1]), ((2, 3, 5), [1, 0, 2], [1, 3, 2]), ((7, 13), [3, 3], [0, 2]), ((1, 1), [0, 0], [1, 1])]
    return [Case({"input": f32(rng, s), "begin": np.array(b, t), "size": np.array(z, t)}) for s, b, z in cases for t in (np.int32, np.int64)]


# (shape, begin, end, strides, masks)
STRIDED = [
    ((7, 13), [1, 2], [5, 11], [1, 3], {}),
    ((7, 13), [-1, 0], [0, 13], [-1, 2], {}),
    ((7, 13), [0, 4], [0, 0], [1, 1], {"begin_mask": 1, "end_mask": 3}),
    ((2, 3, 5), [1], [2], [1], {"shrink_axis_mask": 1}),
    ((2, 3, 5), [0, 1], [0, 2], [1, 1], {"ellipsis_mask": 1, "shrink_axis_mask": 2}),
    ((2, 3, 5), [0, 0, 1], [0, 0, 4], [1, 1, 1], {"new_axis_mask": 2, "begin_mask": 1, "end_mask": 1}),
    ((6,), [5], [-7], [-2], {}),
    ((0, 4), [0, 1], [0, 3], [1, 1], {"begin_mask": 1, "end_mask": 1}),
]


def strided_slice_cases(tf, rng):
    return [
        Case({"input": f32(rng, s), "begin": np.array(b, np.int32), "end": np.array(e, np.int32), "strides": np.array(st, np.int32), **m})
        for s, b, e, st, m in STRIDED
    ]


def strided_slice_int_cases(tf, rng):
    out = [
        Case({"input": ints(rng, s, -100, 100), "begin": np.array(b, t), "end": np.array(e, t), "strides": np.array(st, t), **m})
        for s, b, e, st, m in STRIDED for t in (np.int32, np.int64)
    ]
    # shape[0] of a shape vector, as Keras' train step takes the batch size.
    out.append(Case({"input": np.array([32, 28, 28, 1], np.int32), "begin": np.array([0], np.int32), "end": np.array([1], np.int32),
                     "strides": np.array([1], np.int32), "shrink_axis_mask": 1}))
    return out


def strided_slice_grad_cases(tf, rng):
    out = []
    for s, b, e, st, m in STRIDED:
        with tf.device("/CPU:0"):
            dy_shape = tuple(tf.raw_ops.StridedSlice(input=np.zeros(s, np.float32), begin=np.array(b, np.int32), end=np.array(e, np.int32), strides=np.array(st, np.int32), **m).shape)
        out.append(Case({"shape": np.array(s, np.int32), "begin": np.array(b, np.int32), "end": np.array(e, np.int32), "strides": np.array(st, np.int32), "dy": f32(rng, dy_shape), **m}))
    return out


def tile_cases(tf, rng):
    cases = [((2, 3), [2, 3]), ((7, 13), [1, 1]), ((2, 1, 3), [1, 4, 1]), ((0, 3), [2, 2]), ((3,), [0]), ((1, 1), [5, 7])]
    return [Case({"input": f32(rng, s), "multiples": np.array(m, t)}) for s, m in cases for t in (np.int32, np.int64)]


PADS = [((2, 3), [[1, 2], [0, 3]]), ((7, 13), [[0, 0], [0, 0]]), ((2, 3, 4, 5), [[0, 0], [1, 1], [2, 0], [0, 0]]), ((0, 3), [[1, 1], [1, 1]]), ((1, 1), [[3, 0], [0, 3]])]


def pad_cases(tf, rng):
    return [Case({"input": f32(rng, s), "paddings": np.array(p, t)}) for s, p in PADS for t in (np.int32, np.int64)]


def pad_v2_cases(tf, rng):
    return [Case({"input": f32(rng, s), "paddings": np.array(p, np.int32), "constant_values": np.float32(1.5)}) for s, p in PADS]


def tensor_scatter_update_cases(tf, rng):
    out = []
    # (tensor shape, indices shape): rows, single elements, a repeated
    # index (the last update wins), no indices, a 1×1 tensor.
    for shape, ind_shape, dup in [((7, 5), (3, 1), False), ((7, 5), (4, 2), False), ((7, 5), (6, 1), True),
                                  ((3, 4, 5), (2, 2), False), ((7, 5), (0, 1), False), ((1, 1), (1, 2), False)]:
        depth = ind_shape[-1]
        idx = np.stack([rng.integers(0, shape[j], ind_shape[:-1]) for j in range(depth)], axis=-1)
        if dup:
            idx[-1] = idx[0]
        updates = f32(rng, ind_shape[:-1] + shape[depth:])
        for t in (np.int32, np.int64):
            out.append(Case({"tensor": f32(rng, shape), "indices": idx.astype(t), "updates": updates}))
        # bool, as Keras' loss scaling marks finite embedding rows.
        out.append(Case({"tensor": boolean(rng, shape), "indices": idx.astype(np.int32), "updates": boolean(rng, updates.shape)}))
    return out


def fill_cases(tf, rng):
    return [
        Case({"dims": np.array(d, t), "value": v})
        for d in [[2, 3], [0, 4], [], [7, 13, 3]]
        for t in (np.int32, np.int64)
        for v in (np.float32(2.5), np.bool_(True))
    ]


def gather_cases(tf, rng):
    out = []
    for ps, ishape, axis, batch_dims in [((7, 13), (5,), 0, 0), ((7, 13), (2, 3), 1, 0), ((7, 13), (0,), 0, 0), ((3, 4, 5), (3, 2), 1, 1), ((1000, 64), (32, 20), 0, 0)]:
        for t in (np.int32, np.int64):
            idx = ints(rng, ishape, 0, ps[axis], t)
            out.append(Case({"params": f32(rng, ps), "indices": idx, "axis": np.int32(axis), "batch_dims": batch_dims}))
    return out


def unsorted_segment_sum_cases(tf, rng):
    out = []
    # (data shape, rank of segment_ids, num_segments); ids in [-1, num_segments): negative ones drop their row.
    cases = [((7, 13), 1, 5), ((1, 1), 1, 1), ((0, 3), 1, 4), ((4, 3, 5), 2, 6), ((6,), 1, 0), ((640, 64), 1, 1000), ((2000, 67), 1, 3), ((30000, 3), 1, 100)]
    for shape, id_rank, num in cases:
        for t, tn in ((np.int32, np.int32), (np.int64, np.int64), (np.int32, np.int64)):
            ids = ints(rng, shape[:id_rank], -1, max(num, 0), t)
            out.append(Case({"data": f32(rng, shape), "segment_ids": ids, "num_segments": tn(num)}))
    return out


def reverse_v2_cases(tf, rng):
    cases = [((7, 13), [0]), ((7, 13), [-1]), ((7, 13), [0, 1]), ((7, 13), []), ((1, 1), [1]), ((0, 3), [0]), ((), []),
             ((2, 3, 5, 7), [1, 3]), ((4, 1, 6), [-3, 1]), ((129, 257), [1]), ((32, 20, 64), [1])]
    return [Case({"tensor": f32(rng, s), "axis": np.array(a, t)}) for s, a in cases for t in (np.int32, np.int64)]


#: (input shape, block_shape, paddings): one, two and three blocked
#: dimensions, padding on either side, a dimension left whole (block 1),
#: 0-size batches, 1×1, primes, and no blocked dimension at all.
SPACE_BATCH = [
    ((2, 4, 4, 3), [2, 2], [[0, 0], [0, 0]]),
    ((1, 5, 7, 2), [2, 3], [[1, 0], [2, 0]]),
    ((3, 6, 1), [3], [[0, 0]]),
    ((2, 8, 3), [4], [[2, 2]]),
    ((0, 4, 4, 1), [2, 2], [[0, 0], [0, 0]]),
    ((2, 3, 5, 2, 2), [1, 2], [[0, 1], [1, 0]]),
    ((1, 1, 1, 1), [1, 1], [[0, 0], [0, 0]]),
    ((1, 1, 1), [2], [[1, 0]]),
    ((2, 3), [], np.zeros((0, 2), np.int64)),
    ((1, 7, 11, 13), [2, 2], [[1, 0], [0, 1]]),
    ((2, 3, 4, 5, 2), [2, 2, 3], [[1, 0], [0, 0], [1, 0]]),
    ((4, 31, 32, 16), [2, 2], [[2, 1], [2, 2]]),
]


def space_to_batch_cases(tf, rng):
    out = []
    for i, (shape, block, pads) in enumerate(SPACE_BATCH):
        t, u = (np.int32, np.int64) if i % 2 else (np.int64, np.int32)
        out.append(Case({"input": f32(rng, shape), "block_shape": np.array(block, t), "paddings": np.array(pads, u).reshape(-1, 2)}))
    return out


def batch_to_space_cases(tf, rng):
    """The inverse cases: each SpaceToBatchND output shape, cropped by the same amounts."""
    out = []
    for i, (shape, block, pads) in enumerate(SPACE_BATCH):
        pads = np.array(pads, np.int64).reshape(-1, 2)
        padded = [shape[1 + j] + pads[j].sum() for j in range(len(block))]
        batched = (shape[0] * int(np.prod(block)), *[p // b for p, b in zip(padded, block)], *shape[1 + len(block):])
        t, u = (np.int32, np.int64) if i % 2 else (np.int64, np.int32)
        out.append(Case({"input": f32(rng, batched), "block_shape": np.array(block, t), "crops": pads.astype(u)}))
    return out


def one_hot_cases(tf, rng):
    out = []
    for ishape, depth, axis in [((5,), 4, -1), ((2, 3), 7, -1), ((2, 3), 5, 0), ((0,), 3, -1), ((64,), 10, -1)]:
        for t in (np.int32, np.int64):
            idx = ints(rng, ishape, -1, depth + 1, t)  # out-of-range indices give all-off rows
            out.append(Case({"indices": idx, "depth": np.int32(depth), "on_value": np.float32(1.0), "off_value": np.float32(0.0), "axis": axis}))
    return out


def add_n_cases(tf, rng):
    return [Case({"inputs": [f32(rng, s) for _ in range(n)]}) for s, n in [((7, 13), 1), ((7, 13), 2), ((7, 13), 5), ((0, 3), 3), ((129, 257), 3)]]


def broadcast_to_cases(tf, rng):
    cases = [((3,), [2, 3]), ((1, 1), [4, 5]), ((7, 1), [7, 13]), ((), [2, 3]), ((0, 1), [0, 3]), ((2, 1, 3), [2, 5, 3])]
    return [Case({"input": f32(rng, s), "shape": np.array(t, np.int32)}) for s, t in cases]


def squeeze_cases(tf, rng):
    return [Case({"input": f32(rng, s), "axis": a}) for s, a in [((1, 3, 1), []), ((1, 3, 1), [0]), ((1, 3, 1), [-1]), ((0, 1), [1])]]


def expand_dims_cases(tf, rng):
    return [Case({"input": f32(rng, s), "axis": np.int32(a)}) for s, a in [((3,), 0), ((3, 4), -1), ((0, 2), 1), ((), 0)]]


def key_counter_cases(tf, rng):
    return [Case({"seed": np.array(s, t)}) for s in ([1, 2], [0, 0], [-5, 2**31 - 1]) for t in (np.int32, np.int64)]


def key_counter_alg_cases(tf, rng):
    return [Case({"seed": np.array(s, t)}) for s in ([1, 2], [-5, 2**31 - 1]) for t in (np.int32, np.int64)]


def random_v1_cases(tf, rng):
    return [
        Case({"shape": np.array(shape, np.int32), "seed": np.array(seed, t), "dtype": tf.float32})
        for shape in ([0], [7], [3, 5], [1001]) for seed in ([1, 2], [42, -7]) for t in (np.int32, np.int64)
    ]


def random_v2_cases(tf, rng):
    out = []
    for shape in ([0], [1], [7], [3, 5], [2, 3, 4], [1001]):
        for seed in ([1, 2], [42, 7]):
            for alg in (1, 3):
                with tf.device("/CPU:0"):
                    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=np.array(seed, np.int64))
                for dtype in (tf.float32, tf.float16, tf.bfloat16):
                    out.append(Case({"shape": np.array(shape, np.int32), "key": key.numpy(), "counter": counter.numpy(), "alg": np.int32(alg), "dtype": dtype}))
    return out


# Every op the sweep knows how to drive.
FUSED_OP = "_TfwasmFusedElementwise"


def fused_cases(tf, rng):
    """Keras' Adam update ``m·α / (√v + ε)`` on odd shapes; α and ε are
    tensors, not Python numbers (those would be folded into constants)."""
    out = []
    for m_shape, v_shape in [((0, 3), (3,)), ((1, 1), ()), ((7, 13), (7, 13)), ((3, 1), (1, 5)), ((129, 257), (257,))]:
        v = f32(rng, v_shape, 0.0, 4.0)
        v.flat[: min(2, v.size)] = 0.0
        out.append(Case({"m": f32(rng, m_shape), "v": v, "alpha": np.float32(1e-3), "eps": np.float32(1e-7)}))
    return out


def fused_function(tf):
    @tf.function
    def adam_update(m, v, alpha, eps):
        return m * alpha / (tf.sqrt(v) + eps)

    return adam_update


#: The ``fused_ops`` lists TensorFlow's CPU kernels implement for its fused
#: products (tfwasm's also take Tanh and Sigmoid after a convolution's bias:
#: tests/python/test_fused_ops.py checks those against the unfused ops).
FUSED_ACTIVATIONS = ("Relu", "Relu6", "Elu", "LeakyRelu")
FUSED_MATMUL_LISTS = [("BiasAdd",)] + [("BiasAdd", a) for a in FUSED_ACTIVATIONS + ("Tanh", "Sigmoid")]
FUSED_CONV_LISTS = [("BiasAdd",)] + [("BiasAdd", a) for a in FUSED_ACTIVATIONS] + [("FusedBatchNorm",), ("FusedBatchNorm", "Relu")]


def fused_matmul_cases(tf, rng):
    """Every list on a batch of 0, 1×1, primes and a product the pool
    splits, each shape with another transpose. (Not an empty inner
    dimension: the CPU's fused kernel then returns zeros where its unfused
    ops give the bias through the activation, as tfwasm's kernel does;
    tests/python/test_fused_ops.py compares that case with the unfused ops.)"""
    out = []
    shapes = [(0, 5, 3), (1, 1, 1), (7, 13, 5), (31, 17, 1), (131, 127, 97)]
    for fused_ops in FUSED_MATMUL_LISTS:
        for i, (m, k, n) in enumerate(shapes):
            ta, tb = bool(i & 1), bool(i & 2)
            a = f32(rng, (k, m) if ta else (m, k))
            b = f32(rng, (n, k) if tb else (k, n))
            out.append(Case({"a": a, "b": b, "args": [f32(rng, (n,))], "transpose_a": ta, "transpose_b": tb, "fused_ops": fused_ops}))
    return out


def fused_conv_cases(tf, rng):
    """Every list on four of Conv2D's cases in turn (a batch of 0, strides,
    dilations, 1×1, the pool); a batch norm's variance is positive."""
    out = []
    for j, fused_ops in enumerate(FUSED_CONV_LISTS):
        for i, f, s, p, d in CONV_CASES[j % 2::2]:
            channels = f[3]
            if fused_ops[0] == "FusedBatchNorm":
                args = [f32(rng, (channels,)) for _ in range(3)] + [f32(rng, (channels,), 0.5, 2.0)]
            else:
                args = [f32(rng, (channels,))]
            out.append(Case({"input": f32(rng, i), "filter": f32(rng, f), "args": args, "strides": s, "padding": p, "dilations": d, "fused_ops": fused_ops}))
    return out


def fused_product_function(tf, op: str):
    """A tf.function running TensorFlow's fused product ``op``, which has no
    ``tf.raw_ops`` entry: the node is made from its OpDef."""
    from tensorflow.python.framework import op_def_library

    @tf.function
    def run(args, fused_ops, **named):
        # The helper fills in none of these ops' defaults.
        attrs = dict(named, args=list(args), fused_ops=list(fused_ops), epsilon=1e-3, leakyrelu_alpha=0.3)
        if op == "_FusedConv2D":
            # `args` is typed by a list (TArgs), so num_args is not inferred.
            attrs.update(host_args=[], num_args=len(args), explicit_paddings=[], data_format="NHWC", filter_format="HWIO", use_cudnn_on_gpu=False)
        return op_def_library._apply_op_helper(op, name=op.lstrip("_"), **attrs)[3][0]

    return run


SCATTER_CASES = [
    # variable shape, indices (with duplicates), index dtype
    ((5, 3), [4, 0, 4, 2], np.int32),
    ((7,), [6, 6, 0], np.int64),
    ((1, 1), [0], np.int32),
    ((6, 2, 3), [[1, 5], [5, 1]], np.int64),
    ((0, 3), [], np.int32),
    ((129, 257), [128, 0, 64], np.int64),
]


def scatter_cases(tf, rng):
    out = []
    for shape, indices, index_type in SCATTER_CASES:
        idx = np.array(indices, index_type).reshape(np.shape(indices))
        out.append(Case({"value": f32(rng, shape), "indices": idx, "updates": f32(rng, idx.shape + shape[1:])}))
    return out


def scatter_function(tf, subtract: bool):
    """A variable made from ``value`` on the current device, updated by
    ``scatter_sub``/``scatter_add`` inside a tf.function, where the graph
    pass turns TensorFlow's ResourceScatter op into ours."""

    @tf.function(reduce_retracing=True)
    def step(v, indices, updates):
        rows = tf.IndexedSlices(updates, indices)
        v.scatter_sub(rows) if subtract else v.scatter_add(rows)
        return v.read_value()

    def run(value, indices, updates):
        return step(tf.Variable(value), indices, updates)

    return run


def ops_run(tf, thunk, device: str) -> tuple[Any, set[str]]:
    """Calls ``thunk`` and returns its result and the op types placed on
    ``device`` in the function graphs it ran, as TensorFlow optimized them
    (graph passes included)."""
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        result = thunk()
        metadata = ctx.export_run_metadata()
    finally:
        ctx.disable_run_metadata()
    # The metadata can also hold graphs of earlier calls on other devices.
    suffix = device.removeprefix("/")
    return result, {n.op for g in metadata.function_graphs for n in g.post_optimization_graph.node if n.device.endswith(suffix)}


SPECS: dict[str, Spec] = {
    # made by the graph pass from elementwise trees (see docs/kernels.md)
    FUSED_OP: Spec(fused_cases, via=fused_function),
    # TensorFlow's fused products (a graph pass makes them)
    "_FusedMatMul": Spec(fused_matmul_cases, PRODUCT, via=lambda tf: fused_product_function(tf, "_FusedMatMul")),
    "_FusedConv2D": Spec(fused_conv_cases, PRODUCT, via=lambda tf: fused_product_function(tf, "_FusedConv2D")),
    # sparse variable updates, rewritten by the graph pass
    "_TfwasmScatterAdd": Spec(scatter_cases, EXACT, via=lambda tf: scatter_function(tf, False)),
    "_TfwasmScatterSub": Spec(scatter_cases, EXACT, via=lambda tf: scatter_function(tf, True)),
    "ResourceScatterAdd": Spec(scatter_cases, EXACT, via=lambda tf: scatter_function(tf, False), runs_as="_TfwasmScatterAdd"),
    "ResourceScatterSub": Spec(scatter_cases, EXACT, via=lambda tf: scatter_function(tf, True), runs_as="_TfwasmScatterSub"),
    # elementwise binary
    "Add": Spec(binary()),
    "AddV2": Spec(joined(binary(), int_binary(np.int64))),
    "Sub": Spec(binary()),
    "Mul": Spec(joined(binary(), int_binary(np.int64))),
    "RealDiv": Spec(binary(make=away_from_zero)),
    "Div": Spec(binary(make=away_from_zero)),
    "DivNoNan": Spec(binary(make=with_zeros)),
    "Maximum": Spec(binary(rounded=True)),
    "Minimum": Spec(binary(rounded=True)),
    "Pow": Spec(binary(x_range=(0.1, 3.0), y_range=(-2.0, 2.0)), TRANSCENDENTAL),
    "SquaredDifference": Spec(binary()),
    "FloorMod": Spec(int_binary(np.int64, nonzero_y=True, extremes=False), EXACT),
    "BitwiseAnd": Spec(int_binary(np.int32, lo=-(2**31), hi=2**31 - 1, extremes=False), EXACT),
    "Equal": Spec(binary(rounded=True), EXACT),
    "NotEqual": Spec(binary(rounded=True), EXACT),
    "Less": Spec(binary(rounded=True), EXACT),
    "LessEqual": Spec(binary(rounded=True), EXACT),
    "Greater": Spec(binary(rounded=True), EXACT),
    "GreaterEqual": Spec(binary(rounded=True), EXACT),
    "LogicalAnd": Spec(logical_binary, EXACT),
    "LogicalOr": Spec(logical_binary, EXACT),
    "SelectV2": Spec(select_v2_cases, EXACT),
    "Select": Spec(select_v1_cases, EXACT),
    # gradients of activations
    "ReluGrad": Spec(grad_pair("gradients", "features")),
    "Relu6Grad": Spec(grad_pair("gradients", "features", (-2.0, 8.0))),
    "EluGrad": Spec(grad_pair("gradients", "outputs", (-0.99, 3.0))),
    "SeluGrad": Spec(grad_pair("gradients", "outputs", (-1.7, 3.0))),
    "SoftplusGrad": Spec(grad_pair("gradients", "features"), TRANSCENDENTAL),
    "LeakyReluGrad": Spec(grad_pair("gradients", "features", alpha=0.3)),
    "TanhGrad": Spec(y_dy((-1.0, 1.0))),
    "SigmoidGrad": Spec(y_dy((0.0, 1.0))),
    "RsqrtGrad": Spec(y_dy((0.1, 3.0))),
    "SqrtGrad": Spec(y_dy((0.1, 3.0))),
    "ReciprocalGrad": Spec(y_dy((0.1, 3.0))),
    "InvGrad": Spec(y_dy((0.1, 3.0))),
    "SoftsignGrad": Spec(grad_pair("gradients", "features")),
    # unary
    "Neg": Spec(unary()),
    "Abs": Spec(unary()),
    "Exp": Spec(unary(-10, 10), TRANSCENDENTAL),
    "Log": Spec(unary(0.01, 10), TRANSCENDENTAL),
    "Log1p": Spec(unary(-0.99, 10), TRANSCENDENTAL),
    "Sqrt": Spec(unary(0.0, 10)),
    "Rsqrt": Spec(unary(0.01, 10), TRANSCENDENTAL),
    "Square": Spec(unary()),
    "Reciprocal": Spec(unary(0.1, 3.0)),
    "Inv": Spec(unary(0.1, 3.0)),
    "Tanh": Spec(unary(-6, 6), TRANSCENDENTAL),
    "Sigmoid": Spec(unary(-10, 10), TRANSCENDENTAL),
    "Erf": Spec(unary(-3, 3), TRANSCENDENTAL),
    "Sin": Spec(unary(-10, 10), TRANSCENDENTAL),
    "Cos": Spec(unary(-10, 10), TRANSCENDENTAL),
    "Tan": Spec(unary(-1.5, 1.5), TRANSCENDENTAL),
    # Down to ~1e-38 for x near 9 (relative tolerance), and 2 - tiny for x < -4.
    "Erfc": Spec(unary(-6, 9.2), TRANSCENDENTAL),
    "Sign": Spec(unary(), EXACT),
    "Floor": Spec(unary(), EXACT),
    "Ceil": Spec(unary(), EXACT),
    "Round": Spec(unary(-5, 5), EXACT),
    "IsNan": Spec(unary(), EXACT),
    "IsFinite": Spec(unary(), EXACT),
    "ZerosLike": Spec(unary(), EXACT),
    "OnesLike": Spec(unary(), EXACT),
    "LogicalNot": Spec(lambda tf, rng: [Case({"x": boolean(rng, s)}) for s in UNARY_SHAPES], EXACT),
    "Cast": Spec(cast_cases, EXACT),
    "Bitcast": Spec(bitcast_cases, EXACT),
    "Relu": Spec(activation()),
    "Relu6": Spec(activation(-2, 8)),
    "Elu": Spec(activation(), TRANSCENDENTAL),
    "Selu": Spec(activation(), TRANSCENDENTAL),
    "Softplus": Spec(activation(-25, 25), TRANSCENDENTAL),
    "Softsign": Spec(activation()),
    "LeakyRelu": Spec(activation(alpha=0.3)),
    # reductions
    "Sum": Spec(reduce_cases(), REDUCTION),
    "Mean": Spec(reduce_cases(), REDUCTION),
    "Max": Spec(reduce_cases(), EXACT),
    "Min": Spec(reduce_cases(), EXACT),
    "Prod": Spec(joined(reduce_cases(prod_values), reduce_cases(prod_ints)), REDUCTION),
    "All": Spec(bool_reduce_cases, EXACT),
    "Any": Spec(bool_reduce_cases, EXACT),
    "ArgMax": Spec(arg_cases, EXACT),
    "ArgMin": Spec(arg_cases, EXACT),
    "Cumsum": Spec(scan_cases, EXACT),
    "InTopKV2": Spec(in_top_k_cases, EXACT),
    "Range": Spec(range_cases, EXACT),
    "TopKV2": Spec(top_k_cases, EXACT),
    "ScatterNd": Spec(scatter_nd_cases, EXACT),
    "ResizeBilinear": Spec(resize_bilinear_cases, EXACT),
    "ImageProjectiveTransformV3": Spec(projective_transform_cases, EXACT),
    "ResizeNearestNeighbor": Spec(resize_nearest_cases, EXACT),
    "ResizeNearestNeighborGrad": Spec(resize_nearest_grad_cases, EXACT),
    # Bit-equal but where many outputs land on one input pixel (corners of a
    # 1-pixel image): TensorFlow sums those in another order.
    "ResizeBilinearGrad": Spec(resize_bilinear_grad_cases, REDUCTION),
    "Cumprod": Spec(scan_cases, EXACT),
    # linear algebra and NN
    "MatMul": Spec(matmul_cases, PRODUCT),
    "BatchMatMulV2": Spec(batch_matmul_cases, PRODUCT),
    "Einsum": Spec(einsum_cases, PRODUCT),
    "BiasAdd": Spec(bias_add_cases),
    "BiasAddGrad": Spec(bias_add_grad_cases, REDUCTION),
    "Softmax": Spec(softmax_cases, TRANSCENDENTAL),
    "LogSoftmax": Spec(softmax_cases, TRANSCENDENTAL),
    "SoftmaxCrossEntropyWithLogits": Spec(xent_cases, REDUCTION),
    "SparseSoftmaxCrossEntropyWithLogits": Spec(sparse_xent_cases, REDUCTION),
    "Conv2D": Spec(conv_cases, PRODUCT),
    "Conv2DBackpropInput": Spec(conv_input_grad_cases, PRODUCT),
    "Conv2DBackpropFilter": Spec(conv_filter_grad_cases, PRODUCT),
    "DepthwiseConv2dNative": Spec(depthwise_cases, PRODUCT),
    "DepthwiseConv2dNativeBackpropInput": Spec(depthwise_input_grad_cases, PRODUCT),
    "DepthwiseConv2dNativeBackpropFilter": Spec(depthwise_filter_grad_cases, PRODUCT),
    "MaxPool": Spec(pool_cases("input", POOL_CASES), EXACT),
    "MaxPoolGrad": Spec(max_pool_grad_cases("MaxPool", POOL_CASES), EXACT),
    "AvgPool": Spec(pool_cases("value", POOL_CASES), REDUCTION),
    "AvgPoolGrad": Spec(avg_pool_grad_cases("AvgPool", "value", POOL_CASES), REDUCTION),
    "Conv3D": Spec(conv3d_cases, PRODUCT),
    "Conv3DBackpropInputV2": Spec(conv3d_input_grad_cases, PRODUCT),
    "Conv3DBackpropFilterV2": Spec(conv3d_filter_grad_cases, PRODUCT),
    "MaxPool3D": Spec(pool_cases("input", POOL3D_CASES), EXACT),
    "MaxPool3DGrad": Spec(max_pool_grad_cases("MaxPool3D", POOL3D_CASES), EXACT),
    "AvgPool3D": Spec(pool_cases("input", POOL3D_CASES), EXACT),
    "AvgPool3DGrad": Spec(avg_pool_grad_cases("AvgPool3D", "input", POOL3D_CASES), EXACT),
    "FusedBatchNormV3": Spec(batch_norm_cases, PRODUCT),
    "FusedBatchNormGradV3": Spec(batch_norm_grad_cases, PRODUCT),
    # data movement
    "Transpose": Spec(transpose_cases, EXACT),
    "ConcatV2": Spec(concat_cases, EXACT),
    "Pack": Spec(joined(pack_cases, pack_int_bool_cases), EXACT),
    "Unpack": Spec(unpack_cases, EXACT),
    "Split": Spec(split_cases, EXACT),
    "SplitV": Spec(split_v_cases, EXACT),
    "Slice": Spec(slice_cases, EXACT),
    "StridedSlice": Spec(joined(strided_slice_cases, strided_slice_int_cases), EXACT),
    "StridedSliceGrad": Spec(strided_slice_grad_cases, EXACT),
    "Tile": Spec(tile_cases, EXACT),
    "Pad": Spec(pad_cases, EXACT),
    "PadV2": Spec(pad_v2_cases, EXACT),
    "Fill": Spec(fill_cases, EXACT),
    "TensorScatterUpdate": Spec(tensor_scatter_update_cases, EXACT),
    "GatherV2": Spec(gather_cases, EXACT),
    # Each segment summed in the order of the ids, as on the CPU: bit for bit.
    "UnsortedSegmentSum": Spec(unsorted_segment_sum_cases, EXACT),
    "ReverseV2": Spec(reverse_v2_cases, EXACT),
    "OneHot": Spec(one_hot_cases, EXACT),
    "SpaceToBatchND": Spec(space_to_batch_cases, EXACT),
    "BatchToSpaceND": Spec(batch_to_space_cases, EXACT),
    "AddN": Spec(add_n_cases, REDUCTION),
    "BroadcastTo": Spec(broadcast_to_cases, EXACT),
    "Squeeze": Spec(squeeze_cases, EXACT),
    "ExpandDims": Spec(expand_dims_cases, EXACT),
    "Snapshot": Spec(lambda tf, rng: [Case({"input": f32(rng, s)}) for s in UNARY_SHAPES], EXACT),
    # stateless random: bit-identical to the CPU
    "StatelessRandomGetKeyCounter": Spec(key_counter_cases, EXACT),
    "StatelessRandomGetKeyCounterAlg": Spec(key_counter_alg_cases, EXACT),
    "StatelessRandomUniform": Spec(random_v1_cases, EXACT),
    "StatelessRandomNormal": Spec(random_v1_cases, EXACT),
    "StatelessTruncatedNormal": Spec(random_v1_cases, EXACT),
    "StatelessRandomUniformV2": Spec(random_v2_cases, EXACT),
    "StatelessRandomNormalV2": Spec(random_v2_cases, EXACT),
    "StatelessTruncatedNormalV2": Spec(random_v2_cases, EXACT),
}


# ---------------------------------------------------------------------------
# Running


def device_type() -> str:
    return os.environ.get("TFWASM_DEVICE_TYPE", "WASM")


def registered_ops(device: str) -> dict[str, list[dict[str, list[str]]]]:
    """op → its registrations for ``device``, each as {type attr: [dtype names]}."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.python.framework import kernels

    ops: dict[str, list[dict[str, list[str]]]] = {}
    for kernel in kernels.get_all_registered_kernels().kernel:
        if kernel.device_type != device:
            continue
        constraints = {
            c.name: [types_pb2.DataType.Name(t).removeprefix("DT_").lower() for t in c.allowed_values.list.type]
            for c in kernel.constraint
        }
        ops.setdefault(kernel.op, []).append(constraints)
    return ops


def describe(args: dict[str, Any]) -> tuple[str, str]:
    """(dtypes, shapes) of a case's array arguments."""
    shapes, dtypes, attrs = [], [], []
    for name, value in args.items():
        arrays = value if isinstance(value, list) else [value]
        if not all(isinstance(a, (np.ndarray, np.generic)) for a in arrays):
            attrs.append(f"{name}={getattr(value, 'name', value)}".replace(" ", ""))
            continue
        for i, a in enumerate(arrays):
            a = np.asarray(a)
            label = f"{name}[{i}]" if isinstance(value, list) else name
            shapes.append(f"{label}{list(a.shape)}")
            dtypes.append(str(a.dtype))
    unique = sorted(set(dtypes), key=dtypes.index)
    return "/".join(unique), " ".join(shapes + attrs)


def as_list(result) -> list:
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


#: Units in the last place of each narrow type's results (2^-10, 2^-7),
#: and the smallest normal float16 (the bound on an absolute error near 0).
NARROW_ULP = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
FLOAT16_TINY = 2.0**-14


def narrow_tolerance(tol: tuple[float, float], dtype: str) -> tuple[float, float]:
    """The tolerance of an op's narrow cases, from its float32 one.

    A narrow case is checked against the CPU's float32 kernel on the same
    (widened) inputs, rounded to the narrow type: what tfwasm promises. Two
    float32 results within the op's tolerance can round to neighbouring
    narrow values, so one unit in the last place is added; exact ops stay
    exact. (TensorFlow's own narrow kernels round partial results too, e.g.
    ``1 - y·y`` inside ``TanhGrad``, and are less accurate than that.)
    """
    if tol == EXACT:
        return EXACT
    rtol, atol = tol
    return (rtol + NARROW_ULP[dtype], max(atol, FLOAT16_TINY))


def retyped_cases(tf, op: str, cases: list[Case], types: dict[str, Callable]) -> list[tuple[str, Case]]:
    """Each float32 case again with its ``T``-typed (``Tparams`` for a
    gather) inputs converted by each of ``types`` (type name → converter of
    a float32 array), and ``TInput``-typed ones too (``MaxPool3DGrad``'s
    forward tensors, which TensorFlow types like its gradient); the other
    inputs (e.g. batch norm's float32 ``U`` ones) stay. A case with such an input that is not float32 data is left
    out."""
    import inspect

    from tensorflow.python.framework import op_def_registry

    inputs = op_def_registry.get(op).input_arg
    attr = data_attr(op)
    # raw_ops take the inputs first, in the OpDef's order, under Python names
    # that may differ (`Select`'s `t`, `e` are `x`, `y`).
    names = list(inspect.signature(getattr(tf.raw_ops, op)).parameters)
    t_inputs = {names[i] for i, a in enumerate(inputs) if a.type_attr in (attr, "TInput")}
    out = []
    for name, convert in types.items():
        for case in cases:
            args = dict(case.args)
            for key in t_inputs & args.keys():
                value = args[key]
                values = value if isinstance(value, list) else [value]
                if not all(isinstance(v, (np.ndarray, np.generic)) and v.dtype == np.float32 for v in values):
                    break
                converted = [convert(np.asarray(v)) for v in values]
                args[key] = converted if isinstance(value, list) else converted[0]
            else:
                out.append((name, Case(args, case.compare)))
    return out


def data_attr(op: str) -> str:
    """The type attribute of an op's data inputs: ``T``, or a gather's ``Tparams``."""
    from tensorflow.python.framework import op_def_registry

    return "Tparams" if any(a.type_attr == "Tparams" for a in op_def_registry.get(op).input_arg) else "T"


def narrow_cases(tf, op: str, cases: list[Case]) -> list[tuple[str, Case]]:
    """Each float32 case again in float16 and in bfloat16."""
    types = {"float16": np.float16, "bfloat16": tf.bfloat16.as_numpy_dtype}
    return retyped_cases(tf, op, cases, {name: (lambda x, t=t: x.astype(t)) for name, t in types.items()})


#: The other types the kernels that only move elements take (they copy
#: elements as words of their width), by TensorFlow's name for each, with
#: how a float32 case's data becomes that type. These cases are checked
#: exactly against the CPU device's own kernel for the type.
MOVED_TYPES: dict[str, Callable] = {
    "double": lambda x: x.astype(np.float64) * np.float64(1 + 2**-40),  # bits float32 lacks
    "int64": lambda x: (np.round(x) * 2**33).astype(np.int64),  # beyond int32
    "uint8": lambda x: np.round(np.abs(x) * 40).astype(np.uint8),
    "uint64": lambda x: (np.round(np.abs(x)) * 2**40).astype(np.uint64),
    "bool": lambda x: x > 0,
}


def moved_type_cases(tf, op: str, cases: list[Case], registrations: list[dict[str, list[str]]]) -> list[tuple[str, Case]]:
    """Each float32 case again in each of [`MOVED_TYPES`] registered for the op."""
    registered = {t for reg in registrations for attr in ("T", "Tparams") for t in reg.get(attr, [])}
    types = {name: convert for name, convert in MOVED_TYPES.items() if name in registered}
    return retyped_cases(tf, op, cases, types) if types else []


def widen_arg(tf, value):
    """A float16/bfloat16 tensor (or a list of them) as float32 (exact);
    anything else as it is."""
    if isinstance(value, list):
        return [widen_arg(tf, v) for v in value]
    if getattr(value, "dtype", None) in (tf.float16, tf.bfloat16):
        return tf.cast(value, tf.float32)
    return value


def has_narrow_registration(registrations: list[dict[str, list[str]]]) -> bool:
    return any(
        narrow in reg.get(attr, []) for reg in registrations for attr in ("T", "Tparams") for narrow in ("float16", "bfloat16")
    )


def run_case(tf, op: str, case: Case, spec: Spec, wasm: str, narrow: str | None = None) -> tuple[float | None, bool, str]:
    fn = spec.via(tf) if spec.via else getattr(tf.raw_ops, op)
    tol = narrow_tolerance(spec.tol, narrow) if narrow else spec.tol

    def tensors():
        # Inputs are made on the CPU; TensorFlow copies what the kernel
        # needs on the device (host-memory arguments stay on the host).
        with tf.device("/CPU:0"):
            return {
                k: ([tf.constant(x) for x in v] if isinstance(v, list) and v and isinstance(v[0], np.ndarray)
                    else tf.constant(v) if isinstance(v, (np.ndarray, np.generic)) else v)
                for k, v in case.args.items()
            }

    args = tensors()
    with tf.device("/CPU:0"):
        # A narrow case's reference is the CPU's float32 kernel on the
        # widened inputs, each result rounded below to the type WASM gives.
        cpu_args = {k: widen_arg(tf, v) for k, v in args.items()} if narrow else args
        expected = [t.numpy() for t in as_list(fn(**cpu_args))]
    with tf.device(wasm):
        first, ran = ops_run(tf, lambda: as_list(fn(**args)), wasm)
        second = as_list(fn(**args))
    notes = []
    expected_op = spec.runs_as or op
    if spec.via and expected_op not in ran:
        notes.append(f"{expected_op} did not run (the function ran {sorted(ran)})")
    off_device = [i for i, t in enumerate(first) if not t.device.endswith(wasm.removeprefix("/"))]
    if off_device:
        notes.append(f"output {off_device} on {first[off_device[0]].device}")
    got, again = [t.numpy() for t in first], [t.numpy() for t in second]
    if narrow:
        expected = [e.astype(g.dtype) if e.dtype == np.float32 and g.dtype != np.float32 else e for e, g in zip(expected, got)]
    compare_idx = case.compare if case.compare is not None else range(len(expected))
    worst, ok, more = compare(expected, got, again, tol, compare_idx)
    return worst, ok and not off_device and not (spec.via and expected_op not in ran), "; ".join(notes + more)


def compare(expected: list, got: list, again: list, tol: tuple[float, float], indexes) -> tuple[float | None, bool, list[str]]:
    """Compares the WASM outputs (two runs) with the CPU's: (max error, ok, notes).

    Floats: ``|got - expected| <= atol + rtol·|expected|`` elementwise, NaN
    where the CPU has NaN, the same infinities. Everything else: equal.
    The two WASM runs must be bit-identical.
    """
    rtol, atol = tol
    worst, ok, notes = 0.0, True, []
    for i in indexes:
        e, g, g2 = np.asarray(expected[i]), np.asarray(got[i]), np.asarray(again[i])
        if e.shape != g.shape or e.dtype != g.dtype:
            return None, False, [f"output {i}: {g.dtype}{list(g.shape)}, CPU gives {e.dtype}{list(e.shape)}"]
        if g.tobytes() != g2.tobytes():
            ok = False
            notes.append(f"output {i} differs between two runs")
        if e.size == 0:
            continue
        if e.dtype.name == "bfloat16":  # numpy sees it as opaque ("V")
            e, g = e.astype(np.float32), g.astype(np.float32)
        if e.dtype.kind in "fc":
            e64, g64 = e.astype(np.float64), g.astype(np.float64)
            both_nan = np.isnan(g64) & np.isnan(e64)
            same_inf = np.isinf(e64) & (g64 == e64)
            with np.errstate(invalid="ignore"):
                diff = np.abs(g64 - e64)
            diff = np.where(both_nan | same_inf, 0.0, diff)
            diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only
            worst = max(worst, float(diff.max()))
            if not np.all(diff <= atol + rtol * np.where(np.isfinite(e64), np.abs(e64), 0.0)):
                ok = False
                notes.append(f"output {i} beyond rtol={rtol:g} atol={atol:g}")
        else:
            mismatches = int(np.count_nonzero(g != e))
            worst = max(worst, float(mismatches))
            if mismatches:
                ok = False
                notes.append(f"output {i}: {mismatches} elements differ")
    return worst, ok, notes


def sweep(tf, ops: list[str] | None = None, seed: int = 0) -> list[Row]:
    wasm = f"/device:{device_type()}:0"
    registered = registered_ops(device_type())
    names = sorted(registered) if not ops else ops
    rows: list[Row] = []
    tf.config.set_soft_device_placement(False)
    for op in names:
        if op not in registered:
            rows.append(Row(op, "-", "-", None, False, f"not registered for {device_type()}"))
            continue
        spec = SPECS.get(op)
        if spec is None:
            dtypes = ", ".join(sorted({"/".join(t for ts in reg.values() for t in ts) or "-" for reg in registered[op]}))
            rows.append(Row(op, dtypes, "-", None, False, "no sweep case for this op"))
            continue
        rng = np.random.default_rng(seed)
        cases = [(None, case) for case in spec.cases(tf, rng)]
        float_cases = [case for _, case in cases]
        if op != "Cast" and has_narrow_registration(registered[op]):
            cases += narrow_cases(tf, op, float_cases)
        if op != "Cast":
            cases += [(None, case) for _, case in moved_type_cases(tf, op, float_cases, registered[op])]
        for narrow, case in cases:
            dtype, shapes = describe(case.args)
            try:
                error, ok, note = run_case(tf, op, case, spec, wasm, narrow)
            except Exception as exc:  # a failure of the op is a row, not the end of the sweep
                message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                error, ok, note = None, False, f"{type(exc).__name__}: {message[:160]}"
            rows.append(Row(op, dtype, shapes, error, ok, note))
    return rows


def format_rows(rows: list[Row], quiet: bool = False) -> str:
    header = ("op", "dtype", "shapes", "max error", "result")
    body = [
        (r.op, r.dtype, r.shapes, "-" if r.error is None else f"{r.error:.3g}", "pass" if r.ok else f"FAIL {r.note}".strip())
        for r in rows
        if not quiet or not r.ok
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        lines.append("  ".join(c.ljust(w) for c, w in zip(b, widths)).rstrip())
    failed = sum(not r.ok for r in rows)
    ops = len({r.op for r in rows})
    lines.append("")
    lines.append(f"{len(rows)} cases over {ops} ops: {len(rows) - failed} passed, {failed} failed")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfwasm sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma-separated op names (default: every op registered for the device)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true", help="print only failing rows and the summary")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The reference is TensorFlow's own CPU kernels (Eigen). Its oneDNN
    # replacements, on by default, break on edge cases on some CPUs: on an
    # AVX-512 machine TensorFlow 2.21's oneDNN Conv2D of a batch of 0 returns
    # the input's channel count, and its DepthwiseConv2dNative refuses an
    # empty filter. Set TF_ENABLE_ONEDNN_OPTS=1 to compare against oneDNN.
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    import tensorflow as tf

    if not tf.config.list_physical_devices(device_type()):
        print(f"tfwasm sweep: TensorFlow lists no {device_type()} device: is the plugin installed?", file=sys.stderr)
        return 2
    rows = sweep(tf, args.ops.split(",") if args.ops else None, args.seed)
    print(format_rows(rows, args.quiet))
    return 0 if all(r.ok for r in rows) else 1
