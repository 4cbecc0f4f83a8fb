"""The ``libtfwasm.so`` TensorFlow mapped into this process, for ctypes."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def library() -> ctypes.CDLL:
    """The loaded plugin: dlopen of the same file returns TensorFlow's handle,
    never a second copy."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            path = line.rstrip("\n").split(maxsplit=5)[-1]
            if path.endswith("/libtfwasm.so"):
                return ctypes.CDLL(path)
    raise RuntimeError("tfwasm: libtfwasm.so is not loaded in this process (import tensorflow first)")
